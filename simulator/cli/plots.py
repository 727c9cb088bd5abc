"""`python -m simulator plots [--out plots/] [--quick]`: regenerate the figures README shows (the recipes are in
simulator/viz/recipes.py; this module only reads the arguments). Progress goes to stderr.
"""
from __future__ import annotations

import os
import sys
import time

from . import ArgumentParser

from ..viz.recipes import ROOT, Figures


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m simulator plots", description="Regenerate the figures in plots/.")
    p.add_argument("--out", default=os.path.join(ROOT, "plots"), help="folder for the figures (default plots/)")
    p.add_argument("--quick", action="store_true", help="short requests and thin sweeps (for tests)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from ..results.files import check_outputs

    check_outputs(args, files=(), folders=("out",))  # made if missing, refused if a file or not writable
    figures = Figures(args.out, args.quick)
    started = time.perf_counter()
    items = figures.all()
    for i, (name, make) in enumerate(items, 1):
        t = time.perf_counter()
        path = make()
        print(f"[{i}/{len(items)}] {name}: {path} ({time.perf_counter() - t:.1f} s)", file=sys.stderr)
    print(f"{len(items)} figures in {args.out} ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0
