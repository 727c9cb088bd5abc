"""`python -m simulator bench`: simulated tokens per wall-second for the reference scenarios at each fidelity."""
from __future__ import annotations

import os
import sys

from . import ArgumentParser


def main(argv: list[str]) -> int:
    from ..experiments.bench import DEFAULT_REPEATS, DEFAULT_TOKENS, REFERENCE_SCENARIOS, measure

    p = ArgumentParser(prog="python -m simulator bench", description="Benchmark the simulator's speed.")
    p.add_argument("scenarios", nargs="*", help="scenario files (default: the reference scenarios that exist)")
    p.add_argument("--fidelity", action="append", choices=tuple(DEFAULT_TOKENS), help="repeatable; default: all")
    p.add_argument("--tokens", help="comma-separated generated-token counts (default per fidelity)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help=f"runs per figure (default {', '.join(f'{k} {v}' for k, v in DEFAULT_REPEATS.items())})")
    args = p.parse_args(argv)
    tokens_asked = _tokens(args.tokens) if args.tokens else None  # a mistake stops here, before any run
    if args.repeat is not None and args.repeat < 1:
        from ..config.errors import ConfigError

        raise ConfigError("command line", "--repeat", f"{args.repeat} runs", ">= 1")
    scenarios = args.scenarios or [s for s in REFERENCE_SCENARIOS if os.path.exists(s)]
    fidelities = list(args.fidelity or DEFAULT_TOKENS)
    print("simulated tokens per wall-second, speculative run only, each run from cold per-shape caches (a fresh seed);")
    print("'shipped' runs the scenario's own workload, the other rows one request of that many tokens. best and")
    print("median over the runs; 'x SimPy': the median over runs of the run's tokens per wall-second divided by the")
    print("timeouts per wall-second of a bare SimPy loop (one timeout per step) timed right after it in this process")
    print(f"{'scenario':<30} {'fidelity':<8} {'workload':>9} {'tokens':>7} {'runs':>4} {'best tok/s':>11} "
          f"{'median tok/s':>12} {'x real time':>11} {'SimPy steps/s':>13} {'x SimPy':>8}")
    seed = 1000
    for scenario in scenarios:
        for fidelity in fidelities:
            counts = tokens_asked or DEFAULT_TOKENS[fidelity]
            if fidelity == "fast" and not args.tokens:
                counts = [None, *counts]
            repeats = args.repeat or DEFAULT_REPEATS[fidelity]
            for tokens in counts:
                seed += 100
                print(f"  running {os.path.basename(scenario)} {fidelity} {tokens}...", end="\r", file=sys.stderr,
                      flush=True)
                row = measure(scenario, fidelity, tokens, seed, repeats)
                label = "shipped" if tokens is None else "1 request"
                print(f"{os.path.basename(scenario):<30} {fidelity:<8} {label:>9} {row.tokens:>7} {repeats:>4} "
                      f"{row.best_tok_s:>11,.0f} {row.median_tok_s:>12,.0f} {row.faster_than_real_time:>11,.0f} "
                      f"{row.floor_median:>13,.0f} {row.floor_ratio:>8.3f}", flush=True)
    return 0


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
