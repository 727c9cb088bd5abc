"""Fit named physical parameters to measured figures with scipy.optimize.least_squares.

A measured file lists figures (a Result metric, its value and uncertainty) and the scenario each comes from; the
fit varies dotted config paths, reruns the simulator (common random numbers: same seed every evaluation) and
minimises the uncertainty-weighted residuals. Uncertainty of the fitted values comes from the Jacobian.
"""
from __future__ import annotations

import logging
import os
import warnings
from typing import Any, Callable

import numpy as np
from pydantic import Field, PositiveFloat

from ..compiled import dataclass
from ..api.run import resolve, run
from ..config.base import Strict, validate
from ..config.yaml_files import read_yaml
from ..config.errors import ConfigError
from ..config.paths import PathNotFound, get_path

log = logging.getLogger("specsim")
# a residual (sigmas) at the start beyond which its square overflows inside the least-squares solver (float64 holds
# ~1.8e308; its sums of squares and Jacobian products need a wide margin below that)
_MAX_RESIDUAL = 1e75


class Measurement(Strict):
    name: str = Field(description="What was measured, in words")
    metric: str = Field(description="Dotted path into the result, e.g. step_ms.verify.mean")
    value: float = Field(description="The measured value (the metric's unit)")
    sigma: PositiveFloat = Field(description="Uncertainty of the measured value (same unit)")
    scenario: str | None = Field(None, description="Scenario file (relative to this file); default: the file's scenario")
    set: dict[str, Any] = Field(default_factory=dict, description="Overrides for this measurement's run")


class MeasuredFile(Strict):
    scenario: str = Field(description="The scenario the measurements come from (relative to this file)")
    description: str = Field("", description="Free text for the reader")
    set: dict[str, Any] = Field(default_factory=dict, description="Overrides for every run (e.g. a shorter workload)")
    measurements: list[Measurement] = Field(min_length=1, description="The measured figures")


@dataclass
class Fit:
    names: list[str]
    values: np.ndarray
    sigmas: np.ndarray
    start: np.ndarray
    measurements: list[Measurement]
    predicted: np.ndarray
    cost: float
    success: bool
    message: str


