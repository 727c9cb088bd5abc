"""Regenerate the figures the README shows, into ./plots (or --out) under the current directory (the recipes are in
simulator/viz/recipes.py; this module only reads the arguments). Progress goes to stderr.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim plots                                    every figure into ./plots
  specsim plots --out figs --quick                 thin sweeps and short requests, for a quick look
  specsim plots --only deploy                      the deployment questions: figures and their rows (CSV)
"""


def configure(p) -> None:
    p.add_argument("--out", default="plots", help="folder for the figures (default: ./plots, made if missing)")
    p.add_argument("--quick", action="store_true", help="short requests and thin sweeps (for tests)")
    p.add_argument("--only", action="append", default=[], metavar="NAME", help="only the figures whose name "
                   "contains NAME (repeatable), e.g. --only deploy for the deployment questions")


def main(args) -> int:
    from ..results.files import check_outputs
    from ..viz.recipes import Figures
    from . import note, progress

    check_outputs(args, files=(), folders=("out",))  # made if missing, refused if a file or not writable
    from ..kernels.measured import data_root

    if data_root() is None:
        log.warning("plots: aiconfigurator-core is not installed, so the roofline times every kernel: figures of "
                    "scenarios with runtime.kernels: measured differ from the README's (pip install 'specsim[measured]')")
    figures = Figures(args.out, args.quick)
    started = time.perf_counter()
    items = [(name, make) for name, make in figures.all() if not args.only or any(o in name for o in args.only)]
    if not items:
        from ..config.errors import ConfigError

        raise ConfigError("command line", "--only", f"no figure matches {', '.join(args.only)}",
                          ", ".join(name for name, _ in figures.all()))
    bar = progress(items, desc="plots", unit="figure")
    for i, (name, make) in enumerate(bar, start=1):
        note(bar, f"[{i}/{len(items)}] {name}")
        t = time.perf_counter()
        path = make()
        log.debug("%s: %s (%.1f s)", name, path, time.perf_counter() - t)
    log.info("%d figures in %s (%.1f s)", len(items), args.out, time.perf_counter() - started)
    return 0
