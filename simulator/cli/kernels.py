"""The shape-aware roofline against NVIDIA's measured kernel database, per GPU and kernel family.

Per GPU and kernel family: the median and 90th percentile of |roofline / measured - 1| over a deterministic sample
of the measured database's rows, for the roofline with datasheet efficiencies and with the topology's fitted ones.
--fit refits the efficiencies per GPU family (GPUs of one architecture share them) and prints them as the YAML to
paste under the topology's `gpu:`.
"""
from __future__ import annotations

import glob
import json
import os

EXAMPLES = """
  specsim kernels                                  every shipped topology with a kernel database
  specsim kernels nvlink8_h200 --fit               refit the efficiencies, printed as YAML
"""


def _load(path: str):
    from ..config.errors import ConfigError
    from ..config.yaml_files import read_yaml
    from ..config.topology import Topology

    try:
        return Topology.model_validate(read_yaml(path))
    except ValueError as exc:
        raise ConfigError(path, "gpu", str(exc).splitlines()[0]) from None


def error_table(specs: dict, params: dict, samples: int) -> list[dict]:
    """Rows (gpu, family, samples, datasheet median / p90, fitted median / p90) for measured systems -> specs."""
    import numpy as np

    from ..kernels import fit
    from ..kernels.roofline import FAMILIES

    rows = []
    for system, spec in specs.items():
        for family in FAMILIES:
            pairs = fit.samples(system, family, samples)
            if not pairs:
                continue
            datasheet = fit.errors(spec.model_copy(update={"roofline": None}), {}, pairs)
            fitted = fit.errors(spec, params.get(system), pairs)
            rows.append({"gpu": system, "family": family, "samples": len(pairs),
                         "datasheet_median": float(np.median(datasheet)), "datasheet_p90": float(np.quantile(datasheet, 0.9)),
                         "fitted_median": float(np.median(fitted)), "fitted_p90": float(np.quantile(fitted, 0.9))})
    return rows


def configure(p) -> None:
    p.add_argument("topologies", nargs="*", help="topology YAML files or names (default: the shipped ones with a "
                   "kernel_database)")
    p.add_argument("--fit", action="store_true", help="refit the efficiencies per GPU family and print them as YAML")
    p.add_argument("--samples", type=int, default=1500, help="database rows sampled per GPU and family (default 1500)")
    p.add_argument("--format", choices=("table", "json"), default="table")


def main(args) -> int:
    from ..config.catalog import data_dir, locate
    from ..config.errors import ConfigError
    from ..kernels import fit, measured

    if measured.data_root() is None:
        raise ConfigError("command line", "kernels", "aiconfigurator-core is not installed",
                          "pip install 'specsim[measured]'")
    paths = [locate(t, "topology") for t in args.topologies] or \
        sorted(glob.glob(os.path.join(data_dir("topology"), "*.yaml")))
    specs = {}
    for path in paths:
        gpu = _load(path).gpu
        if gpu.kernel_database in measured.covered_systems():
            specs.setdefault(gpu.kernel_database, gpu)
        elif args.topologies:
            raise ConfigError(path, "gpu.kernel_database", f"{gpu.kernel_database!r} has no measured data",
                              ", ".join(measured.covered_systems()))
    params, fitted_yaml = {}, {}
    if args.fit:
        families: dict[str, dict] = {}
        for system, spec in specs.items():
            families.setdefault(fit.GPU_FAMILIES.get(system, system), {})[system] = spec
        for family, members in families.items():
            fitted, _ = fit.fit_gpu_family(members, args.samples)
            fitted_yaml[family] = fitted
            for system in members:
                params[system] = fitted
    rows = error_table(specs, params, args.samples)
    if args.format == "json":
        print(json.dumps({"fitted": fitted_yaml, "errors": rows}, indent=2))
        return 0
    for family, fitted in fitted_yaml.items():
        print(f"# fitted for GPU family {family} ({', '.join(s for s in specs if fit.GPU_FAMILIES.get(s, s) == family)}):"
              f" paste under the topology's gpu:")
        print("  roofline:")
        for key, (memory, compute, overhead, wave) in fitted.items():
            print(f"    {key + ':':<22} {{memory_efficiency: {memory}, compute_efficiency: {compute}, "
                  f"overhead_us: {overhead}, wave_us: {wave}}}")
    print("| GPU | kernel family | samples | datasheet roofline: median / p90 | shape-aware, fitted: median / p90 |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['gpu']} | {r['family']} | {r['samples']} | {r['datasheet_median']:.0%} / {r['datasheet_p90']:.0%} "
              f"| {r['fitted_median']:.0%} / {r['fitted_p90']:.0%} |")
    return 0
