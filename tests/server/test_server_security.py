"""Signed models, model folders, and the first refusals of code named in data (the rest of those:
test_server_registered_code.py)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from _sidecar import ServerThread, auth, settings
from _support import CLI
from forewarn.errors import ModelFileError
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.signing import SignatureError, generate_keypair, load_private_key, load_trusted_keys


def crafted(model_path: Path, predicate: str) -> dict[str, Any]:
    """The model with predicate ``a`` turned into Python ``predicate``, its checksum recomputed:
    what an attacker who can write a model file hands the server."""
    document: dict[str, Any] = orjson.loads(model_path.read_bytes())
    assert "  a: 'state.a'\n" in document["spec"]
    document["spec"] = document["spec"].replace("  a: 'state.a'\n", f"  a: {{python: '{predicate}'}}\n")
    document["checksum"] = _checksum(document)
    return document


@pytest.fixture
def rce_path(tmp_path: Path, toy_path: Path) -> Path:
    path = tmp_path / "rce.json"
    path.write_bytes(orjson.dumps(crafted(toy_path, "subprocess:check_output")))
    return path


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


def test_no_field_rides_on_a_valid_signature(tmp_path: Path, toy_path: Path, keys: tuple[Path, Path]) -> None:
    """Issue 36: a field added to the ``signature`` object (the one part of a document a signature does not
    cover) was accepted with the signature still valid. A signature holds its four fields only; an unknown
    field anywhere else is signed (an edit breaks the signature) and refused by the schema even when signed."""
    from forewarn.guard.signing import sign_document

    private, public = keys
    key, trusted = load_private_key(private), load_trusted_keys([public])
    body = orjson.loads(toy_path.read_bytes())
    signed = sign_document(body, key)
    assert GuardModel.from_document(signed, trusted_keys=trusted).signed_at == signed["signature"]["signed_at"]
    riding = {**signed, "signature": {**signed["signature"], "expires": "never"}}
    with pytest.raises(SignatureError, match=r"^<model>: signature\.expires: not a field of a signature \(algorithm, "
                                             r"key_id, signed_at, value\); no signature covers it, so it is refused$"):
        GuardModel.from_document(riding, trusted_keys=trusted)
    with pytest.raises(ModelFileError, match=r"^<model>: field signature\.expires: Extra inputs are not permitted$"):
        GuardModel.from_document(riding, trusted_keys=())  # without keys too: the file is not one Forewarn wrote
    added = {**signed, "note": "unsigned"}
    added["checksum"] = _checksum(added)
    with pytest.raises(SignatureError, match="modified after it was signed"):  # covered: the edit shows
        GuardModel.from_document(added, trusted_keys=trusted)
    with pytest.raises(ModelFileError, match=r"^<model>: field note: Extra inputs are not permitted$"):
        GuardModel.from_document(sign_document(added, key), trusted_keys=trusted)  # signed, yet unknown
    models = tmp_path / "models"
    models.mkdir()
    config = settings(tmp_path / "forewarn.db", {"toy": GuardModel.load(toy_path).save(
        models / "signed.json", sign_with=key)}, trusted_keys=(public,), model_dirs=(models,))
    with ServerThread(config) as server, httpx.Client(base_url=server.url) as http:
        response = http.post("/v1/models", json={"name": "r", "document": riding}, headers=auth("admin"))
        assert response.status_code == 422, response.text
        assert response.json()["error"]["message"] == ("upload by admin-bob: signature.expires: not a field of a "
                                                       "signature (algorithm, key_id, signed_at, value); no "
                                                       "signature covers it, so it is refused")
        assert "r" not in [m["name"] for m in http.get("/v1/models", headers=auth("admin")).json()["models"]]


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
    assert result.returncode == 2 and "'subprocess:check_output' is an import path" in result.stderr
    result = forewarn_here("serve", "--model", toy_path, "--trusted-key", keys[1], *common)
    assert result.returncode == 2 and "the model is not signed" in result.stderr
    assert not (tmp_path / "x.db").exists()


def test_a_directory_swapped_for_a_symlink_never_lets_a_load_out(tmp_path: Path, toy_path: Path,
                                                                 builtin_path: Path) -> None:
    """The race of issue 22: a folder on the path swapped for a symbolic link (and back) while loads
    run. Every load either reads the file inside or is refused; none reads the file outside."""
    import errno
    import os
    import threading

    from forewarn.errors import ModelFileError
    from forewarn.server.models_registry import LoadRules, read_confined

    models, outside = tmp_path / "models", tmp_path / "outside"
    (models / "sub").mkdir(parents=True)
    outside.mkdir()
    inside_bytes, outside_bytes = toy_path.read_bytes(), builtin_path.read_bytes()
    (models / "sub" / "m.json").write_bytes(inside_bytes)
    (outside / "m.json").write_bytes(outside_bytes)
    rules = LoadRules(model_dirs=(models,))
    target, held = models / "sub", models / "held"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(target, held)
            os.symlink(outside, target)
            os.unlink(target)
            os.rename(held, target)

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    seen = {"inside": 0, "link": 0, "missing": 0}
    try:
        for _ in range(200_000):
            try:
                fd = rules.open_confined(str(target / "m.json"))
            except ModelFileError as exc:
                cause = exc.__cause__
                assert isinstance(cause, OSError), exc
                if cause.errno in (errno.ELOOP, errno.ENOTDIR):
                    assert "symbolic links are not followed" in str(exc)
                    seen["link"] += 1
                else:
                    assert cause.errno == errno.ENOENT, exc
                    seen["missing"] += 1
                continue
            with os.fdopen(fd, "rb") as handle:
                assert handle.read() == inside_bytes  # never the file outside
            seen["inside"] += 1
            if seen["inside"] >= 50 and seen["link"] >= 50:
                break
    finally:
        stop.set()
        swapper.join(10)
    assert seen["inside"] >= 50 and seen["link"] >= 50, seen  # both sides of the race were hit
    if held.exists():
        os.rename(held, target)
    # the whole load (parse, compile) goes through the same descriptor
    assert read_confined(str(target / "m.json"), rules)[0] == inside_bytes


def test_rollback_protection(tmp_path: Path, toy_path: Path, keys: tuple[Path, Path]) -> None:
    """With trusted keys, a model signed before the one served under a name is refused (409) unless the
    admin sets allow_rollback; the signing time is signed, and survives a restart."""
    import base64

    from forewarn.guard.signing import canonical_body, sign_document

    private, public = keys
    key = load_private_key(private)
    body = orjson.loads(toy_path.read_bytes())
    older, newer = sign_document(body, key, signed_at=1_700_000_000), sign_document(body, key, signed_at=1_800_000_000)
    untimed = {**body, "signature": {**older["signature"], "value": base64.b64encode(
        key.sign(canonical_body(body))).decode()}}  # as Forewarn 0.1 signed: no time
    del untimed["signature"]["signed_at"]
    forged = {**older, "signature": {**older["signature"], "signed_at": 1_900_000_000}}  # the time edited
    models = tmp_path / "models"
    models.mkdir()
    (models / "newer.json").write_bytes(orjson.dumps(newer))
    config = settings(tmp_path / "forewarn.db", {"toy": models / "newer.json"}, trusted_keys=(public,),
                      model_dirs=(models,))

    def load(http: httpx.Client, document: dict[str, Any], **extra: Any) -> httpx.Response:
        return http.post("/v1/models", json={"name": "toy", "document": document, **extra}, headers=auth("admin"))

    with ServerThread(config) as server, httpx.Client(base_url=server.url) as http:
        assert http.get("/v1/models/toy", headers=auth("admin")).json()["signed_at"] == 1_800_000_000
        for document in (older, untimed):
            refused = load(http, document)
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["code"] == "older_model" and "\n" not in error["message"]
            assert "before the version served" in error["message"] and "allow_rollback: true" in error["message"]
        assert "signed without a signing time" in load(http, untimed).json()["error"]["message"]
        assert "signed at 2023-11-14T22:13:20+00:00" in load(http, older).json()["error"]["message"]
        forged_answer = load(http, forged)
        assert forged_answer.status_code == 422 and "modified after it was signed" in forged_answer.text
        assert load(http, newer).status_code == 200  # the same version again: no rollback
        assert load(http, older, allow_rollback=True).status_code == 200  # the admin says so
        assert http.get("/v1/models/toy", headers=auth("admin")).json()["signed_at"] == 1_700_000_000
        assert load(http, newer).status_code == 200  # forward again
    with ServerThread(config) as server, httpx.Client(base_url=server.url) as http:  # restarted: still protected
        assert load(http, older).status_code == 409
    unsigned_server = settings(tmp_path / "plain.db", {"toy": toy_path})
    with ServerThread(unsigned_server) as server, httpx.Client(base_url=server.url) as http:
        assert load(http, newer).status_code == 200 and load(http, older).status_code == 200  # no keys: no check


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_malformed_uploads_are_one_line_4xx(http: httpx.Client, toy_path: Path, tmp_path: Path,
                                            forewarn_here: CLI) -> None:
    """Each kind of malformed upload of issue 22 is a 422 with one line over HTTP (by document and by
    path), and one line with exit 2 on the CLI: never a 500, never a traceback."""
    import json

    good: dict[str, Any] = orjson.loads(toy_path.read_bytes())

    def variant(edit: Any) -> dict[str, Any]:
        document = copy.deepcopy(good)
        edit(document)
        try:
            document["checksum"] = _checksum(document)
        except TypeError:
            pass  # past what orjson writes: the checksum stays stale, as an attacker's would
        return document

    cases = {
        "unparseable unsafe": variant(lambda d: d.__setitem__("spec", d["spec"].replace("unsafe: 'a && b'",
                                                                                        "unsafe: 'a &&'"))),
        "300-deep value": variant(lambda d: d["provenance"].__setitem__("deep", _nested(300))),
        "300-deep top level": variant(lambda d: d.__setitem__("pac", _nested(300))),
        "integer past 64 bits": variant(lambda d: d.__setitem__("initial", [2**70])),
        "out-of-range PAC index": variant(lambda d: d["pac"]["states"][0].__setitem__("state", 10**6)),
        "negative PAC index": variant(lambda d: d["pac"]["states"][0].__setitem__("state", -1)),
        "PAC chain states past the model": variant(lambda d: d["pac"].__setitem__("chain_states", 10**9)),
    }
    for name, document in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        for body in ({"name": "m", "document": document}, {"name": "m", "path": str(path)}):
            response = http.post("/v1/models", content=json.dumps(body), headers={
                **auth("admin"), "Content-Type": "application/json"})
            assert 400 <= response.status_code < 500, (name, response.status_code, response.text[:300])
            message = response.json()["error"]["message"]
            assert "\n" not in message and len(message) < 2000, (name, message)
        for command in ("check", "states"):
            result = forewarn_here(command, path)
            assert result.returncode == 2 and "Traceback" not in result.stderr, (name, result.stderr[-500:])
            assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, (name, result.stderr)
