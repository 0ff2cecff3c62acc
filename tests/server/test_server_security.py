"""No code from data, signed models, model folders: an admin's upload, the CLI and a restart."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from _sidecar import ServerThread, auth, settings
from _support import CLI
from forewarn.errors import SpecError
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.signing import SignatureError, generate_keypair, load_private_key, load_trusted_keys
from forewarn.server.storage import Storage


def crafted(model_path: Path, predicate: str) -> dict[str, Any]:
    """The model with predicate ``a`` turned into Python ``predicate``, its checksum recomputed:
    what an attacker who can write a model file hands the server."""
    document = orjson.loads(model_path.read_bytes())
    assert "  a: 'state.a'\n" in document["spec"]
    document["spec"] = document["spec"].replace("  a: 'state.a'\n", f"  a: {{python: '{predicate}'}}\n")
    document["checksum"] = _checksum(document)
    return document


@pytest.fixture
def rce_path(tmp_path: Path, toy_path: Path) -> Path:
    path = tmp_path / "rce.json"
    path.write_bytes(orjson.dumps(crafted(toy_path, "subprocess:check_output")))
    return path


def test_a_model_naming_subprocess_is_refused_over_http(http: httpx.Client, rce_path: Path) -> None:
    for body in ({"name": "evil", "path": str(rce_path)}, {"name": "evil", "document": orjson.loads(rce_path.read_bytes())}):
        response = http.post("/v1/models", json=body, headers=auth("admin"))
        assert response.status_code == 422, response.text
        message = response.json()["error"]["message"]
        assert "'subprocess:check_output' is not allowed" in message
        assert "allow-list (allowed: none)" in message
    assert "evil" not in [m["name"] for m in http.get("/v1/models", headers=auth("admin")).json()["models"]]


def test_a_model_naming_subprocess_is_refused_on_the_cli(forewarn_here: CLI, rce_path: Path, tmp_path: Path) -> None:
    traces = tmp_path / "t.jsonl"
    traces.write_text('{"id": "r", "steps": [{"state": {"a": true, "b": 1}}]}\n', encoding="utf-8")
    result = forewarn_here("replay", traces, "--model", rce_path)
    assert result.returncode == 2, result.stderr
    assert "'subprocess:check_output' is not allowed" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_model_in_the_database_is_checked_again_at_restart(tmp_path: Path, builtin_path: Path, toy_path: Path,
                                                              rce_path: Path) -> None:
    # as if it had been loaded by an older server, or written into the database behind its back
    storage = Storage.open(tmp_path / "forewarn.db")
    storage.write_sync(Storage.put_model("evil", "e" * 16, str(rce_path), rce_path.read_bytes(), "old", current=True))
    storage.close()
    rce_path.unlink()  # the file is gone; the database copy is all there is
    with ServerThread(settings(tmp_path / "forewarn.db", {"builtin": builtin_path})) as server, \
            httpx.Client(base_url=server.url) as http:
        names = [m["name"] for m in http.get("/v1/models", headers=auth("admin")).json()["models"]]
        assert names == ["builtin"]  # not served: it names code nobody allowed


def test_a_module_planted_in_the_working_directory_is_never_imported(
        tmp_path: Path, toy_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forewarn.guard.runtime import Guard

    marker = tmp_path / "imported"
    (tmp_path / "planted_rce.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                             "def run(state):\n    return True\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")  # as `python -m` and uvicorn's --app-dir put it there
    model = GuardModel.from_document(crafted(toy_path, "planted_rce:run"))
    with pytest.raises(SpecError, match="module 'planted_rce' is not installed"):
        Guard(model, allow_python=["planted_rce"])  # even when the operator allowed the name
    assert not marker.exists()


def test_python_predicates_from_an_allowed_installed_module(tmp_path: Path, toy_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from forewarn.guard.runtime import Guard

    site = tmp_path / "site"
    site.mkdir()
    (site / "allowed_preds.py").write_text("def a(state):\n    return bool(state['a'])\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    model = GuardModel.from_document(crafted(toy_path, "allowed_preds:a"))
    guard = Guard(model, allow_python=["allowed_preds"])
    assert guard.predicates.evaluate({"a": True, "b": 5}) == 0b11
    monkeypatch.setenv("FOREWARN_PYTHON_PREDICATES", "allowed_preds")
    assert Guard(model).predicates.evaluate({"a": False, "b": 5}) == 0b10


# -- signatures ---------------------------------------------------------------------------


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public = tmp_path / "signing.pem", tmp_path / "signing.pub"
    generate_keypair(private, public)
    return private, public


def test_signed_round_trip_and_tampering(tmp_path: Path, toy_path: Path, keys: tuple[Path, Path]) -> None:
    private, public = keys
    trusted = load_trusted_keys([public])
    model = GuardModel.load(toy_path)
    signed = model.save(tmp_path / "signed.json", sign_with=load_private_key(private))
    assert GuardModel.load(signed, trusted_keys=trusted).dtmc.size == model.dtmc.size
    with pytest.raises(SignatureError, match="not signed"):
        GuardModel.load(toy_path, trusted_keys=trusted)
    # every risk set to 0 and the checksum recomputed: the checksum passes, the signature does not
    document = orjson.loads(signed.read_bytes())
    document["properties"][0]["values"] = [0.0] * len(document["properties"][0]["values"])
    for key in ("lower", "upper", "ci_low", "ci_high"):  # whatever would betray the edit goes too
        document["properties"][0][key] = None
    document["properties"][0].pop("markov_mismatch", None)  # flags need the intervals just removed
    document["checksum"] = _checksum(document)
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(orjson.dumps(document))
    GuardModel.load(tampered, trusted_keys=())  # without keys, only the checksum: it loads
    with pytest.raises(SignatureError, match="modified after it was signed"):
        GuardModel.load(tampered, trusted_keys=trusted)
    other_private, other_public = tmp_path / "other.pem", tmp_path / "other.pub"
    generate_keypair(other_private, other_public)
    with pytest.raises(SignatureError, match="not one of the trusted keys"):
        GuardModel.load(signed, trusted_keys=load_trusted_keys([other_public]))


def test_signing_on_the_cli(forewarn_here: CLI, tmp_path: Path, toy_traces: Path, toy_spec_path: Path,
                            keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    private, public = keys
    out = tmp_path / "m.json"
    assert forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", out, "--sign", private).returncode == 0
    assert orjson.loads(out.read_bytes())["signature"]["algorithm"] == "ed25519"
    assert forewarn_here("check", out, "--trusted-key", public).returncode == 0
    document = orjson.loads(out.read_bytes())
    document["alpha"] = 0.5
    document["checksum"] = _checksum(document)
    out.write_bytes(orjson.dumps(document))
    result = forewarn_here("check", out, "--trusted-key", public)
    assert result.returncode == 2 and "modified after it was signed" in result.stderr
    monkeypatch.setenv("FOREWARN_TRUSTED_KEYS", str(public))  # every command that loads a model
    result = forewarn_here("check", out)
    assert result.returncode == 2 and "modified after it was signed" in result.stderr
    result = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", out, "--sign", public)
    assert result.returncode == 2 and "not an unencrypted PEM private key" in result.stderr


def test_a_server_with_trusted_keys_serves_signed_models_only(tmp_path: Path, toy_path: Path,
                                                               keys: tuple[Path, Path]) -> None:
    private, public = keys
    models = tmp_path / "models"
    models.mkdir()
    signed = GuardModel.load(toy_path).save(models / "signed.json", sign_with=load_private_key(private))
    unsigned = models / "unsigned.json"
    unsigned.write_bytes(toy_path.read_bytes())
    config = settings(tmp_path / "forewarn.db", {"toy": signed}, trusted_keys=(public,), model_dirs=(models,))
    with ServerThread(config) as server, httpx.Client(base_url=server.url) as http:
        response = http.post("/v1/models", json={"name": "u", "path": str(unsigned)}, headers=auth("admin"))
        assert response.status_code == 422 and "not signed" in response.json()["error"]["message"]
        document = orjson.loads(signed.read_bytes())
        document["properties"][0]["values"][0] = 0.0
        document["checksum"] = _checksum(document)
        response = http.post("/v1/models", json={"name": "t", "document": document}, headers=auth("admin"))
        assert response.status_code == 422 and "modified after it was signed" in response.text
        response = http.post("/v1/models", json={"name": "s", "path": str(signed)}, headers=auth("admin"))
        assert response.status_code == 200, response.text
    with pytest.raises(SignatureError, match="not signed"):  # nor does an unsigned configured model start
        from forewarn.server.app import start
        start(settings(tmp_path / "other.db", {"toy": unsigned}, trusted_keys=(public,)))


def test_model_paths_stay_inside_model_dirs(tmp_path: Path, toy_path: Path, builtin_path: Path) -> None:
    models, outside = tmp_path / "models", tmp_path / "outside"
    models.mkdir()
    outside.mkdir()
    inside = models / "toy.json"
    inside.write_bytes(toy_path.read_bytes())
    (outside / "toy.json").write_bytes(toy_path.read_bytes())
    (models / "link.json").symlink_to(outside / "toy.json")
    (models / "up").symlink_to(outside)
    config = settings(tmp_path / "forewarn.db", {"builtin": builtin_path}, model_dirs=(models,))
    with ServerThread(config) as server, httpx.Client(base_url=server.url) as http:
        def load(path: Path | str) -> httpx.Response:
            return http.post("/v1/models", json={"name": "x", "path": str(path)}, headers=auth("admin"))

        assert load(inside).status_code == 200
        for escape in (outside / "toy.json", models / "link.json", models / "up" / "toy.json",
                       models / ".." / "outside" / "toy.json", "/etc/passwd"):
            response = load(escape)
            assert response.status_code == 422, escape
            assert "outside the configured model folders" in response.json()["error"]["message"], escape
    config = settings(tmp_path / "other.db", {"builtin": builtin_path}, model_dirs=())
    with ServerThread(config) as server, httpx.Client(base_url=server.url) as http:
        response = http.post("/v1/models", json={"name": "x", "path": str(inside)}, headers=auth("admin"))
        assert response.status_code == 422 and "no model_dirs are configured" in response.text
        upload = http.post("/v1/models", json={"name": "x", "document": orjson.loads(inside.read_bytes())},
                           headers=auth("admin"))
        assert upload.status_code == 200, upload.text
        sid = http.post("/v1/sessions", json={"model": "x"}, headers=auth("agent")).json()["id"]
        assert http.post(f"/v1/sessions/{sid}/observe", json={"state": {"a": True, "b": 1}},
                         headers=auth("agent")).status_code == 200


def test_401_comes_before_any_body_validation(http: httpx.Client) -> None:
    for method, path, content in [("POST", "/v1/sessions", b"{not json"), ("POST", "/v1/batch", b"[]"),
                                  ("POST", "/v1/sessions/s_x/observe", b"{"), ("POST", "/v1/models", b"{}"),
                                  ("POST", "/v1/approvals/a_x", b"nope"), ("GET", "/v1/sessions?limit=-1", b""),
                                  ("GET", "/v1/nothing-here", b"")]:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            response = http.request(method, path, content=content,
                                    headers={**headers, "Content-Type": "application/json"})
            assert response.status_code == 401, (method, path, response.status_code, response.text)
    assert http.post("/v1/sessions", content=b"{not json", headers={**auth("agent"), "Content-Type":
                                                                      "application/json"}).status_code == 422


def test_serve_refuses_such_models_before_binding(forewarn_here: CLI, rce_path: Path, toy_path: Path, tmp_path: Path,
                                                  keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from _sidecar import API_KEYS, free_port

    monkeypatch.setenv("FOREWARN_API_KEYS", API_KEYS)
    common = ["--db", tmp_path / "x.db", "--port", str(free_port())]
    result = forewarn_here("serve", "--model", rce_path, *common)
    assert result.returncode == 2 and "'subprocess:check_output' is not allowed" in result.stderr
    result = forewarn_here("serve", "--model", toy_path, "--trusted-key", keys[1], *common)
    assert result.returncode == 2 and "the model is not signed" in result.stderr
    assert not (tmp_path / "x.db").exists()
