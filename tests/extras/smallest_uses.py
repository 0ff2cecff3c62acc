"""The smallest real use of one extra, run by ``each_alone.py`` in an environment holding the core and that extra only.

``python smallest_uses.py EXTRA`` exits 0 when the use worked, 77 (with one line on why) when the machine lacks
what it needs beside Python packages (Java, PostgreSQL), and otherwise fails with the traceback: a
dependency the extra does not declare surfaces here as the ``ModuleNotFoundError`` a user would get.
Each use is real: a server is a process on 127.0.0.1 spoken to over HTTP or stdio, a report is a file
written. Nothing here imports the tests' helpers: only the core, the extra and the standard library
are importable in these environments.
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SKIP = 77
HERE = Path.cwd()  # each_alone.py runs each use in a fresh folder of its own

# The tests' toy domain (tests/_support.py): unsafe when both predicates hold.
SPEC = """\
name: toy
predicates:
  a: 'state.a'
  b: 'state.b > 2'
unsafe: 'a && b'
guard:
  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}
"""
RUNS = [[0, 1, 3, 0], [0, 2, 2], [0, 1, 0], [0, 2, 1, 3], [3, 0]]


def state(bits: int) -> dict[str, Any]:
    return {"a": bool(bits & 1), "b": 5 if bits & 2 else 0}


def runs() -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "steps": [{"state": state(b), "action": f"step {j}", "t": float(j)}
                                      for j, b in enumerate(bits)]} for i, bits in enumerate(RUNS)]


def toy_files() -> tuple[Path, Path]:
    """The toy spec and its runs as JSONL."""
    spec, traces = HERE / "spec.yaml", HERE / "runs.jsonl"
    spec.write_text(SPEC)
    traces.write_text("".join(json.dumps(r) + "\n" for r in runs()))
    return spec, traces


def forewarn(*args: str | Path, **options: Any) -> subprocess.CompletedProcess[str]:
    """``forewarn ARGS`` in a process of its own; its output is shown when it fails."""
    done = subprocess.run([sys.executable, "-m", "forewarn", *map(str, args)], capture_output=True, text=True,
                          timeout=600, **options)
    if done.returncode != 0:
        raise SystemExit(f"forewarn {' '.join(map(str, args))}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done


def toy_model() -> Path:
    spec, traces = toy_files()
    forewarn("learn", traces, "--spec", spec, "-o", HERE / "model.json")
    return HERE / "model.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@contextmanager
def process(args: list[str], ready: Callable[[], bool], timeout: float = 60.0) -> Iterator[subprocess.Popen[str]]:
    """A server process, waited for until ``ready()``; stopped (and its output shown if it died) at the end."""
    log = open(HERE / "server.log", "w+")  # noqa: SIM115 - closed below, after the process
    server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise SystemExit(f"{' '.join(args)} did not start (exit {server.poll()}):\n{log.read()}")
            time.sleep(0.1)
        yield server
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@contextmanager
def sidecar(python: str, db: str | None = None) -> Iterator[str]:
    """``forewarn serve`` (run by ``python``) serving the toy model on a free port, without keys (loopback),
    on the database ``db`` (default: a SQLite file here)."""
    model = toy_model()
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as answer:
                return int(answer.status) == 200
        except OSError:
            return False

    with process([python, "-m", "forewarn", "serve", "--model", f"toy={model}", "--port", str(port),
                  "--db", db or str(HERE / "forewarn.db"), "--insecure-no-auth"], ready):
        yield url


def mcp() -> None:
    """``forewarn mcp`` relaying a call to an upstream MCP server (the SDK's own), over stdio and HTTP;
    then ``forewarn demo --domain mcp`` when mcp-server-git is on PATH (each_alone.py installs it apart)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    import forewarn.domains.mcp as domain

    upstream = HERE / "upstream.py"
    upstream.write_text("from mcp.server.mcpserver import MCPServer\n"
                        "server = MCPServer('clock')\n\n"
                        "@server.tool()\n"
                        "def get_current_time(timezone: str) -> str:\n"
                        "    '''The time (always noon).'''\n"
                        "    return f'12:00 in {timezone}'\n\n"
                        "server.run('stdio')\n")
    guard = ["mcp", "--model", str(Path(domain.__file__).with_name("model.json")), "--config",
             str(domain.PROXY_CONFIG), "--audit", "off"]

    async def call(session: ClientSession) -> str:
        await session.initialize()
        result = await session.call_tool("get_current_time", {"timezone": "UTC"})
        assert not result.is_error, result
        return str(result.content[0].text)  # type: ignore[union-attr]

    async def over_stdio() -> str:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "forewarn", *guard, "--", sys.executable, str(upstream)])
        with open(HERE / "proxy.err", "w") as errors:
            async with stdio_client(params, errlog=errors) as (read, write), ClientSession(read, write) as session:
                return await call(session)

    try:
        assert anyio.run(over_stdio) == "12:00 in UTC"
    except Exception as exc:  # the client only sees the connection close: the proxy's own error says why
        raise SystemExit(f"forewarn mcp over stdio: {exc!r}; its standard error:\n"
                         f"{(HERE / 'proxy.err').read_text()}") from exc
    port = free_port()

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    async def over_http() -> str:
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                ClientSession(read, write) as session:
            return await call(session)

    with process([sys.executable, "-m", "forewarn", *guard, "--http", f"127.0.0.1:{port}", "--",
                  sys.executable, str(upstream)], listening):
        assert anyio.run(over_http) == "12:00 in UTC"
    if shutil.which("mcp-server-git") is None:
        print("forewarn demo --domain mcp not run: mcp-server-git is not on PATH")
        return
    assert "never reached the server" in forewarn("demo", "--domain", "mcp").stdout


