"""An agent guarded by the Forewarn sidecar, from another process.

The agent below follows a household plan that ends with an egg in a closed, running
microwave. Before each step it asks the sidecar what would happen (``preview``), and
after each step it reports the new state (``observe``). When the guard answers
``ask_human``, the agent waits for a person's approval; here a stand-in approver
(another thread, with the approver's key) rejects the risky step, and the agent
revises its plan instead.

Run it with nothing else (it starts ``forewarn serve`` on a free loopback port with
keys of its own, and stops it at the end)::

    python examples/sidecar_agent.py

or against a server you run yourself::

    FOREWARN_API_KEYS="agent-key:agent,approver-key:approver" forewarn serve &
    python examples/sidecar_agent.py --url http://127.0.0.1:8321 --key agent-key --approver-key approver-key

The guard code is the same as in process: replace ``Client(url, api_key=...)`` by
``Guard.load("model.json")`` and nothing else changes.
"""
from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from forewarn.guard.client import Client
from forewarn.guard.spec import Action


def kitchen(egg: str = "Fridge", holding: bool = False, door_open: bool = True, on: bool = False) -> dict[str, Any]:
    """The concrete state the agent sees: a slice of an AI2-THOR-like scene."""
    return {"objects": {"Egg": {"parentReceptacles": [egg], "isPickedUp": holding},
                        "Microwave": {"isOpen": door_open, "isToggled": on}},
            "agent": {"position": [1.0, 0.9, -0.5]}}


PLAN = [
    ("open the fridge and take the egg", kitchen(holding=True)),
    ("put the egg in the microwave", kitchen(egg="Microwave")),
    ("close the microwave", kitchen(egg="Microwave", door_open=False)),
    ("switch the microwave on", kitchen(egg="Microwave", door_open=False, on=True)),
]
SAFER = ("take the egg out and boil it in a pan instead", kitchen(egg="CounterTop"))


def human(url: str, key: str, stop: threading.Event) -> None:
    """A stand-in for the person who answers approvals: rejects whatever is pending, with a reason."""
    with Client(url, api_key=key) as approver:
        while not stop.is_set():
            for pending in approver.approvals():
                risk = pending["decision"]["p_unsafe"]
                verdict = approver.reject(pending["id"], reason=f"risk {risk:.0%} is too high: no eggs in microwaves")
                print(f"    [human] rejected step {verdict['step']}: {verdict['reason']}")
            stop.wait(0.1)


def run_agent(url: str, key: str) -> None:
    with Client(url, api_key=key) as guard:  # in process, this line would be: guard = Guard.load(path)
        session = guard.session({"thresholds": {"reflect": 0.9, "ask_human": 0.5}}, metadata={"task": "egg"})
        print(f"session {session.id} on model {session.info['model']['name']}@{session.info['model']['version']}")
        decision = session.observe(kitchen(), action="start")
        print(f"  start: {decision.action.value} (p_unsafe {decision.p_unsafe:.1%})")
        for action, state in PLAN:
            ahead = session.preview(state)  # what-if: nothing committed
            print(f"  next: {action!r} -> guard would say {ahead.action.value} (p_unsafe {ahead.p_unsafe:.1%})")
            decision = session.observe(state, action=action, t=time.time())
            if decision.action is Action.REFLECT:
                print(f"    reflect: {decision.message[:110]}...")
            if decision.action is Action.ASK_HUMAN:
                print(f"    asking a human (approval {decision.approval_id}) ...")
                verdict = session.wait_for_approval(decision, timeout=30)
                print(f"    the human said {verdict['status']}: {verdict['reason']}")
                if verdict["status"] != "approved":
                    action, state = SAFER
                    decision = session.observe(state, action=action, t=time.time())
                    print(f"  revised: {action!r} -> {decision.action.value} (p_unsafe {decision.p_unsafe:.1%})")
                    break
            if decision.action is Action.STOP:
                print("    the guard says stop")
                break
        history = session.history()
        print(f"{history['steps_total']} steps recorded; actions: "
              f"{[s['decision']['action'] for s in history['steps']]}")
        session.close()


@contextmanager
def sidecar(agent_key: str, approver_key: str) -> Iterator[str]:
    """``forewarn serve`` in a child process on a free loopback port, with a throwaway database."""
    import tempfile

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "FOREWARN_API_KEYS": f"{agent_key}:agent,{approver_key}:approver",
               "FOREWARN_DB": os.path.join(tmp, "forewarn.db")}
        process = subprocess.Popen([sys.executable, "-m", "forewarn.server", "serve", "--port", str(port),
                                    "--log-level", "warning"], env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            with Client(url) as probe:
                deadline = time.monotonic() + 120  # the first start learns the built-in model
                while not probe.ready():
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("the sidecar did not start")
                    time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            process.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running sidecar (default: start one)")
    parser.add_argument("--key", help="the agent's API key")
    parser.add_argument("--approver-key", help="the approver's API key (for the stand-in human)")
    args = parser.parse_args()
    if args.url:
        urls: Any = nullcontext(args.url)
        agent_key, approver_key = args.key, args.approver_key
    else:
        agent_key, approver_key = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        urls = sidecar(agent_key, approver_key)
    with urls as url:
        stop = threading.Event()
        person = threading.Thread(target=human, args=(url, approver_key, stop), daemon=True)
        person.start()
        try:
            run_agent(url, agent_key)
        finally:
            stop.set()
            person.join(5)


if __name__ == "__main__":
    main()
