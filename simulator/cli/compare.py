"""Scenarios, or variants of one, side by side on common random numbers.

Every run uses the same seed (the first scenario's, or --seed), so the acceptance draws are identical wherever the
speculation set-up is: a difference between columns comes from the change, not from noise.
"""
from __future__ import annotations

import json
import logging
import os
import re

from ..config.errors import ConfigError
from ..results.sections import json_of
from . import limit_options

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim compare pcie8_eagle3 nvlink8_h200_eagle3          two machines, same seed
  specsim compare pcie8_eagle3 --variant "graph: runtime.cuda_graph_verify=true" --plot bars.png
  specsim compare pcie8_eagle3 pcie8_tree --format csv       one row per run, fixed columns
"""

# a new override starts where whitespace, ';' or ',' is followed by a dotted key and '='
_OVERRIDE_START = re.compile(r"[\s;,]+(?=[A-Za-z_][\w.\[\]]*\s*=)")


def configure(p) -> None:
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO", help="scenario YAML files or names")
    p.add_argument("--variant", action="append", default=[], metavar='"LABEL: path=value [path=value ...]"',
                   help="a variant of each scenario: a label and one or more dotted overrides (paths relative to the "
                   "scenario file's folder); repeatable")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value",
                   help="override applied to every run; repeatable")
    p.add_argument("--seed", type=int, help="the common seed (default: the first scenario's)")
    p.add_argument("--fidelity", choices=("fast", "layer", "link", "event"), help="override every run's fidelity")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--plot", metavar="OUT.png", help="grouped bars: throughput and baseline per run")
    rank_option(p)
    limit_options(p, memory=True)


def rank_option(p) -> None:
    """--rank-by: one of the planner's figures (simulator.results.planner.RANKINGS), best first."""
    from ..results.planner import RANKINGS

    p.add_argument("--rank-by", choices=list(RANKINGS), metavar="FIGURE",
                   help="order the runs best first by one figure: " + ", ".join(
                       f"{name} ({r.label}, {'higher' if r.higher_is_better else 'lower'} is better)"
                       for name, r in RANKINGS.items()) + "; runs without the figure (no price) go last")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """'graph verify: runtime.cuda_graph_verify=true a.b=1' -> ('graph verify', ['runtime...=true', 'a.b=1'])."""
    label, sep, rest = text.partition(":")
    if not sep or not label.strip() or "=" in label:
        raise ConfigError("command line", "--variant", f"{text!r} has no label",
                          '"LABEL: dotted.path=value [dotted.path=value ...]"')
    overrides = [part.strip() for part in _OVERRIDE_START.split(rest.strip()) if part.strip()]
    if not overrides or any("=" not in o for o in overrides):
        raise ConfigError("command line", "--variant", f"{text!r} has no dotted.path=value override",
                          '"LABEL: dotted.path=value [dotted.path=value ...]"')
    return label.strip(), overrides


def runs_of(args) -> list[tuple[str, str, list[str]]]:
    """(label, scenario path, overrides) for every run, in order."""
    variants = [parse_variant(v) for v in args.variant]
    common = list(args.overrides) + ([f"fidelity={args.fidelity}"] if args.fidelity else [])
    runs = []
    for path in args.scenarios:
        prefix = os.path.splitext(os.path.basename(path))[0]
        runs.append((prefix, path, common))
        for label, overrides in variants:
            runs.append((f"{prefix}: {label}" if len(args.scenarios) > 1 else label, path, common + overrides))
    return runs


def _sets_seed(overrides: list[str]) -> bool:
    return any(text.split("=", 1)[0].strip() == "seed" for text in overrides)


