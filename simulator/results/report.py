"""Human-readable and scriptable renderings of a Result: a table, JSON, CSV."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from .deployment import deployment_lines
from .planner import table_lines as planner_lines
from .client import client_line
from .collective_sections import AllreduceChoice
from .sections import GpuPrice, LoadFigures, PercentilesMs, Provenance, StatsMs, TargetCheck
from .summary import BREAKDOWN, Result, merged_windows


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: non-finite numbers become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return finite(value.item())
    return value


def to_json(result: Result) -> str:
    return json.dumps(finite(result.to_dict()), indent=2, allow_nan=False)


# The CSV columns, the same for every scenario: nested sections with their fixed sub-keys (a missing section, e.g.
# the verify statistics of a run without speculation, leaves its cells empty). Histograms, windows and other
# variable-length parts are in the long form (`--format csv-long`) and the JSON.
STEP_STATS = StatsMs._keys()  # mean, p50, p99
PERCENTILES = PercentilesMs._keys()  # mean, p50, p90, p99
ALLREDUCE = tuple(k for k in AllreduceChoice._keys() if k != "implementation")  # bytes, algorithm, ..., busbw_GBps
LOAD = {**{k: PERCENTILES for k in ("ttft_ms", "tpot_ms", "queue_ms")}, "request_throughput_rps": None,
        "goodput_rps": None, "goodput_tok_s": None, "slo_attainment": None,
        "target": TargetCheck._keys(),
        "kv_peak_tokens": None,
        "kv_capacity_tokens": None, "kv_peak_fraction": None, "preemptions": None, "mean_batch": None,
        "max_waiting": None}
PROVENANCE = Provenance._keys()
CSV_SHAPE: dict[str, Any] = {
    "scenario": None, "fidelity": None, "seed": None, "throughput_tok_s": None, "baseline_tok_s": None,
    "speedup": None, "mean_accept_len": None, "breakeven_accept_len": None, "tokens": None, "sim_time_s": None,
    "wall_time_s": None, "tpot_ms": None, "ttft_ms": None,
    "step_ms": {k: STEP_STATS for k in ("decode", "verify", "draft", "step", "baseline_decode")},
    "breakdown_ms_per_token": BREAKDOWN,
    "allreduce_per_pass": None,
    "allreduce_ms_per_pass": {k: ("rank_mean", "profiled_rank", "transfer", "wait") for k in ("verify", "decode")},
    "allreduce_choice": {k: ALLREDUCE for k in ("decode", "verify")},
    "speculation": ("method", "draft_tokens", "verify", "expected_accept_len"),
    "graph_verify": None, "eager_verify": None,
    "policy": ("kind", "steps", "speculative_share"),
    "what_if": {"cuda_graph_verify": ("verify_ms", "breakeven_accept_len", "speedup_at_this_accept_len")},
    "load": LOAD, "baseline_load": LOAD,
    "planner": {**{k: None for k in ("gpus", "throughput_tok_s_per_gpu", "baseline_tok_s_per_gpu",
                                     "goodput_tok_s_per_gpu", "baseline_goodput_tok_s_per_gpu", "target_met",
                                     "baseline_target_met", "usd_per_mtok", "baseline_usd_per_mtok",
                                     "usd_per_good_mtok")},
                "price": GpuPrice._keys()},
    "provenance": PROVENANCE,
    "deployment": ("instances", "router", "tp", "gpus", "total_tok_s"),
}


def _columns(shape: Any, prefix: str = "") -> list[str]:
    if shape is None:
        return [prefix.rstrip(".")]
    if isinstance(shape, tuple):
        return [f"{prefix}{k}" for k in shape]
    return [c for key, sub in shape.items() for c in _columns(sub, f"{prefix}{key}.")]


CSV_COLUMNS = tuple(_columns(CSV_SHAPE))


def _cells(result: Result) -> dict[str, Any]:
    """The result's JSON, finite, with the override list joined by '; ' (one cell)."""
    data = finite(result.to_dict())
    prov = data.get("provenance") or {}
    data["provenance"] = {**prov, "overrides": "; ".join(prov.get("overrides") or [])}
    return data


