"""Chrome / Perfetto trace of a scenario's first steps, re-simulated at layer fidelity (event where only processes run
the scenario: a slow host, a drafter on its own GPUs, two-batch overlap).

`record(scenario, steps=20)` returns a trace in Chrome's JSON object format ({"traceEvents": [...]}, times in
microseconds) that opens in https://ui.perfetto.dev and chrome://tracing:

- process "steps": lane "step" with a span per phase of each step from the step log (prefill, decode, or draft then
  verify, then the step's host overhead); lane "counters" with "C" events for the tokens each step emitted and the
  mean accept length per request.
- process "rank r" per tensor-parallel rank, lane "host": a span per segment while the host launches it (head,
  layer i attention, layer i mlp, tail; one "graph launch" span for a CUDA-graph pass); lane "gpu": the segment's
  kernel work, then the collective closing it, split into "wait" (the rank arrived, the slowest has not) and
  "transfer" (the collective itself), booked apart as in the step log's breakdown. A GPU that waits on its own
  host's launches shows a "launch-bound idle" span before its kernels (their total is the breakdown's launch time;
  the kernels really run interleaved with those gaps).

Tracing is off unless asked for: only `record` runs it, with max_steps bounding its size.
"""
from __future__ import annotations

import json
from typing import Any


from ..config import Scenario
from ..serving.records import KIND_SPEC, STEP_KIND_NAMES, StepColumns
from ..timing.timeline import CATEGORIES

MIN_SPAN_US = 1e-3  # shorter gaps are rounding noise, not idle time
MAX_STEPS = 200  # a trace is for looking at a few steps closely; ~0.5 MB per step on 8 ranks (uncompressed)
STEPS_PID = 0
HOST_TID, GPU_TID = 1, 2
STEP_TID, COUNTER_TID = 1, 2


def segment_name(k: int, num_segments: int) -> str:
    """head, layer i attention, layer i mlp, ..., tail (the order of model.layout.pass_layout)."""
    if k == 0:
        return "head"
    if k == num_segments - 1:
        return "tail"
    layer, part = divmod(k - 1, 2)
    return f"layer {layer} {'attention' if part == 0 else 'mlp'}"


def _span(name: str, cat: str, pid: int, tid: int, start: float, duration: float, args: dict | None = None) -> dict:
    # times to the nanosecond (3 decimals of a microsecond): the simulation's own resolution, and half the bytes
    event = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": round(start, 3),
             "dur": round(duration, 3)}
    if args:
        event["args"] = args
    return event