def main(args) -> int:
    from . import note, progress

    runs = runs_of(args)
    from ..api.run import resolve, run

    seed = args.seed if args.seed is not None else resolve(args.scenarios[0], None, args.overrides).spec.seed
    # the common seed comes first: a variant's own seed= wins, and then it alone is listed in the provenance
    scenarios = [resolve(path, None, ([] if _sets_seed(overrides) else [f"seed={seed}"]) + overrides)
                 for _, path, overrides in runs]  # errors first
    from ..serving.deployment import check_start
    from ..results.files import check_outputs
    from ..results.limits import check_work

    check_outputs(args)
    for scenario in scenarios:  # the limits: the whole comparison's
        check_work(scenario, args.max_work, memory_GB=args.max_memory_GB)
    refused = {}  # what a run refuses at its start (no route, a request larger than the cache), before any run
    for i, ((label, _, _), scenario) in enumerate(zip(runs, scenarios)):
        try:
            check_start(scenario)
        except ConfigError as exc:
            if len(runs) == 1:
                raise
            refused[i] = exc
    if len(refused) == len(runs):
        raise ConfigError("command line", "scenarios", "no run could be simulated: " + refused[0].line())
    for i, exc in refused.items():
        log.warning("compare: %s not simulated: %s", runs[i][0], exc.problem)
    rows = []
    bar = progress(list(zip(runs, scenarios)), desc="compare", unit="run")
    for i, ((label, _, _), scenario) in enumerate(bar, start=1):
        note(bar, f"compare: [{i}/{len(runs)}] {label}")
        try:
            if i - 1 in refused:
                raise refused[i - 1]
            rows.append(summary(label, run(scenario)))
        except ConfigError as exc:  # this variant cannot run (e.g. its weights do not fit): a row that says why
            if len(runs) == 1:
                raise
            rows.append(failed(label, exc))
            if i - 1 not in refused:
                log.warning("compare: %s not simulated: %s", label, exc.problem)
    if all(r["result"] is None for r in rows):
        raise ConfigError("command line", "scenarios", "no run could be simulated: " + rows[0]["error"])
    if args.rank_by:
        from ..results.planner import lookup, rank

        rows = rank(rows, args.rank_by,
                    lambda row, path: None if row["result"] is None else lookup(row["result"].to_dict(), path))
    text = {"table": to_table, "json": lambda r: json.dumps([{k: v for k, v in x.items() if k != "result"} for x in r],
                                                             indent=2), "csv": to_csv}[args.format](rows)
    print(text.rstrip("\n"))
    if args.plot:
        plot(rows, args.plot)
    return 0


def failed(label: str, exc: ConfigError) -> dict:
    """The row of a run that could not be simulated: every figure empty, and the reason."""
    return {"label": label, **{key: None for _, key, _ in ROWS}, "breakdown_ms_per_token": {}, "accept_len_hist": {},
            "provenance": {}, "error": exc.problem, "result": None}


def summary(label: str, result) -> dict:
    mean = lambda key: getattr(getattr(result.step_ms, key), "mean", None)  # noqa: E731
    load = result.load or {}
    p90 = lambda key: (load.get(key) or {}).get("p90")  # noqa: E731
    return {"label": label, "scenario": result.scenario, "seed": result.seed,
            "throughput_tok_s": result.throughput_tok_s, "baseline_tok_s": result.baseline_tok_s,
            "speedup": result.speedup, "mean_accept_len": result.mean_accept_len,
            "verify_ms": mean("verify"), "draft_ms": mean("draft"), "step_ms": mean("step"),
            "baseline_decode_ms": mean("baseline_decode"), "breakeven_accept_len": result.breakeven_accept_len,
            "gpus": result.planner.get("gpus"),
            "throughput_tok_s_per_gpu": result.planner.get("throughput_tok_s_per_gpu"),
            "goodput_tok_s_per_gpu": result.planner.get("goodput_tok_s_per_gpu"),
            "target_met": result.planner.get("target_met"), "usd_per_mtok": result.planner.get("usd_per_mtok"),
            "ttft_p90_ms": p90("ttft_ms"), "tpot_p90_ms": p90("tpot_ms"), "itl_p90_ms": p90_client(load, "itl_ms"),
            "mean_batch": load.get("mean_batch"), "kv_peak_tokens": load.get("kv_peak_tokens"),
            "kv_capacity_tokens": load.get("kv_capacity_tokens"), "kv_peak_fraction": load.get("kv_peak_fraction"),
            "error": "",
            "breakdown_ms_per_token": dict(result.breakdown_ms_per_token),
            "accept_len_hist": dict(result.accept_len_hist), "provenance": json_of(result.provenance),
            "result": result}


def p90_client(load: dict, key: str):
    return ((load.get("client") or {}).get(key) or {}).get("p90")


