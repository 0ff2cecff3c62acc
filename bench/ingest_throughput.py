"""Ingest throughput per input format, beside reading the contract's JSONL (the baseline).

What it does
------------
1. Generates ``--runs`` agent runs of the tool domain (``domains.tools.generate_traces``
   draws the calls; about 4 calls a run) and writes each as the three agent formats an
   agent's framework would log: LangChain ``AgentExecutor`` ``intermediate_steps``,
   OpenTelemetry GenAI spans (OTLP JSON, one export a run) and LangGraph ``updates``
   stream dumps. It also writes the contract's JSONL of the same runs.
2. Reads each file with ``guard.ingest.read_input`` (what ``forewarn ingest`` does,
   minus writing): parsing, the transcript, and the tool domain's extractor for every
   prefix of the run. The contract's JSONL is read with the same function (parse and
   validate only): the baseline.
3. Prints runs/s and steps/s per format, wall and CPU, and the ratio to the baseline.
   Nothing is asserted.

Run: ``python bench/ingest_throughput.py [--runs 2000]``
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forewarn.guard.ingest import InputFormat, read_input


def agent_runs(count: int, folder: Path) -> list[dict[str, Any]]:
    """Runs as (user text, calls with results), from the tool domain's generator."""
    from forewarn.domains.tools import generate_traces

    path = folder / "generated.jsonl"
    generate_traces(count, seed=5, path=path)
    runs = []
    for line in path.read_bytes().splitlines():
        run = orjson.loads(line)
        calls = [step["action"] for step in run["steps"][1:] if isinstance(step.get("action"), dict)]
        runs.append({"id": run["id"], "user": run["meta"].get("task", "Do the task."),
                     "calls": [{"tool": c["tool"], "args": c["args"], "result": "ok"} for c in calls]})
    return runs


def write_formats(runs: list[dict[str, Any]], folder: Path) -> dict[str, Path]:
    paths = {name: folder / f"{name}.jsonl" for name in ("langchain", "otel", "langgraph")}
    with open(paths["langchain"], "wb") as out:
        for r in runs:
            steps = [[{"tool": c["tool"], "tool_input": c["args"], "log": ""}, c["result"]] for c in r["calls"]]
            out.write(orjson.dumps({"id": r["id"], "input": r["user"], "intermediate_steps": steps}) + b"\n")
    with open(paths["otel"], "wb") as out:
        for n, r in enumerate(runs):
            trace = f"{n:032x}"

            def attr(key: str, value: str) -> dict[str, Any]:
                return {"key": key, "value": {"stringValue": value}}

            spans = [{"traceId": trace, "spanId": "a", "name": "invoke_agent", "startTimeUnixNano": "0",
                      "endTimeUnixNano": "9", "attributes": [
                          attr("gen_ai.operation.name", "invoke_agent"),
                          attr("gen_ai.input.messages", json.dumps([{"role": "user", "parts": [
                              {"type": "text", "content": r["user"]}]}]))]}]
            for i, c in enumerate(r["calls"], start=1):
                spans.append({"traceId": trace, "spanId": f"t{i}", "name": f"execute_tool {c['tool']}",
                              "startTimeUnixNano": str(i * 1000), "endTimeUnixNano": str(i * 1000 + 500),
                              "attributes": [attr("gen_ai.operation.name", "execute_tool"),
                                             attr("gen_ai.tool.name", c["tool"]),
                                             attr("gen_ai.tool.call.arguments", json.dumps(c["args"])),
                                             attr("gen_ai.tool.call.result", c["result"])]})
            out.write(orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + b"\n")
    with open(paths["langgraph"], "wb") as out:
        for r in runs:
            chunks = []
            for i, c in enumerate(r["calls"]):
                call_id = f"call_{i}"
                chunks.append({"model": {"messages": [{"type": "ai", "content": "", "id": f"m{i}", "tool_calls": [
                    {"name": c["tool"], "args": c["args"], "id": call_id, "type": "tool_call"}]}]}})
                chunks.append({"tools": {"messages": [{"type": "tool", "content": c["result"], "id": f"r{i}",
                                                       "tool_call_id": call_id, "name": c["tool"]}]}})
            out.write(orjson.dumps({"id": r["id"], "input": r["user"], "chunks": chunks}) + b"\n")
    return paths


def timed(path: Path, fmt: InputFormat) -> tuple[int, int, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    runs = steps = 0
    for run in read_input([path], fmt, on_error="skip"):
        runs += 1
        steps += len(run.steps)
    return runs, steps, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs = agent_runs(args.runs, folder)
        paths = write_formats(runs, folder)
        contract = folder / "contract.jsonl"
        with open(contract, "wb") as out:
            for run in read_input([paths["langchain"]], InputFormat.langchain):
                out.write(orjson.dumps({"id": run.id, "steps": run.steps, "meta": run.meta}) + b"\n")
        rows = [("jsonl (baseline)", *timed(contract, InputFormat.jsonl))]
        for name, fmt in (("langchain", InputFormat.langchain), ("otel", InputFormat.otel),
                          ("langgraph", InputFormat.langgraph)):
            rows.append((name, *timed(paths[name], fmt)))
    base = rows[0][4]
    print(f"{'format':18} {'runs':>6} {'steps':>7} {'wall s':>7} {'CPU s':>7} {'runs/s':>8} {'steps/s':>9} "
          f"{'CPU × baseline':>15}")
    for name, n_runs, n_steps, wall, cpu in rows:
        print(f"{name:18} {n_runs:6d} {n_steps:7d} {wall:7.2f} {cpu:7.2f} {n_runs / cpu:8.0f} {n_steps / cpu:9.0f} "
              f"{cpu / base:15.1f}")


if __name__ == "__main__":
    main()
