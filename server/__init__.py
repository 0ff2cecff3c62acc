"""The HTTP sidecar: ``forewarn serve`` puts the guard in front of any agent, in any language.

Modules, one concept each: ``settings`` (configuration), ``storage`` (SQLite, group
commits), ``auth`` (API keys and roles), ``metrics`` (Prometheus), ``models_registry``
(loaded models, atomic replacement), ``sessions`` (live sessions and their
resumption), ``approvals`` (human approval waits), ``schemas`` (the HTTP boundary),
``state`` (what a running server holds, and its start), ``app`` (the routes), ``cli``
(the ``serve`` command); private: ``_http`` (errors, parsing, limits, the step fast
path), ``_steps`` (the step path after parsing), ``_views`` (stored rows as JSON).
"""
from __future__ import annotations

if __name__ == 'server':  # a source checkout imported by the pre-0.2 name: be forewarn.server
    from forewarn._aliases import redirect

    redirect(__name__)
else:  # the sidecar's dependencies are the server extra: say so, not ModuleNotFoundError: fastapi
    from forewarn.guard._extras import require

    require("server", "forewarn.server")

__all__: list[str] = []
