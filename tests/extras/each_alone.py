"""Each extra installed alone and put to its smallest real use (``make extras-test``; CI runs it).

The full suite runs with every extra installed at once, so a module one extra imports but only
another extra brings in passes there and fails for a user of the first alone (issue 36: sniffio,
imported by the MCP proxy, came only with the langchain extra). So: one core-only environment is
built once from a wheel of this checkout; then each extra gets a fresh venv that sees the core's
packages through a ``.pth`` file and gets ``pip install 'forewarn.whl[EXTRA]'``. pip counts what
the core environment holds as installed, so it installs exactly what the extra declares (and
what that needs), nothing more; ``smallest_uses.py EXTRA`` then runs in that venv, from an empty
folder, with no PYTHONPATH: only the core and the extra are importable. Removing a dependency from
an extra in pyproject.toml makes that extra's line FAIL (tried: rapidfuzz from llmcheck).

    python tests/extras/each_alone.py [EXTRA ...] [--source DIR] [--keep DIR]

Prints one line per extra (ok, skip with why, FAIL with the output) and exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USES = Path(__file__).with_name("smallest_uses.py")
# The server extra before the client: the client's use talks to a `forewarn serve` of the server's venv.
# hf: torch is the largest install (about 45 s from pip's cache; CI's `make test` fills it); llm last: its
# llama-cpp-python wheel comes from pip's cache too (`make test` built it; about 15 minutes when it must compile).
EXTRAS = ["mcp", "server", "client", "langchain", "report", "parquet", "llmcheck", "postgres", "spark", "otel",
          "pii", "hf", "llm"]
# An upstream MCP server for `forewarn demo --domain mcp`, in a venv of its own, so that what it
# depends on cannot stand in for what the mcp extra forgot to declare.
DEMO_SERVER = "mcp-server-git>=2025.1"


def run(cmd: list[str | Path], *, check: bool = False, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=check, cwd=cwd, env=env,
                          timeout=timeout)


def venv(path: Path, *, with_pip: bool = False) -> Path:
    """A fresh venv at ``path``; its site-packages folder. Without pip of its own (the core venv's pip
    installs into it: ``pip --python``), which saves seconds a venv."""
    run([sys.executable, "-m", "venv", "--clear", *([] if with_pip else ["--without-pip"]), path], check=True)
    found = run([path / "bin/python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True)
    return Path(found.stdout.strip())


def pip(core: Path, env: Path, *args: str | Path) -> None:
    """``pip install ARGS`` into the venv ``env``, run by the pip of the venv ``core``."""
    done = run([core / "bin/python", "-m", "pip", "--python", env / "bin/python", "install", "--quiet", *args])
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("extras", nargs="*", metavar="EXTRA", help=f"default: all ({', '.join(EXTRAS)})")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout to build (default: this one)")
    parser.add_argument("--keep", type=Path, help="build the venvs in this folder and keep them")
    options = parser.parse_args()
    unknown = set(options.extras) - set(EXTRAS)
    if unknown:
        parser.error(f"unknown extra(s): {', '.join(sorted(unknown))}")
    wanted = options.extras or EXTRAS
    chosen = [e for e in EXTRAS if e in wanted or (e == "server" and "client" in wanted)]
    work = options.keep or Path(tempfile.mkdtemp(prefix="forewarn-extras-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        # A wheel, as users install: only what the package data lists gets in (no stale build/ files).
        shutil.rmtree(options.source / "build", ignore_errors=True)
        core_site = venv(work / "core", with_pip=True)
        wheel = work / "dist"
        shutil.rmtree(wheel, ignore_errors=True)
        done = run([work / "core/bin/python", "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheel,
                    options.source])
        if done.returncode != 0:
            raise RuntimeError(f"building the wheel failed:\n{done.stdout}{done.stderr}")
        (built,) = wheel.glob("forewarn-*.whl")
        pip(work / "core", work / "core", built)
        print(f"{'core':10} ok    {time.monotonic() - started:6.1f} s  (wheel, core venv)", flush=True)
        failed = [extra for extra in chosen if not check(extra, work, core_site, built)]
    finally:
        if options.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"extras: {len(chosen) - len(failed)} of {len(chosen)} passed or skipped in "
          f"{time.monotonic() - started:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def check(extra: str, work: Path, core_site: Path, wheel: Path) -> bool:
    """Install ``extra`` alone over the core and run its use; print its line. False when it failed."""
    started = time.monotonic()
    env = work / extra
    site = venv(env)
    (site / "_forewarn_core.pth").write_text(f"{core_site}\n")
    path = [env / "bin"]
    output = note = ""
    try:
        pip(work / "core", env, f"{wheel}[{extra}]")
        if extra == "mcp":
            venv(work / "mcp-upstream")
            pip(work / "core", work / "mcp-upstream", DEMO_SERVER)
            path.append(work / "mcp-upstream/bin")
        installed = time.monotonic() - started
        folder = work / f"{extra}-run"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        environ.update(PATH=os.pathsep.join([*map(str, path), environ.get("PATH", "")]),
                       FOREWARN_CACHE=str(folder / "cache"), FOREWARN_SERVER_PYTHON=str(work / "server/bin/python"))
        done = run([env / "bin/python", USES, extra], cwd=folder, env=environ, timeout=900)
        output = (done.stdout + done.stderr).strip()
        status = {0: "ok", 77: "skip"}.get(done.returncode, "FAIL")
        if status != "FAIL":  # its last line: why it skipped, or what it left out
            note = done.stdout.strip().rpartition("\n")[2]
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        installed, status, output = time.monotonic() - started, "FAIL", str(exc)
    print(f"{extra:10} {status:5} {time.monotonic() - started:6.1f} s  (install {installed:.1f} s) {note}".rstrip(),
          flush=True)
    if status == "FAIL":
        print("    " + output[-4000:].replace("\n", "\n    "), flush=True)
    return status != "FAIL"


if __name__ == "__main__":
    sys.exit(main())
