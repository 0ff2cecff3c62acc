"""The sidecar's routes, one module per resource, each an ``APIRouter`` that ``create_app`` includes:

``health`` (``/healthz``, ``/readyz``, ``/metrics``), ``steps`` (``observe``, ``preview``,
``/v1/batch``, and the step fast path's handlers), ``sessions`` (create, list, get, close),
``approvals`` (list, get with a long poll, resolve), ``proposals`` (propose, list, get, resolve),
``console`` (the approver console and its ``/v1/changes`` long poll), ``docs`` (Swagger UI,
offline) and ``models`` (list, get, document, load).

A route states what it needs with the dependencies of :mod:`server.deps`; nothing here holds state.
"""
from __future__ import annotations

__all__: list[str] = []
