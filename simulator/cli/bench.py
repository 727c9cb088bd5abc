"""`python -m simulator bench`: simulated tokens per wall-second for the reference scenarios at each fidelity."""
from __future__ import annotations

import os
import sys

from . import ArgumentParser


def main(argv: list[str]) -> int:
    from ..experiments.bench import DEFAULT_TOKENS, REFERENCE_SCENARIOS, measure

    p = ArgumentParser(prog="python -m simulator bench", description="Benchmark the simulator's speed.")
    p.add_argument("scenarios", nargs="*", help="scenario files (default: the reference scenarios that exist)")
    p.add_argument("--fidelity", action="append", choices=tuple(DEFAULT_TOKENS), help="repeatable; default: all")
    p.add_argument("--tokens", help="comma-separated generated-token counts (default per fidelity)")
    args = p.parse_args(argv)
    tokens_asked = _tokens(args.tokens) if args.tokens else None  # a mistake stops here, before any run
    scenarios = args.scenarios or [s for s in REFERENCE_SCENARIOS if os.path.exists(s)]
    from ..engine import FIDELITIES

    fidelities = [f for f in (args.fidelity or DEFAULT_TOKENS) if f in FIDELITIES]
    print("simulated tokens per wall-second, speculative run only, cold per-shape caches (a fresh seed per row);")
    print("'shipped' runs the scenario's own workload, the other rows one request of that many tokens")
    print(f"{'scenario':<34} {'fidelity':<8} {'workload':>9} {'tokens':>7} {'wall s':>8} {'sim tok/wall s':>15} "
          f"{'x real time':>12}")
    seed = 1000
    for scenario in scenarios:
        for fidelity in fidelities:
            counts = tokens_asked or DEFAULT_TOKENS[fidelity]
            if fidelity == "fast" and not args.tokens:
                counts = [None, *counts]
            for tokens in counts:
                seed += 1
                print(f"  running {os.path.basename(scenario)} {fidelity} {tokens}...", end="\r", file=sys.stderr,
                      flush=True)
                row = measure(scenario, fidelity, tokens, seed)
                label = "shipped" if tokens is None else "1 request"
                print(f"{os.path.basename(scenario):<34} {fidelity:<8} {label:>9} {row.tokens:>7} {row.wall_s:>8.3f} "
                      f"{row.tokens_per_wall_s:>15,.0f} {row.faster_than_real_time:>12,.0f}", flush=True)
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