def csv_row(result: Result) -> dict[str, Any]:
    """The result as one row of CSV_COLUMNS."""
    flat = flatten(_cells(result))
    return {column: flat.get(column, "") for column in CSV_COLUMNS}


def write_csv(rows: list[dict[str, Any]], columns) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows([{k: ("" if v is None else v) for k, v in row.items()} for row in rows])
    return buffer.getvalue()


def to_csv(result: Result) -> str:
    """One row under the fixed header CSV_COLUMNS."""
    return write_csv([csv_row(result)], CSV_COLUMNS)


def long_rows(result: Result) -> list[dict[str, Any]]:
    """Every figure of the result as (scenario, quantity, key, value): histograms and windows one row per entry."""
    data = _cells(result)
    out = []
    for name, value in flatten({k: v for k, v in data.items()
                                if k not in ("accept_len_hist", "accept_len_windows")}).items():
        out.append({"scenario": result.scenario, "quantity": name, "key": "", "value": value})
    for length, count in (data.get("accept_len_hist") or {}).items():
        out.append({"scenario": result.scenario, "quantity": "accept_len_hist", "key": length, "value": count})
    for window in data.get("accept_len_windows") or []:
        key = f"{window['start']}-{window['end']}"
        out.append({"scenario": result.scenario, "quantity": "accept_len_windows.mean_accept_len", "key": key,
                    "value": window["mean_accept_len"]})
        out.append({"scenario": result.scenario, "quantity": "accept_len_windows.steps", "key": key,
                    "value": window["steps"]})
    return out


def to_csv_long(result: Result) -> str:
    """The long form: columns scenario, quantity, key, value (one row per figure, per histogram bin, per window)."""
    return write_csv(long_rows(result), ("scenario", "quantity", "key", "value"))


def verdict(result: Result) -> list[str]:
    """Plain words: does speculation pay here, and why not."""
    be, acc = result.breakeven_accept_len, result.mean_accept_len
    if result.speculation.method == "none" or be is None:
        return []
    step, base = result.step_ms.step, result.step_ms.baseline_decode
    lines = [f"break-even: speculation pays when the accept length exceeds {be:.2f} "
             f"(speculative step {_fmt(step and step.mean)} ms / plain decode step {_fmt(base and base.mean, 2)} ms)."]
    if acc > be:
        lines.append(f"verdict: speculation PAYS here: accept length {acc:.2f} > {be:.2f}, {result.speedup:.2f}x the baseline.")
    else:
        lines.append(f"verdict: speculation LOSES here: accept length {acc:.2f} < {be:.2f}, "
                     f"{result.speedup:.2f}x the baseline.")
    bd = result.breakdown_ms_per_token
    total = sum(bd.values())
    verify = result.allreduce_ms_per_pass.get("verify")
    vstep = result.step_ms.verify and result.step_ms.verify.mean
    if verify and vstep and result.allreduce_per_pass:
        share = verify["rank_mean"] / vstep
        choice = result.allreduce_choice.get("verify") or result.allreduce_choice["decode"]
        # the verify steps' own split (not the whole run's, which plain decode steps would dilute)
        waiting = verify.get("wait", bd["allreduce_wait"]) > verify.get("transfer", bd["allreduce_transfer"])
        cause = ("mostly waiting at the barrier for the slowest rank's host to launch its kernels"
                 + (" eagerly" if result.eager_verify else "")) if waiting else \
            (f"mostly transfer: {result.allreduce_per_pass} all-reduces of "
             f"{choice['time_us']:.0f} us each ({choice['algorithm']}/{choice['protocol']})")
        lines.append(f"why: a profile of one rank shows {verify['profiled_rank']:.1f} ms of all-reduce in each "
                     f"{vstep:.1f} ms verify pass ({share:.0%} of it averaged over all ranks, the slowest included), "
                     f"{cause}.")
    graph = result.what_if.get("cuda_graph_verify")
    if acc <= be:
        flip = f"what would flip it: an accept length above {be:.2f}"
        if graph:
            flip += (f"; or capturing the verify in a CUDA graph ({graph['verify_ms']:.1f} ms instead of "
                     f"{vstep:.1f} ms) lowers the break-even to {graph['breakeven_accept_len']:.2f}, "
                     f"which this drafter's {acc:.2f} would turn into {graph['speedup_at_this_accept_len']:.2f}x")
        flip += " (python -m simulator plan ranks every lever)."
        lines.append(flip)
    if total > 0:
        top = max(bd, key=bd.get)
        lines.append(f"largest cost per token: {top.replace('_', ' ')} ({bd[top]:.2f} of {total:.2f} ms).")
    return lines


