"""The deployment frontier: output tokens/s per GPU against tokens/s per user, over the splits of the GPUs that fit,
speculation settings and concurrent users, with and without speculation (simulator/analysis/pareto.py). The points
run as a sweep (locally or on Dask, resumable from PREFIX.results.csv); the frontier is printed and written as CSV
and a figure (PNG or SVG).
"""
from __future__ import annotations

import logging
import os

from ..config.errors import ConfigError
from . import limit_options

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim pareto h200_dsv3_dpattn_ep8 --tpot-ms 50 --ttft-ms 2000     DeepSeek-V3 on 8x H200
  specsim pareto pcie8_eagle3 --users 1,4,16 --plot kimi.svg          Kimi-K2.5 on the reference machine
  specsim pareto my.yaml --gpus 4 --dask tcp://scheduler:8786         on a Dask cluster
"""


def configure(p) -> None:
    p.add_argument("scenario", help="scenario YAML file or name: its model, machine, engine and drafter")
    p.add_argument("--gpus", type=int, metavar="N", help="GPUs each deployment uses (default: the scenario's)")
    p.add_argument("--tpot-ms", type=float, metavar="MS", help="latency target: p90 TPOT (default: the scenario's)")
    p.add_argument("--ttft-ms", type=float, metavar="MS", help="latency target: p90 TTFT (default: the scenario's)")
    p.add_argument("--users", default=",".join(str(u) for u in _users()), metavar="N,N,...",
                   help="concurrent users, each sending one request at once (default: %(default)s)")
    p.add_argument("--prompt-tokens", type=int, default=1000, metavar="N", help="prompt of each request (default 1000)")
    p.add_argument("--output-tokens", type=int, default=256, metavar="N", help="output of each request (default 256)")
    p.add_argument("--out", metavar="PREFIX", help="PREFIX.results.csv (every point), PREFIX.csv (the frontiers) "
                   "and PREFIX.png (default: pareto_<scenario> in the current directory)")
    p.add_argument("--plot", metavar="FIG.png|FIG.svg", help="the figure's file (default: PREFIX.png)")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: the number of CPUs)")
    p.add_argument("--dask", metavar="tcp://HOST:PORT", help="run the points on this Dask scheduler")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value",
                   help="override the scenario for every point; repeatable")
    p.add_argument("--format", choices=("table", "csv"), default="table", help="what stdout gets")
    limit_options(p)


def _users() -> tuple[int, ...]:
    from ..analysis.pareto import USERS

    return USERS


def _parse_users(text: str) -> tuple[int, ...]:
    try:
        users = tuple(sorted({int(u) for u in text.split(",") if u.strip()}))
    except ValueError:
        users = ()
    if not users or users[0] < 1:
        raise ConfigError("command line", "--users", f"{text!r}", "comma-separated whole numbers >= 1, e.g. 1,4,16")
    return users


def _fixed(args) -> dict:
    from ..config import parse_override

    fixed = {"workload.arrival": {"kind": "all_at_once"}, "workload.max_concurrency": None,
             "workload.prompt_tokens": args.prompt_tokens, "workload.output_tokens": args.output_tokens,
             "policy": {"kind": "static"}}
    if args.tpot_ms is not None:
        fixed["workload.target.tpot_ms"] = args.tpot_ms
    if args.ttft_ms is not None:
        fixed["workload.target.ttft_ms"] = args.ttft_ms
    return {**fixed, **dict(parse_override(o) for o in args.overrides)}


def main(args) -> int:
    from ..analysis import pareto
    from ..config.catalog import locate
    from ..experiments.rows import read_results
    from ..experiments.sweep import run_sweep
    from ..experiments.sweepfile import Sweep, SweepSpec
    from ..results.files import check_output_file
    from ..results.limits import check_workers
    from ..api.run import resolve
    from . import show_progress

    check_workers(args.workers)
    users = _parse_users(args.users)
    for name in ("prompt_tokens", "output_tokens", "gpus"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ConfigError("command line", f"--{name.replace('_', '-')}", f"{getattr(args, name)}", ">= 1")
    path = os.path.abspath(locate(args.scenario, "scenario"))
    fixed = _fixed(args)
    base = resolve(path, {k.replace(".", "__"): v for k, v in fixed.items()})
    prefix = args.out or f"pareto_{base.spec.name}"
    plot = args.plot or f"{prefix}.png"
    if not plot.lower().endswith((".png", ".svg")):
        raise ConfigError("command line", "--plot", f"{plot}: unknown figure format", "a .png or .svg file")
    for out in (f"{prefix}.results.csv", f"{prefix}.csv", plot):
        check_output_file(out, "--out" if out != plot else "--plot")
    axes = pareto.grid(base, args.gpus, users)
    spec = SweepSpec.model_validate({"scenario": path, "mode": "zip", "axes": axes, "set": fixed,
                                     "metrics": list(pareto.METRICS), "name": os.path.basename(prefix)})
    sweep = Sweep(spec=spec, file=path, scenario_path=path, name=os.path.basename(prefix))
    log.info("pareto: %d points (%d splits x %d speculation settings x %d user counts)", len(axes["parallelism"]),
             len(pareto.splits(args.gpus or base.spec.parallelism.num_gpus, base.model.moe is not None)),
             len(pareto.speculation_settings(base.spec.speculation)), len(users))
    report = run_sweep(sweep, workers=args.workers, dask_address=args.dask, out=f"{prefix}.results.csv",
                       progress=None if show_progress() else False, max_work=args.max_work)
    log.info("%s", report.line())
    points, failed = pareto.parse_rows(read_results(report.out))
    if not points:
        raise ConfigError(path, "parallelism", "no deployment could be simulated: " + (failed[0][1] if failed else ""))
    fronts = {"all": pareto.frontier(points), "no speculation": pareto.frontier([p for p in points if not p.speculating])}
    from ..viz.pareto import pareto_figure, write_frontiers, frontier_table

    write_frontiers(points, fronts, f"{prefix}.csv")
    pareto_figure(points, fronts, base, plot)
    print(frontier_table(points, fronts, failed, base) if args.format == "table" else open(f"{prefix}.csv").read())
    log.info("pareto: %s.csv, %s (every point: %s)", prefix, plot, report.out)
    return 0