def metric(result_dict: dict, path: str, file: str = "<measured>") -> float:
    try:
        node = get_path(result_dict, path, lists=False)
    except PathNotFound:
        raise ConfigError(file, f"metric {path}", "no such result metric",
                          ", ".join(sorted(k for k in result_dict if not k.startswith("_")))) from None
    if node is None:
        raise ConfigError(file, f"metric {path}", "the run produced no value for this metric")
    if isinstance(node, dict):
        keys = sorted(k for k, v in node.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise ConfigError(file, f"metric {path}", "a group of figures, not one number",
                          ", ".join(f"{path}.{k}" for k in keys) or "a path to one number")
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise ConfigError(file, f"metric {path}", f"not a number ({type(node).__name__})", "a path to one number")
    return float(node)


def load_measured(path: str, scenario_path: str | None = None) -> tuple[MeasuredFile, str]:
    """A file of the calibration set, or a benchmark client's result file (analysis.bench_files: its workload and
    its mean TTFT, TPOT and ITL, for the scenario being calibrated). A validation file is refused: nothing may be
    fitted to a validation figure."""
    from .bench_files import looks_like_bench, read_bench
    from .validate import is_validation_file

    if looks_like_bench(path):
        bench = read_bench(path)
        measurements = bench.measurements()
        if not measurements:
            raise ConfigError(path, "std_*_ms", "no figure with a spread to weigh it by (one request, no ITLs)",
                              "a run of several requests, or one with ITLs")
        data = {"scenario": os.path.abspath(scenario_path or path), "set": bench.overrides,
                "description": f"{bench.client} benchmark client result", "measurements": measurements}
        return validate(MeasuredFile, data, path), os.path.dirname(os.path.abspath(path))
    if is_validation_file(path):
        raise ConfigError(path, "--measured", "a validation file (published figures kept out of calibration)",
                          "a calibration file, e.g. scenarios/measured/reference.yaml")
    data = read_yaml(path)
    return validate(MeasuredFile, data, path), os.path.dirname(os.path.abspath(path))


def _get(scenario, path: str) -> float:
    data = {**scenario.spec.model_dump(mode="json"), "topology": scenario.topology.model_dump(mode="json"),
            "model": scenario.model.model_dump(mode="json")}
    try:
        node = get_path(data, path)
    except PathNotFound:
        raise ConfigError(scenario.source, path, "no such parameter to fit") from None
    if not isinstance(node, (int, float)) or isinstance(node, bool):
        raise ConfigError(scenario.source, path, f"cannot fit a non-numeric parameter ({node!r})")
    return float(node)


def calibrate(scenario_path: str, measured_path: str, fit: list[str], set_args: list[str] | None = None,
              progress: Callable[[int, np.ndarray, float], None] | None = None) -> Fit:
    from scipy.optimize import least_squares

    if not fit:
        raise ConfigError("command line", "--fit", "no parameter named",
                          "comma-separated dotted paths, e.g. topology.host.eager_launch_us")
    measured, base_dir = load_measured(measured_path, scenario_path)
    if len(fit) > len(measured.measurements):
        raise ConfigError(measured_path, "--fit", f"{len(fit)} unknowns but only {len(measured.measurements)} "
                          "measurements: the fit is underdetermined", f"at most {len(measured.measurements)} parameters")
    base = resolve(scenario_path, set_args=set_args)
    start = np.array([_get(base, name) for name in fit])
    scale = np.where(start != 0, np.abs(start), 1.0)
    sigmas = np.array([m.sigma for m in measured.measurements])
    values = np.array([m.value for m in measured.measurements])
    cache: dict[tuple, np.ndarray] = {}
    calls = [0]

    def predict(x: np.ndarray) -> np.ndarray:
        key = tuple(np.round(x, 12))
        if key in cache:
            return cache[key]
        params = {name: float(v) for name, v in zip(fit, x)}
        out = []
        for m in measured.measurements:
            path = os.path.join(base_dir, m.scenario) if m.scenario else scenario_path
            overrides = {**measured.set, **m.set, **params}
            scenario = resolve(path, set_args=set_args) if m.scenario else base
            result = run(scenario, **{k.replace(".", "__"): v for k, v in overrides.items()})
            out.append(metric(result.to_dict(), m.metric, measured_path))
        cache[key] = np.array(out)
        calls[0] += 1
        if progress:
            with np.errstate(over="ignore", invalid="ignore"):
                progress(calls[0], x, float(np.sum(((cache[key] - values) / sigmas) ** 2)))
        return cache[key]

    def residuals(z: np.ndarray) -> np.ndarray:
        return (predict(z * scale) - values) / sigmas

    z0 = start / scale
    with np.errstate(over="ignore", invalid="ignore"):
        first = residuals(z0)
    if not np.all(np.abs(first) < _MAX_RESIDUAL):  # nan too
        i = int(np.argmax(np.where(np.isfinite(first), np.abs(first), np.inf)))
        m = measured.measurements[i]
        raise ConfigError(measured_path, f"measurements[{i}].sigma", f"{m.name!r}: the model's {predict(start)[i]:.4g} "
                          f"is {abs(first[i]):.3g} sigmas from the measured {m.value:g}: a fit cannot start there",
                          "an uncertainty the measurement has (a sigma of its size, not 1e-300)")
    with warnings.catch_warnings(record=True) as said:  # scipy's and numpy's warnings: a debug line each, not noise
        warnings.simplefilter("always")
        solution = least_squares(residuals, z0, diff_step=0.02, x_scale=1.0, bounds=(np.zeros_like(z0), np.inf),
                                 max_nfev=60)
    for warning in said:
        log.debug("calibrate: %s: %s", warning.category.__name__, warning.message)
    J = solution.jac
    JtJ = J.T @ J
    if np.linalg.matrix_rank(JtJ, tol=1e-9 * max(1.0, np.abs(JtJ).max())) < len(fit):
        dead = [fit[i] for i in range(len(fit)) if np.allclose(J[:, i], 0.0)]
        names = ", ".join(dead) or "a combination of " + ", ".join(fit)
        raise ConfigError(measured_path, "--fit", f"unidentifiable: the measurements do not constrain {names}",
                          "parameters that move at least one measured figure")
    dof = max(1, len(values) - len(fit))
    resid_var = max(1.0, float(solution.fun @ solution.fun) / dof) if len(values) > len(fit) else 1.0
    cov = np.linalg.inv(JtJ) * resid_var
    x = solution.x * scale
    with np.errstate(invalid="ignore"):  # a nearly singular fit can give a negative variance: reported as nan
        sigmas = np.sqrt(np.diag(cov)) * scale
    return Fit(list(fit), x, sigmas, start, list(measured.measurements), predict(x),
               float(solution.cost), bool(solution.success), str(solution.message))