def _header_lines(r: Result) -> list[str]:
    """What was run: version, scenario, description, overrides, fidelity, seed, size."""
    p = r.provenance
    lines = [f"specsim {p.specsim_version if p else ''}: {r.scenario}".replace(" :", ":")]
    if r.description:
        lines.append(f"  {r.description}")
    if p and p.engine:
        lines.append(f"  engine {p.engine}, profile {p.engine_profile}")
    if p and p.overrides:
        lines.append(f"  overrides: {'; '.join(p.overrides)}")
    lines.append(f"fidelity {r.fidelity}, seed {r.seed}, {r.tokens:,} tokens, simulated {r.sim_time_s:,.1f} s "
                 f"in {r.wall_time_s:.2f} s wall")
    return lines + [""]


def _speculation_lines(r: Result, spec: bool) -> list[str]:
    """Throughput, accept lengths and the verify / draft / decode step times."""
    lines = [f"  throughput          {r.throughput_tok_s:8.1f} tok/s" +
             (f"   baseline {r.baseline_tok_s:.1f} tok/s   speedup {r.speedup:.2f}x" if spec else "")]
    if spec:
        expected = r.speculation.expected_accept_len
        lines.append(f"  mean accept length  {r.mean_accept_len:8.2f}" +
                     (f"         (acceptance model's expectation {expected:.2f})" if expected else ""))
        hist = "  ".join(f"{k}:{v}" for k, v in r.accept_len_hist.items())
        if hist:
            lines.append(f"  accept histogram    {hist}")
    s = r.step_ms
    if spec and not s.verify:
        lines.append(f"  verify pass         {'-':>8}      no speculative step ran (the {r.policy.get('kind', '')} "
                     "policy never chose to speculate)")
    elif spec:
        lines.append(f"  verify pass         {_fmt(s.verify.mean):>8} ms   p50 {_fmt(s.verify.p50)}  "
                     f"p99 {_fmt(s.verify.p99)}   ({'CUDA graph' if r.graph_verify else 'eager'})")
        lines.append(f"  drafting            {_fmt(s.draft.mean, 2):>8} ms   whole step {_fmt(s.step.mean)} ms")
    if s.baseline_decode:
        lines.append(f"  plain decode step   {_fmt(s.baseline_decode.mean, 2):>8} ms")
    return lines


