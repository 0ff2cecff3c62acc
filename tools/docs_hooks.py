"""MkDocs hooks: the reference pages written from the code itself, so they cannot drift from it.

``mkdocs.yml`` names this file under ``hooks:``. At each build it adds three pages that exist in no
folder: ``reference/cli.md`` from the typer app's commands and options, ``reference/http.md`` from the
sidecar's OpenAPI schema, and ``bench.md`` from ``bench/README.md`` (where the measured figures live).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]


# typer carries its own copy of click (typer._click): its objects are read by attribute, not by class
def _is(param: Any, kind: str) -> bool:
    return bool(param.param_type_name == kind)


def _option_row(param: Any) -> str:
    names = ", ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
    annotation = param.type_descriptor.annotation
    kind = "flag" if param.is_flag else str(getattr(annotation, "__name__", annotation)).replace("typing.", "")
    text = getattr(param, "help", None) or ""
    default = param.default if param.show_default is not False else None
    default = getattr(default, "value", default)  # an enum's value is what a user types
    if default not in (None, False, (), "") and not callable(default) and "default" not in text.lower():
        text = f"{text} Default: `{default}`.".strip()
    required = " (required)" if param.required else ""
    cell = " ".join(text.split()).replace("|", "\\|")
    return f"| {names} | {kind}{required} | {cell} |"


def _command_section(name: str, command: Any) -> list[str]:
    lines = [f"## `forewarn {name}`", ""]
    doc = (command.help or "").strip()
    if doc:
        lines += [doc.split("\f")[0].strip(), ""]
    arguments = [p for p in command.params if _is(p, "argument")]
    if arguments:
        usage = " ".join(p.metavar or p.name.upper() for p in arguments)
        lines += [f"Arguments: `{usage}`", ""]
    options = [p for p in command.params if _is(p, "option") and not p.hidden]
    if options:
        lines += ["| option | takes | what |", "| --- | --- | --- |", *(_option_row(p) for p in options), ""]
    return lines


def cli_reference() -> str:
    """Every command of ``forewarn`` in the order ``--help`` lists them, with its options."""
    import typer

    from forewarn.guard.cli import app

    group: Any = typer.main.get_command(app)
    ctx = typer.Context(group)
    lines = ["# Command line reference", "",
             "Written from the commands themselves at each build of this site (`tools/docs_hooks.py`); "
             "`forewarn COMMAND -h` prints the same. Every command answers bad input with one line on "
             "stderr and exit status 2 ([errors](../errors.md)).", ""]
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            lines += _command_section(name, command)
    return "\n".join(lines) + "\n"


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    ref = schema.get("$ref") or (schema.get("items") or {}).get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return f"`{name}`" + ("[]" if "items" in schema else "")
    return f"`{schema.get('type', 'object')}`"


def http_reference() -> str:
    """The sidecar's endpoints from its OpenAPI schema: method, path, summary, request and answer."""
    from forewarn.server.app import create_app
    from forewarn.server.settings import ServerSettings

    schema = create_app(ServerSettings(insecure_no_auth=True)).openapi()
    lines = ["# HTTP API reference", "",
             f"The sidecar's endpoints (`forewarn serve`, OpenAPI {schema['openapi']}), written from its "
             "schema at each build of this site; a running sidecar serves the same schema at "
             "`/openapi.json` and Swagger UI at `/docs`. How to use them: [the sidecar](../server.md).", ""]
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            body = (((op.get("requestBody") or {}).get("content") or {}).get("application/json") or {}).get("schema")
            ok: dict[str, Any] = next((r for code, r in op.get("responses", {}).items() if code.startswith("2")), {})
            answer = ((ok.get("content") or {}).get("application/json") or {}).get("schema")
            lines += [f"## `{method.upper()} {path}`", ""]
            summary = op.get("description") or op.get("summary") or ""
            if summary:
                lines += [" ".join(summary.split()), ""]
            if body:
                lines += [f"Request body: {_schema_name(body)}", ""]
            if answer:
                lines += [f"Answer: {_schema_name(answer)}", ""]
    lines += ["## Schemas", ""]
    for name, body in schema.get("components", {}).get("schemas", {}).items():
        fields = ", ".join(f"`{field}`" for field in body.get("properties", {}))
        lines += [f"- **{name}**" + (f": {fields}" if fields else "")]
    return "\n".join(lines) + "\n"


def bench_page() -> str:
    """bench/README.md with its links made to work from the site (scripts are named, not linked)."""
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(\.\./docs/([^)]*)\)", r"](\1)", text)
    text = re.sub(r"\]\(\.\./README\.md[^)]*\)", "](index.md)", text)
    return re.sub(r"\[([^\]]*)\]\((?!https?:|#)([^)]*\.(?:py|json|yaml|jsonl))\)", r"`\1`", text)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for uri, text in (("reference/cli.md", cli_reference()), ("reference/http.md", http_reference()),
                      ("bench.md", bench_page())):
        files.append(File.generated(config, uri, content=text))
    return files
