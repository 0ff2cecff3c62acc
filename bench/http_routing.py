"""What the split HTTP app costs per request: routers included as ``create_app`` does, against the
same routes registered flat on the app's own router, in one process.

What it does
------------
1. Starts one server state (a temporary SQLite database, the built-in model) and builds two apps
   over it: ``create_app`` as shipped, where each resource's ``APIRouter`` is included (FastAPI
   keeps an included router as a route of its own and dispatches into it: a second routing step),
   and the *flat* baseline, the very same routes appended to the app's router (what the single
   460-line ``create_app`` closure of before the split did).
2. Sends ``--requests`` GET requests per endpoint through ``httpx.ASGITransport`` (no socket),
   interleaved app by app, five rounds, and reports CPU time per request of this process
   (``time.process_time``: steadier than wall time on a shared machine), best and median round.
   The client's own cost is in both columns alike; the difference is the router's.

``observe`` and ``preview`` are not measured: the step fast path answers them before any router
(``bench/http_load.py`` measures them). Target: at most 30 µs more per request for the split app
(the no-op floor of a request here is about 140 µs). Nothing is asserted.

Run: ``python bench/http_routing.py [--requests N] [--json FILE]``
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from forewarn.server.app import create_app
from forewarn.server.settings import ServerSettings
from forewarn.server.state import start

ENDPOINTS = ("/healthz", "/v1/models", "/v1/sessions", "/v1/approvals", "/v1/proposals")
KEY = "bench-admin-key-0123456789"
TARGET_US = 30.0


def flat(app: FastAPI) -> FastAPI:
    """The same app with every included router's routes moved onto the app's router (in order)."""
    from fastapi.routing import _IncludedRouter  # private: the baseline only

    routes: list[Any] = []
    for route in app.router.routes:
        if isinstance(route, _IncludedRouter) and not route.include_context.dependencies:
            routes.extend(route.original_router.routes)
        else:
            routes.append(route)
    app.router.routes[:] = routes
    app.router._mark_routes_changed()
    return app


async def per_request(client: httpx.AsyncClient, path: str, count: int) -> float:
    """CPU µs per request of ``count`` GETs of ``path``."""
    headers = {"authorization": f"Bearer {KEY}"}
    started = time.process_time()
    for _ in range(count):
        response = await client.get(path, headers=headers)
    elapsed = time.process_time() - started
    if response.status_code != 200:
        raise SystemExit(f"{path}: HTTP {response.status_code}: {response.text[:200]}")
    return elapsed / count * 1e6


async def measure(requests: int) -> dict[str, dict[str, list[float]]]:
    from forewarn.domains.embodied.builtin import builtin_model_path

    settings = ServerSettings.model_validate({"db": Path(tempfile.mkdtemp()) / "bench.db", "api_keys": f"{KEY}:admin",
                                              "models": {"builtin": builtin_model_path()}, "log_level": "warning"})
    state = start(settings)
    apps = {"split": create_app(settings, state=state), "flat": flat(create_app(settings, state=state))}
    results: dict[str, dict[str, list[float]]] = {name: {path: [] for path in ENDPOINTS} for name in apps}
    clients = {name: httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench")
               for name, app in apps.items()}
    try:
        for app in apps.values():
            app.state.forewarn.state = state  # serve the one state; no lifespan (it would close it)
        for client in clients.values():  # warm up: effective routes, caches
            for path in ENDPOINTS:
                await per_request(client, path, 200)
        for _ in range(5):
            for path in ENDPOINTS:
                for name, client in clients.items():
                    results[name][path].append(await per_request(client, path, requests))
    finally:
        for client in clients.values():
            await client.aclose()
        state.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per endpoint and round")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.requests))
    print(f"CPU µs per request (best / median of 5 rounds of {args.requests}), same process")
    print(f"{'endpoint':<16}{'flat (baseline)':>20}{'split (routers)':>20}{'difference':>14}")
    worst = 0.0
    for path in ENDPOINTS:
        base, split = results["flat"][path], results["split"][path]
        diff = min(split) - min(base)
        worst = max(worst, diff)
        print(f"{path:<16}{min(base):>10.1f} / {statistics.median(base):>6.1f}"
              f"{min(split):>10.1f} / {statistics.median(split):>6.1f}{diff:>+12.1f}")
    verdict = "MET" if worst <= TARGET_US else "NOT MET"
    print(f"largest difference {worst:+.1f} µs per request; target ≤ {TARGET_US:.0f} µs: {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"python": sys.version, "requests": args.requests, "results": results,
                                         "target_us": TARGET_US, "worst_us": worst}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
