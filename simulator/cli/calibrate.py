"""`python -m simulator calibrate SCENARIO.yaml --measured MEASURED.yaml --fit path1,path2`: fit parameters."""
from __future__ import annotations

import sys

from . import ArgumentParser


def main(argv: list[str]) -> int:
    p = ArgumentParser(prog="python -m simulator calibrate", description="Fit named parameters to measurements.")
    p.add_argument("scenario")
    p.add_argument("--measured", required=True, help="YAML file of measured figures")
    p.add_argument("--fit", required=True, help="comma-separated dotted parameter paths to fit")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value")
    args = p.parse_args(argv)
    from ..analysis.calibrate import calibrate

    names = [n.strip() for n in args.fit.split(",") if n.strip()]

    def progress(i, x, chi2):
        print(f"\r  evaluation {i:3d}  chi2 {chi2:10.4f}", end="", file=sys.stderr, flush=True)

    fit = calibrate(args.scenario, args.measured, names, args.overrides, progress=progress)
    print(file=sys.stderr)
    print(f"fit {'converged' if fit.success else 'did not converge'} ({fit.message}); chi2 = {2 * fit.cost:.3f}")
    print(f"  {'parameter':<45} {'start':>10} {'fitted':>10} {'+-':>8}")
    for name, s, v, e in zip(fit.names, fit.start, fit.values, fit.sigmas):
        print(f"  {name:<45} {s:10.4g} {v:10.4g} {e:8.2g}")
    print(f"  {'measurement':<60} {'measured':>9} {'model':>9} {'resid/sigma':>11}")
    for m, pred in zip(fit.measurements, fit.predicted):
        print(f"  {m.name[:60]:<60} {m.value:9.3g} {pred:9.3g} {(pred - m.value) / m.sigma:+11.2f}")
    return 0
