"""Simulate one scenario and the same machine with speculation off (same seed); a table, JSON or CSV on stdout.

The scenario is a YAML file or the name of a shipped one (`specsim list scenarios`). Outputs (--steps-log, --trace,
--plot) are written where you say, relative to the current directory.
"""
from __future__ import annotations

import logging

from ..config.errors import ConfigError
from . import overrides_of, scenario_options

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim run pcie8_ngram                                  the reference machine's n-gram run
  specsim run scenarios/pcie8_eagle3.yaml --format json    a file, one JSON object
  specsim pcie8_eagle3 --set runtime.cuda_graph_verify=true --set topology=nvlink8_h200
  specsim run pcie8_eagle3 --trace t.json --trace-steps 5  a Perfetto timeline of 5 steps
"""


def configure(p) -> None:
    scenario_options(p, formats=("table", "json", "csv", "csv-long"))
    p.add_argument("--steps-log", metavar="OUT.csv", help="write every step of the speculative run as CSV")
    p.add_argument("--no-baseline", action="store_true", help="skip the no-speculation baseline run")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write a Chrome/Perfetto trace of the first steps, re-simulated at layer fidelity")
    p.add_argument("--trace-steps", type=int, default=20, metavar="N",
                   help="steps the trace covers (default 20, at most 200); a .json.gz path is gzipped")
    p.add_argument("--plot", metavar="OUT.png", help="write a summary figure of the run (PNG, or SVG for .svg)")


def trace_limit() -> int:
    from ..results.trace import MAX_STEPS

    return MAX_STEPS


def main(args) -> int:
    from ..experiments.memory import startup_gc

    with startup_gc() as started:  # no cycle collection while importing and loading; what they made is then frozen
        return _main(args, started)


def _main(args, started) -> int:
    from ..results.report import to_csv, to_csv_long, to_json, to_table
    from ..results.files import check_outputs
    from ..results.limits import check_run
    from ..api.run import resolve, run, runs_kept

    check_outputs(args)  # before any simulation: a bad output path costs one line, not a run
    if args.trace and not 1 <= args.trace_steps <= trace_limit():
        raise ConfigError("command line", "--trace-steps", f"{args.trace_steps} steps",
                          f"1..{trace_limit()}: a trace is for a close look at a few steps (about 0.5 MB per step on "
                          "8 ranks; write .json.gz for a tenth of that)")
    scenario = resolve(args.scenario, set_args=overrides_of(args))
    runs = runs_kept(scenario, not args.no_baseline)
    check_run(scenario, args.max_work, runs=runs, memory_GB=args.max_memory_GB)  # before the estimate line
    from ..results.progress import shown

    started()
    with shown(scenario, runs):  # long runs: progress and time left on stderr
        # the limits as given (checked above), and the steps log written as the run goes
        result = run(scenario, baseline=not args.no_baseline, max_work=args.max_work, max_memory_GB=args.max_memory_GB,
                     steps_log=args.steps_log)
    text = {"table": to_table, "json": to_json, "csv": to_csv, "csv-long": to_csv_long}[args.format](result)
    print(text.rstrip("\n"))
    if args.steps_log:
        log.info("steps: %s", args.steps_log)
    if args.trace:
        from ..results import trace

        events = trace.record(scenario, steps=args.trace_steps)
        trace.write(events, args.trace)
        log.info("trace: %s (%d steps at %s fidelity; open in https://ui.perfetto.dev or chrome://tracing)",
                 args.trace, events["otherData"]["steps"], events["otherData"]["fidelity"])
    if args.plot:
        from ..viz.figures import run_summary

        log.info("plot: %s", run_summary(result, path=args.plot))
    return 0
