"""`python -m simulator SCENARIO.yaml`: one scenario and its baseline, as a table, JSON or CSV."""
from __future__ import annotations

import csv
import sys

from . import ArgumentParser, limit_options


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m simulator SCENARIO.yaml", description="Simulate a scenario and its baseline.")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--fidelity", choices=("fast", "layer", "link"), help="override the scenario's fidelity")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value",
                   help="override any scenario, topology (topology.*) or model (model.*) field; repeatable")
    p.add_argument("--steps-log", metavar="OUT.csv", help="write every step of the speculative run as CSV")
    p.add_argument("--no-baseline", action="store_true", help="skip the no-speculation baseline run")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write a Chrome/Perfetto trace of the first steps, re-simulated at layer fidelity")
    p.add_argument("--trace-steps", type=int, default=20, metavar="N", help="steps the trace covers (default 20)")
    p.add_argument("--plot", metavar="OUT.png", help="write a summary figure of the run (PNG, or SVG for .svg)")
    limit_options(p)
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from ..results.files import check_outputs
    from ..results.limits import check_work
    from ..results.run import resolve, run
    from ..results.report import to_csv, to_json, to_table

    check_outputs(args)  # before any simulation: a bad output path costs one line, not a run

    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    if args.fidelity:
        overrides.append(f"fidelity={args.fidelity}")
    scenario = resolve(args.scenario, set_args=overrides)
    runs = 1 if args.no_baseline else 2
    check_work(scenario, args.max_work, runs=runs)
    from ..results.progress import shown

    with shown(scenario, runs):  # long runs: progress and time left on stderr
        result = run(scenario, baseline=not args.no_baseline)
    text = {"table": to_table, "json": to_json, "csv": to_csv}[args.format](result)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if args.steps_log:
        write_steps(args.steps_log, result)
    if args.trace:
        from ..results import trace

        events = trace.record(resolve(args.scenario, set_args=overrides), steps=args.trace_steps)
        trace.write(events, args.trace)
        print(f"trace: {args.trace} ({events['otherData']['steps']} steps at layer fidelity; open in "
              f"https://ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
    if args.plot:
        from ..viz.figures import run_summary

        print(f"plot: {run_summary(result, path=args.plot)}", file=sys.stderr)
    return 0


def write_steps(path: str, result) -> None:
    from ..engine.server import STEP_FIELDS

    from ..results.files import atomic_write

    with atomic_write(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEP_FIELDS)
        for row in zip(*(result.run.steps[name] for name in STEP_FIELDS)):
            writer.writerow([f"{v:.6g}" for v in row])
