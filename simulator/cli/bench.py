"""Benchmark the simulator: simulated tokens per wall-second for the reference scenarios at each fidelity, each
figure the best and median of several runs, paired with a bare SimPy loop timed in the same process."""
from __future__ import annotations

import logging
import os

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim bench                                    the reference scenarios, every fidelity
  specsim bench pcie8_eagle3 --fidelity fast --tokens 2048,8192 --repeat 3
"""


def configure(p) -> None:
    from ..experiments.bench import DEFAULT_REPEATS, DEFAULT_TOKENS

    p.add_argument("scenarios", nargs="*", help="scenario files or names (default: the reference scenarios)")
    p.add_argument("--fidelity", action="append", choices=tuple(DEFAULT_TOKENS), help="repeatable; default: all")
    p.add_argument("--tokens", help="comma-separated generated-token counts (default per fidelity)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help=f"runs per figure (default {', '.join(f'{k} {v}' for k, v in DEFAULT_REPEATS.items())})")
    from . import limit_options

    limit_options(p)  # --max-work bounds each figure's estimated work (its repeats together)
    p.add_argument("--startup", type=int, nargs="?", const=9, metavar="PAIRS",
                   help="instead: CPU of the main command (pcie8_ngram) over `python -c \"import numpy\"`, median of "
                        "PAIRS (default 9) interleaved pairs")


def main(args) -> int:
    from ..config.catalog import locate
    from ..config.errors import ConfigError
    from ..experiments.bench import (DEFAULT_REPEATS, DEFAULT_TOKENS, REFERENCE_SCENARIOS, TARGETS, cold_warm, measure,
                                     target_line)
    from . import note, progress

    if args.startup is not None:
        return _startup(args.startup)
    tokens_asked = _tokens(args.tokens) if args.tokens else None  # a mistake stops here, before any run
    if args.repeat is not None and args.repeat < 1:
        raise ConfigError("command line", "--repeat", f"{args.repeat} runs", ">= 1")
    scenarios = [locate(s, "scenario") for s in (args.scenarios or REFERENCE_SCENARIOS)]
    jobs = []
    for scenario in scenarios:
        for fidelity in list(args.fidelity or DEFAULT_TOKENS):
            counts = tokens_asked or DEFAULT_TOKENS[fidelity]
            jobs += [(scenario, fidelity, t) for t in ([None, *counts] if fidelity == "fast" and not args.tokens
                                                        else counts)]
    targets = {(locate(name, "scenario"), fidelity, tokens): (figure, least)
               for name, fidelity, tokens, figure, least in TARGETS}
    if not (args.scenarios or args.fidelity or args.tokens):  # the default benchmark measures every target
        jobs += [job for job in targets if job not in jobs]
    _check_work(jobs, args)
    print("simulated tokens per wall-second, speculative run only, each run from cold per-shape caches (a fresh seed);")
    print("'shipped' runs the scenario's own workload, the other rows one request of that many tokens. best and")
    print("median over the runs; 'x SimPy': the median over runs of the run's tokens per wall-second divided by the")
    print("timeouts per wall-second of a bare SimPy loop (one timeout per step) timed right after it in this process;")
    print("'x real CPU' and 'tok/CPU s': simulated seconds and tokens per CPU second of the run (median), what a")
    print("shared machine's load moves least")
    print(f"{'scenario':<30} {'fidelity':<8} {'workload':>9} {'tokens':>7} {'runs':>4} {'best tok/s':>11} "
          f"{'median tok/s':>12} {'x real time':>11} {'SimPy steps/s':>13} {'x SimPy':>8} {'x real CPU':>10} "
          f"{'tok/CPU s':>11}")
    lines = []
    bar = progress(jobs, desc="bench", unit="figure")
    for i, (scenario, fidelity, tokens) in enumerate(bar, start=1):
        name = os.path.splitext(os.path.basename(scenario))[0]
        note(bar, f"bench: {name} {fidelity} {tokens or 'shipped'}")
        repeats = args.repeat or DEFAULT_REPEATS[fidelity]
        row = measure(scenario, fidelity, tokens, 1000 + 100 * i, repeats, args.max_work)
        label = "shipped" if tokens is None else "1 request"
        print(f"{name:<30} {fidelity:<8} {label:>9} {row.tokens:>7} {repeats:>4} "
              f"{row.best_tok_s:>11,.0f} {row.median_tok_s:>12,.0f} {row.faster_than_real_time:>11,.0f} "
              f"{row.floor_median:>13,.0f} {row.floor_ratio:>8.3f} {row.x_real_cpu:>10,.1f} "
              f"{row.tok_per_cpu_s:>11,.0f}", flush=True)
        if repeats > 1:
            print(f"{'':<30} x SimPy{cold_warm(row, 'floor_ratio')}; tok/CPU s{cold_warm(row, 'tok_per_cpu_s')}")
        if (scenario, fidelity, tokens) in targets:
            lines.append(target_line(row, *targets[scenario, fidelity, tokens], shipped=tokens is None))
    for line in lines:
        print(line)
    return 0


def _startup(pairs: int) -> int:
    from ..config.errors import ConfigError
    from ..experiments.startup import median_ratio, startup_pairs

    if pairs < 1:
        raise ConfigError("command line", "--startup", f"{pairs} pairs", ">= 1")
    measured = startup_pairs(pairs)
    print("CPU seconds (user + system) of `python -m simulator scenarios/pcie8_ngram.yaml` and of "
          "`python -c \"import numpy\"`, in turns")
    for k, (main, numpy) in enumerate(measured, start=1):
        print(f"pair {k}: main {main:.3f} s  numpy {numpy:.3f} s  ratio {main / numpy:.2f}")
    print(f"median ratio {median_ratio(measured):.2f} (issue 27's line: at most 2.5)")
    return 0


def _check_work(jobs: list, args) -> None:
    """Refuse, before the first run, a benchmark with a figure whose runs together are estimated above the work
    limit (a figure's repeats x its run: the default benchmark's largest, event fidelity's, is ~8e6)."""
    from ..config.errors import ConfigError
    from ..experiments.bench import DEFAULT_REPEATS, estimate
    from ..results.limits import MAX_WORK, _duration, _round_up, check_limit, estimated_seconds

    limit = check_limit(args.max_work, "--max-work", MAX_WORK)
    for scenario, fidelity, tokens in jobs:
        repeats = args.repeat or DEFAULT_REPEATS[fidelity]
        work = estimate([(scenario, fidelity, tokens, repeats)])
        if work > limit:
            name = os.path.splitext(os.path.basename(scenario))[0]
            raise ConfigError("command line", "--repeat" if args.repeat else "--tokens",
                              f"too much work: {repeats:,} runs of {name} at {fidelity} fidelity "
                              f"({tokens or 'shipped'} tokens) = {work:.3g} weighted steps, roughly "
                              f"{_duration(estimated_seconds(work))}; the limit is {limit:.3g} a figure",
                              f"fewer --repeat or --tokens, or raise the limit with --max-work {_round_up(work)}")


def _tokens(text: str) -> list[int]:
    from ..config.errors import ConfigError

    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        counts = []
    if not counts or any(not 1 <= c <= 1_000_000 for c in counts):
        raise ConfigError("command line", "--tokens", f"not a list of token counts: {text!r}",
                          "comma-separated integers 1..1000000, e.g. 2048,8192")
    return counts
