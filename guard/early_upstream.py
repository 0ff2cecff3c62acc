"""An MCP proxy's upstream server launched before the proxy has loaded (issue 43: a fast start).

``forewarn mcp -- CMD ARGS`` spends most of its start importing the MCP SDK and the guard, and the upstream
server most of its own importing its SDK: run one after the other, a host waits for both. The CLI calls
:func:`launch` first thing, with the standard library alone (importing the MCP SDK is what takes the time),
and the lean stdio relay :func:`take` s the running process where it would have started it. A process no
relay took (another relay chosen, a config that changed the upstream) is ended by :func:`discard`.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

# what the MCP SDK's ``mcp.client.stdio.get_default_environment`` passes on (POSIX; tests check the two agree)
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")

_launched: dict[tuple[str, tuple[str, ...]], subprocess.Popen[bytes]] = {}


def default_environment() -> dict[str, str]:
    """The environment an upstream gets, as the MCP SDK builds it (no shell functions)."""
    return {key: value for key in INHERITED if (value := os.environ.get(key)) is not None
            and not value.startswith("()")}


def launch(command: str, args: Sequence[str]) -> None:
    """Start ``command args`` as an upstream is started (pipes for its standard input and output, its
    standard error the proxy's). A command that cannot start is left to the relay, which says why."""
    if sys.platform == "win32":  # (another environment list and pipe API there: the relay starts it)
        return
    try:
        _launched[(command, tuple(args))] = subprocess.Popen(
            [command, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=default_environment())
    except OSError:
        return


def take(command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None
         ) -> subprocess.Popen[bytes] | None:
    """The process :func:`launch` started for exactly this upstream (no environment or folder of its own),
    once; else None."""
    if env or cwd is not None:
        return None
    return _launched.pop((command, tuple(args)), None)


def discard() -> None:
    """End the launched processes no relay took, at once: none was sent a message, so none has work to lose
    (killed rather than asked, so that a proxy serving on another path does not wait for them)."""
    while _launched:
        _, proc = _launched.popitem()
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
