"""Published measurements against the simulator: every case in scenarios/validation/, its error, and the mean and
maximum absolute error. Nothing in the validation set is fitted (calibration reads scenarios/measured/ only)."""
from __future__ import annotations

import json
import sys

EXAMPLES = """
  specsim validate                                        every shipped case, a table
  specsim validate --format markdown                      the README's table
  specsim validate nccl_tests_272_h200 --format json      one shipped file, by name (or a path)
  specsim validate bench.json --scenario my_scenario.yaml  a vllm bench serve / sglang.bench_serving result file
"""


def configure(p) -> None:
    p.add_argument("paths", nargs="*", help="validation files or folders, or names of shipped validation files "
                   "(default: the shipped set, scenarios/validation)")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    p.add_argument("--scenario", help="the scenario a benchmark client's result file (JSON / JSONL) ran on: its "
                   "engine, machine and model (the file gives the workload)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value",
                   help="override the --scenario's fields; repeatable")


def _rows(outcomes) -> list[dict]:
    return [{"source": o.source.id, "case": o.case.name, "unit": o.case.unit, "measured": o.case.measured,
             "simulated": o.simulated, "error": o.error, "note": o.case.note, "file": o.file} for o in outcomes]


def _print_table(rows: list[dict], summary: dict) -> None:
    print(f"{'source':<18} {'case':<58} {'measured':>10} {'simulated':>10} {'error':>7}")
    for r in rows:
        unit = f" {r['unit']}"
        print(f"{r['source'][:18]:<18} {r['case'][:58]:<58} {r['measured']:10.4g} {r['simulated']:10.4g} "
              f"{100 * r['error']:+6.1f}%{unit}")
    _print_summary(summary)


def _print_markdown(rows: list[dict], summary: dict) -> None:
    print("| source | case | measured | simulated | error |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['source']} | {r['case']} | {r['measured']:.4g} {r['unit']} | {r['simulated']:.4g} | "
              f"{100 * r['error']:+.1f}% |")
    print()
    _print_summary(summary)


def _print_summary(s: dict) -> None:
    for name, g in s.get("groups", {}).items():
        print(f"  {name:<13} {g['figures']:3d} figures: mean absolute error {100 * g['mean_abs_error']:.1f}%, "
              f"maximum {100 * g['max_abs_error']:.1f}%")
    print(f"{s['figures']} figures from {s['sources']} sources ({s['organisations']} organisations): "
          f"mean absolute error {100 * s['mean_abs_error']:.1f}%, maximum {100 * s['max_abs_error']:.1f}%")


def main(args) -> int:
    if isinstance(args, list):  # called with argv by the dispatcher
        from . import ArgumentParser

        p = ArgumentParser(prog="python -m simulator validate", description=__doc__)
        configure(p)
        args = p.parse_args(args)
    import os

    from ..analysis import bench_files
    from ..analysis import validate as v
    from ..config.errors import ConfigError

    paths = []
    for path in [v.locate(p) for p in args.paths] or [v.default_dir()]:  # every name checked before any run
        paths += v.files(path) if os.path.isdir(path) else [path]
    benches = [p for p in paths if bench_files.looks_like_bench(p)]
    if benches and not getattr(args, "scenario", None):
        raise ConfigError("command line", "--scenario", f"{benches[0]} is a benchmark client's result file: it "
                          "records the workload, not the engine or machine", "--scenario SCENARIO")
    for path in benches:
        bench_files.read_bench(path)  # a malformed file is one line, before any run
    outcomes = []
    progress = sys.stderr.isatty()
    for i, path in enumerate(paths):
        if progress:
            print(f"\r  {i + 1}/{len(paths)} {os.path.basename(path):<40}", end="", file=sys.stderr, flush=True)
        outcomes += bench_files.evaluate(path, args.scenario, getattr(args, "overrides", [])) \
            if path in benches else v.evaluate(path)
    if progress:
        print("\r" + " " * 50 + "\r", end="", file=sys.stderr, flush=True)
    rows, summary = _rows(outcomes), v.summary(outcomes)
    if args.format == "json":
        print(json.dumps({"cases": rows, **summary}, indent=2))
    elif args.format == "markdown":
        _print_markdown(rows, summary)
    else:
        _print_table(rows, summary)
    return 0