def _machine_lines(r: Result) -> list[str]:
    """All-reduces per pass and their cost, and where kernel times came from."""
    sizes = "; ".join(f"{c['algorithm']}/{c['protocol']} {c['time_us']:.1f} us at {c['bytes']:,} B ({kind})"
                      for kind, c in r.allreduce_choice.items())
    lines = [f"  all-reduce          {r.allreduce_per_pass:8d} per pass; {sizes}"] if r.allreduce_per_pass or \
        not r.collectives else []
    if r.collectives:
        kinds = ", ".join(f"{c['count']} {kind} x {c['us_each']:.1f} us" for kind, c in r.collectives["kinds"].items())
        lines.append(f"  collectives         per decode pass of batch {r.collectives['batch']}: {kinds}")
    for kind, ar in r.allreduce_ms_per_pass.items():
        lines.append(f"    per {kind} pass    {ar['profiled_rank']:8.1f} ms on a typical rank (profile), "
                     f"{ar['rank_mean']:.1f} ms averaged over ranks (transfer + waiting)")
    if r.kernels:
        families = ", ".join(f"{f} {how}" for f, how in r.kernels.families.items() if how != "measured")
        lines.append(f"  kernel times        {r.kernels.source}" + (f"; {families}" if families else ""))
    return lines


def _policy_lines(r: Result, spec: bool) -> list[str]:
    """Accept length per window of each request, and how often a dynamic policy speculated."""
    lines, windows, pol = [], r.accept_len_windows, r.policy
    if spec and len(windows) > 1:
        windows = merged_windows(windows)
        values = " ".join(f"{w['mean_accept_len']:.2f}" for w in windows)
        lines.append(f"  accept length per {windows[0]['end'] - windows[0]['start']:,}-token window of each request: "
                     f"{values}")
    if spec and pol.get("kind", "static") != "static":
        share = f"  policy {pol['kind']}: speculated in {pol['speculative_share']:.0%} of {pol['steps']:,} steps"
        if pol.get("drafter_share"):
            share += " (" + ", ".join(f"{k} {v:.0%}" for k, v in pol["drafter_share"].items()) + ")"
        lines.append(share)
    return lines


def _load_lines(load: LoadFigures | None) -> list[str]:
    """Latency percentiles, queueing, KV use and goodput, when the run was loaded (batches, KV pressure)."""
    if not load or not (load.get("mean_batch", 1) > 1.01 or load.get("kv_peak_fraction", 0) > 0.5
                        or load.get("preemptions")):
        return []

    def pct(name):
        v = load.get(name) or {}
        return f"p50 {v.get('p50', 0):,.1f} / p99 {v.get('p99', 0):,.1f} ms" if v else "-"
    return [f"  load                {load['request_throughput_rps']:.3f} req/s, mean batch "
            f"{load['mean_batch']:.1f}; TTFT {pct('ttft_ms')}; TPOT {pct('tpot_ms')}",
            f"    queueing          {pct('queue_ms')} waiting for a batch slot or KV memory (most waiting "
            f"{load['max_waiting']}); KV cache peak {load['kv_peak_tokens']:,} of "
            f"{load['kv_capacity_tokens']:,} tokens ({load['kv_peak_fraction']:.0%})"
            + (f"; {load['preemptions']} preemptions" if load.get("preemptions") else ""),
            f"    goodput           {load['goodput_rps']:.3f} req/s meet TTFT <= {load.target.ttft_ms:g} ms "
            f"and TPOT <= {load.target.tpot_ms:g} ms ({load['slo_attainment']:.0%} of requests)"]


def to_table(result: Result) -> str:
    """The human-readable report: what was run, the figures, the time per token and the verdict."""
    r = result
    spec = r.speculation.method != "none"
    lines = (_header_lines(r) + _speculation_lines(r, spec) + _machine_lines(r) + _policy_lines(r, spec)
             + _load_lines(r.load) + (client_line(r.load) if _load_lines(r.load) else []) + planner_lines(r) + deployment_lines(r) + [""])
    bd = r.breakdown_ms_per_token
    lines.append("  time per token (ms): " + "  ".join(f"{k.replace('allreduce_', 'AR ')} {bd[k]:.2f}" for k in BREAKDOWN)
                 + f"  = {sum(bd.values()):.2f}")
    text = verdict(r)
    if text:
        lines.append("")
        lines.extend("  " + line for line in text)
    return "\n".join(lines)