def observe(url: str) -> None:
    """One session, one observe step, over HTTP."""
    session = post(f"{url}/v1/sessions", {"model": "toy"})
    decision = post(f"{url}/v1/sessions/{session['id']}/observe", {"state": state(1), "action": "step"})
    assert decision["action"] in ("allow", "reflect", "ask_human", "stop"), decision


def server() -> None:
    """``forewarn serve`` answering a session's observe step over HTTP."""
    with sidecar(sys.executable) as url:
        observe(url)


def client() -> None:
    """The Python client against ``forewarn serve``, which runs in the server extra's environment
    (each_alone.py builds it first): this environment has the client's httpx, not the server."""
    from forewarn.guard.client import Client

    with sidecar(os.environ["FOREWARN_SERVER_PYTHON"]) as url, Client(url) as guard:
        decision = guard.session(model="toy").observe(state(1))
        assert decision.p_unsafe is not None


def langchain() -> None:
    """The middleware guarding an agent's tool call (a scripted chat model plays the LLM)."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from forewarn.domains.tools import generate_traces, load_tool_spec
    from forewarn.guard import Guard, learn_model
    from forewarn.guard.langchain import ForewarnMiddleware
    from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls

    generate_traces(200, seed=11, path=HERE / "tool-runs.jsonl")
    guard = Guard(learn_model([HERE / "tool-runs.jsonl"], load_tool_spec()))

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"# {path}"

    model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "README.md"})), "Read it."])
    middleware = ForewarnMiddleware(guard)
    agent: Any = create_agent(model, [read_file], middleware=[middleware])  # (as the tests type it)
    result = agent.invoke({"messages": [("user", "Read README.md")]})
    assert result["messages"][-1].content == "Read it."
    assert middleware.last_run is not None and len(middleware.last_run.session.history) == 2


def report() -> None:
    """``replay --report``: the HTML report with its plots."""
    model = toy_model()
    forewarn("replay", HERE / "runs.jsonl", "--model", model, "--report", HERE / "report.html")
    assert "<img" in (HERE / "report.html").read_text() or "<svg" in (HERE / "report.html").read_text()


def parquet() -> None:
    """``learn`` from a Parquet trace file (steps as JSON text, as a Spark job writes them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec, _ = toy_files()
    pq.write_table(pa.table({"id": [r["id"] for r in runs()], "steps": [json.dumps(r["steps"]) for r in runs()]}),
                   HERE / "runs.parquet")
    forewarn("learn", HERE / "runs.parquet", "--spec", spec, "-o", HERE / "model.json")
    assert json.loads((HERE / "model.json").read_text())["provenance"]["runs"] == len(RUNS)


def llmcheck() -> None:
    """One ``llmcheck`` question over every quantification that needs the extra (VADER, textstat, rapidfuzz);
    and the OpenAI-compatible source (httpx) built (it needs a server to answer)."""
    from forewarn.guard.llmcheck import open_source

    corpus = HERE / "corpus.txt"
    corpus.write_text("the player won the game and was happy .\nthe player lost the game and was sad .\n"
                      "the coach said the player was great .\n")
    done = forewarn("llmcheck", "--model", f"ngram:{corpus}", "--prompt", "the player", "--depth", "4",
                    "--quantify", "sentiment", "--quantify", "readability", "--quantify", f"similarity:{corpus}",
                    "--property", 'P=? [F "sentiment>0"]', "--format", "json")
    assert 0 <= json.loads(done.stdout)["value"] <= 1
    open_source("openai:http://127.0.0.1:9/v1#tiny")


def postgres() -> None:
    """``forewarn serve`` on a PostgreSQL database (a throw-away cluster: initdb, pg_ctl on a free port)
    answering an observe step; the postgres extra brings the server's with it."""
    import glob
    import tempfile

    def binary(name: str) -> str | None:  # on PATH, or where Debian's postgresql package puts it
        return shutil.which(name) or max(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), default=None)

    initdb, pg_ctl = binary("initdb"), binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        import forewarn.server.storage.postgres  # noqa: F401

        print("no PostgreSQL server binaries (initdb, pg_ctl): the backend was imported only")
        sys.exit(SKIP)
    root = os.geteuid() == 0  # PostgreSQL refuses to run as root: the cluster belongs to postgres then
    owner = ["runuser", "-u", "postgres", "--"] if root else []
    folder = Path(tempfile.mkdtemp(prefix="forewarn-pg-"))  # under /tmp: postgres may not enter HERE's parents
    if root:
        shutil.chown(folder, "postgres", "postgres")
    port = free_port()
    try:
        subprocess.run([*owner, initdb, "-D", folder / "data", "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True)
        subprocess.run([*owner, pg_ctl, "-D", folder / "data", "-l", folder / "log", "-w", "start", "-o",
                        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"], check=True, capture_output=True)
        try:
            with sidecar(sys.executable, db=f"postgresql://postgres@127.0.0.1:{port}/postgres") as url:
                observe(url)
        finally:
            subprocess.run([*owner, pg_ctl, "-D", folder / "data", "-m", "immediate", "-w", "stop"],
                           capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def spark() -> None:
    """``learn --engine spark`` on the toy runs (a local Spark session; Java is needed)."""
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        print("Spark needs Java 17+ (Debian: default-jre-headless); none found")
        sys.exit(SKIP)
    spec, traces = toy_files()
    forewarn("learn", traces, "--spec", spec, "-o", HERE / "model.json", "--engine", "spark")
    assert json.loads((HERE / "model.json").read_text())["provenance"]["engine"]["name"] == "spark"


def otel() -> None:
    """A decision span exported by the SDK's OTLP/HTTP exporter to a receiver on 127.0.0.1."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from forewarn.guard import Guard
    from forewarn.guard.telemetry import SPAN_NAME

    received: list[bytes] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces")))
    trace.set_tracer_provider(provider)
    from forewarn.guard.telemetry import record_decision

    session = Guard.load(toy_model()).session()
    record_decision(session.observe(state(1)), tool="step", phase="observed")
    provider.shutdown()
    receiver.shutdown()
    assert any(SPAN_NAME.encode() in body for body in received), received


def pii() -> None:
    """An e-mail address, a phone number and a card number masked in a text by the proxy's redaction."""
    from forewarn.guard.mcp.redact import RedactPolicy, redact_text

    text = "Ann: ann.smith@example.com, +1 415-555-0132, card 4111 1111 1111 1111."
    out, records = redact_text(text, RedactPolicy.from_config("pii"))
    assert out == "Ann: [REDACTED:email], [REDACTED:phone], card [REDACTED:credit_card].", out
    assert [r.kind for r in records] == ["email", "phone", "credit_card"], records


def hf() -> None:
    """``llmcheck`` over a Hugging Face model: a 2-layer GPT-2 built here, saved, and loaded by path."""
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = "the player won lost game and was happy sad .".split()
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[EOS]", *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves it untyped
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=16, n_embd=16, n_layer=1, n_head=1,
                                       bos_token_id=2, eos_token_id=2, pad_token_id=0))
    model.save_pretrained(HERE / "tiny")
    tokenizer.save_pretrained(HERE / "tiny")
    done = forewarn("llmcheck", "--model", f"hf:{HERE / 'tiny'}", "--prompt", "the player", "--depth", "2",
                    "--k", "2", "--property", 'P=? [F "gender_bias>0"]', "--format", "json")
    assert 0 <= json.loads(done.stdout)["value"] <= 1


def llm() -> None:
    """``llmcheck`` over the llm extra's own model (Gemma 3 270M from its chunk packages), run by llama.cpp."""
    done = forewarn("llmcheck", "--model", "gguf:package", "--prompt", "Step 1: find Fork\nStep 2:", "--depth", "1",
                    "--k", "3", "--quantify", "fork=keywords:Fork", "--property", 'P=? [F "fork>0"]',
                    "--format", "json")
    answer = json.loads(done.stdout)
    assert 0 <= answer["lower"] <= answer["value"] <= answer["upper"] <= 1, answer


USES: dict[str, Callable[[], None]] = {f.__name__: f for f in (mcp, server, client, langchain, report, parquet,
                                                                llmcheck, postgres, spark, otel, pii, hf, llm)}

if __name__ == "__main__":
    USES[sys.argv[1]]()
