"""Fit named parameters of a scenario (or its topology / model card) to measured figures, with uncertainties and
residuals (scipy's least squares).
"""
from __future__ import annotations

EXAMPLES = """
  specsim calibrate pcie8_eagle3 --measured scenarios/measured/reference.yaml \\
      --fit topology.host.eager_launch_us,topology.fabric.shm_hop_latency_us
  specsim calibrate pcie8_eagle3 --measured bench.json --fit topology.host.eager_launch_us     a vLLM / SGLang result
"""


def configure(p) -> None:
    p.add_argument("scenario", help="scenario YAML file or name")
    p.add_argument("--measured", required=True, help="YAML file of measured figures, or a benchmark client's result "
                   "file: vllm bench serve --save-result JSON or sglang.bench_serving JSONL (docs/metrics.md)")
    p.add_argument("--fit", required=True, help="comma-separated dotted parameter paths to fit")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value")


def main(args) -> int:
    from ..analysis.calibrate import calibrate
    from . import progress

    names = [n.strip() for n in args.fit.split(",") if n.strip()]
    with progress(desc="calibrate", unit="evaluation") as bar:
        def on_evaluation(i, x, chi2):
            bar.update(1)
            bar.set_postfix(chi2=f"{chi2:.4f}")

        fit = calibrate(args.scenario, args.measured, names, args.overrides, progress=on_evaluation)
    print(f"fit {'converged' if fit.success else 'did not converge'} ({fit.message}); chi2 = {2 * fit.cost:.3f}")
    print(f"  {'parameter':<45} {'start':>10} {'fitted':>10} {'+-':>8}")
    for name, s, v, e in zip(fit.names, fit.start, fit.values, fit.sigmas):
        print(f"  {name:<45} {s:10.4g} {v:10.4g} {e:8.2g}")
    print(f"  {'measurement':<60} {'measured':>9} {'model':>9} {'resid/sigma':>11}")
    for m, pred in zip(fit.measurements, fit.predicted):
        print(f"  {m.name[:60]:<60} {m.value:9.3g} {pred:9.3g} {(pred - m.value) / m.sigma:+11.2f}")
    return 0