ROWS = (("throughput (tok/s)", "throughput_tok_s", 1), ("baseline (tok/s)", "baseline_tok_s", 1),
        ("speedup", "speedup", 2), ("mean accept length", "mean_accept_len", 2), ("verify pass (ms)", "verify_ms", 2),
        ("drafting (ms)", "draft_ms", 2), ("speculative step (ms)", "step_ms", 2),
        ("plain decode step (ms)", "baseline_decode_ms", 2), ("break-even accept length", "breakeven_accept_len", 2),
        ("GPUs", "gpus", 0), ("tok/s per GPU", "throughput_tok_s_per_gpu", 1),
        ("goodput tok/s per GPU", "goodput_tok_s_per_gpu", 1), ("$ per M output tokens", "usd_per_mtok", 2),
        ("p90 TTFT (ms)", "ttft_p90_ms", 1), ("p90 TPOT (ms)", "tpot_p90_ms", 2), ("p90 ITL (ms)", "itl_p90_ms", 2),
        ("latency target met", "target_met", None), ("mean batch", "mean_batch", 1),
        ("KV cache peak (tokens)", "kv_peak_tokens", 0), ("KV cache capacity (tokens)", "kv_capacity_tokens", 0),
        ("KV cache peak (share)", "kv_peak_fraction", 2))


def to_table(rows: list[dict]) -> str:
    width = max(12, *(len(r["label"]) for r in rows))
    lines = [f"{'':28}" + "".join(f" {r['label']:>{width}}" for r in rows)]
    for name, key, digits in ROWS:
        lines.append(f"{name:28}" + "".join(f" {_cell(r[key], digits):>{width}}" for r in rows))
    done = [r for r in rows if r["result"] is not None]
    lines.append("time per token (ms)")
    for category in done[0]["breakdown_ms_per_token"]:
        lines.append(f"  {category:26}" + "".join(
            f" {_cell(r['breakdown_ms_per_token'].get(category), 2):>{width}}" for r in rows))
    lines.append(f"  {'total':26}" + "".join(
        f" {_cell(sum(r['breakdown_ms_per_token'].values()) if r['result'] else None, 2):>{width}}" for r in rows))
    lines += [f"{r['label']}: not simulated: {r['error']}" for r in rows if r["result"] is None]
    seeds = list(dict.fromkeys(r["seed"] for r in done))
    lines.append(f"common random numbers: every run used seed {seeds[0]}." if len(seeds) == 1 else
                 "seeds: " + ", ".join(f"{r['label']} {r['seed']}" for r in done) + " (a variant set its own).")
    target = done[0]["result"].load.get("target") or {}
    if target:
        lines.append(f"goodput: output tokens of the requests with TTFT <= {target['ttft_ms']:g} ms and TPOT <= "
                     f"{target['tpot_ms']:g} ms (the first run's target); per GPU: over the GPUs each run holds.")
    return "\n".join(lines)


def _cell(x, digits) -> str:
    """A table cell: '-' where there is no figure, yes/no for a flag, else the number."""
    if x is None:
        return "-"
    if isinstance(x, bool) or digits is None:
        return "yes" if x else "no"
    return f"{x:,.{digits}f}"


def to_csv(rows: list[dict]) -> str:
    """One row per run: a label, then the same fixed columns as `specsim run --format csv`."""
    from ..results.report import CSV_COLUMNS, csv_row, write_csv

    return write_csv([{"label": r["label"], **(csv_row(r["result"]) if r["result"] else {}), "error": r["error"]}
                      for r in rows], ("label", *CSV_COLUMNS, "error"))


def plot(rows: list[dict], path: str) -> None:
    try:
        from ..viz.figures import grouped_bars
    except ImportError as exc:
        raise ConfigError("command line", "--plot", f"plotting is unavailable: {exc}", "install matplotlib") from None
    rows = [r for r in rows if r["result"] is not None]
    grouped_bars([r["label"] for r in rows],
                 {"speculative": [r["throughput_tok_s"] for r in rows], "plain decode": [r["baseline_tok_s"] for r in rows]},
                 ylabel="tokens/s", title="throughput, speculative vs plain decode (same seed)", path=path)
    log.info("plot: %s", path)