def _meta(pid: int, tid: int | None, name: str, sort_index: int) -> list[dict]:
    if tid is None:
        return [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}},
                {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": sort_index}}]
    return [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": sort_index}}]


def pass_events(spec, plan, result: dict, pass_index: int) -> list[dict]:
    """Host and GPU spans of one pass on every rank (pid r + 1), from its rank timeline result['_spans']."""
    s = result["_spans"]
    host_start, host_end, arrive = s["host_start"], s["host_end"], s["arrive"]
    c_start, c_end = s["collective_start"].tolist(), s["collective_end"].tolist()
    gpu_us, coll_us, is_ar = s["gpu_us"].tolist(), s["collective_us"].tolist(), s["allreduce"].tolist()
    ranks, num_segments = host_start.shape
    begin = float(host_start[0, 0])  # the pass starts when the hosts start launching it
    cat = spec.part
    pass_args = {"pass": pass_index, "plan": plan.label}
    names = [segment_name(k, num_segments) for k in range(num_segments)]
    events: list[dict] = []
    for r in range(ranks):
        pid = r + 1
        if plan.graph:
            events.append(_span("graph launch", cat, pid, HOST_TID, float(host_start[r, 0]),
                                float(host_end[r, 0] - host_start[r, 0]), pass_args))
        else:
            hs, he = host_start[r].tolist(), host_end[r].tolist()
            for k in range(num_segments):
                events.append(_span(names[k], cat, pid, HOST_TID, hs[k], he[k] - hs[k],
                                    pass_args if k == 0 else None))
        arrive_r = arrive[r].tolist()
        previous = begin
        for k in range(num_segments):
            work_start = arrive_r[k] - gpu_us[k]
            if work_start - previous >= MIN_SPAN_US:
                events.append(_span("launch-bound idle", cat, pid, GPU_TID, previous, work_start - previous))
            events.append(_span(names[k], cat, pid, GPU_TID, work_start, gpu_us[k],
                                pass_args if k == 0 else None))
            collective = "all-reduce" if is_ar[k] else ("all-gather" if coll_us[k] > 0 else "barrier")
            wait = c_start[k] - arrive_r[k]
            if wait >= MIN_SPAN_US:
                events.append(_span("wait", collective, pid, GPU_TID, arrive_r[k], wait, {"segment": names[k]}))
            if coll_us[k] > 0:
                events.append(_span("transfer", collective, pid, GPU_TID, c_start[k], coll_us[k],
                                    {"segment": names[k]}))
            previous = c_end[k]
    return events


def step_events(steps: StepColumns) -> list[dict]:
    """The steps lane (a span per phase) and the counter lane (tokens per step) from the step log."""
    events: list[dict] = []
    for i, step in enumerate(steps.records()):
        kind, start, duration = step.kind, step.start_at, step.duration_us
        draft, main = step.draft_us, step.pass_us
        tokens, batch = float(step.tokens), float(step.batch)
        args = {"step": i, "batch": step.batch, "tokens": step.tokens, "allreduce_wait_us": step.allreduce_wait,
                "allreduce_transfer_us": step.allreduce_transfer}
        name = STEP_KIND_NAMES.get(kind, "step")
        if kind == KIND_SPEC:
            events.append(_span("draft", "step", STEPS_PID, STEP_TID, start, draft, {"step": i}))
            args["verify_tokens"] = step.verify_tokens
        events.append(_span(name, "step", STEPS_PID, STEP_TID, start + draft, main, args))
        other = duration - draft - main
        if other > 0:
            events.append(_span("host overhead", "step", STEPS_PID, STEP_TID, start + draft + main, other, {"step": i}))
        end = start + duration
        counter = {"tokens": tokens}
        if kind == KIND_SPEC:
            counter["accept_len"] = tokens / batch if batch else 0.0
        events.append({"name": "accepted tokens", "cat": "step", "ph": "C", "pid": STEPS_PID, "tid": COUNTER_TID,
                       "ts": round(end, 3), "args": counter})
    return events


def record(scenario: Scenario, steps: int = 20, seed: int | None = None) -> dict[str, Any]:
    """The first `steps` steps of the scenario's speculative run at layer fidelity (event where the scenario needs its
    processes: serving.simulate.needs_event), as a Chrome trace object (of instance 0, where a deployment has several)."""
    from ..serving.deployment import simulate_deployment
    from ..serving.simulate import needs_event
    from .summary import step_table

    from .provenance import provenance
    from .sections import json_of

    passes: list[dict] = []
    events: list[dict] = []

    def on_pass(spec, plan, result):
        events.extend(pass_events(spec, plan, result, len(passes)))
        summary = {"part": spec.part, "plan": plan.label, "graph": plan.graph,
                   "begin_us": float(result["_spans"]["host_start"][0, 0]), "duration_us": result["duration"]}
        summary.update({k: result[k] for k in CATEGORIES})
        passes.append(summary)

    fidelity = "event" if needs_event(scenario) else "layer"
    server, *_ = simulate_deployment(scenario, seed=seed, fidelity=fidelity, on_pass=on_pass,
                                     max_steps=max(1, int(steps)))
    table = step_table(server)
    events.extend(step_events(table))
    ranks = scenario.spec.parallelism.tp
    meta = _meta(STEPS_PID, None, "steps", 0)
    meta += _meta(STEPS_PID, STEP_TID, "step", 0) + _meta(STEPS_PID, COUNTER_TID, "counters", 1)
    for r in range(ranks):
        meta += _meta(r + 1, None, f"rank {r}", r + 1)
        meta += _meta(r + 1, HOST_TID, "host", 0) + _meta(r + 1, GPU_TID, "gpu", 1)
    events.sort(key=lambda e: (e["pid"], e.get("tid", 0), e["ts"]))
    spec = scenario.spec
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {"scenario": spec.name, "seed": spec.seed if seed is None else seed, "fidelity": fidelity,
                      "steps": len(server.log), "ranks": ranks, "passes": passes,
                      "provenance": json_of(provenance(scenario))},
    }


def write(trace: dict, path: str) -> str:
    """Write a trace as compact JSON, gzipped when the path ends in .gz (Perfetto opens both); returns the path."""
    from .files import atomic_write

    text = json.dumps(trace, separators=(",", ":"))  # dumps: one C-encoder call, faster than dump
    if path.endswith(".gz"):
        import gzip

        with atomic_write(path, mode="wb") as handle:  # a failed write keeps the previous file
            handle.write(gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0))
        return path
    with atomic_write(path) as handle:
        handle.write(text)
    return path
