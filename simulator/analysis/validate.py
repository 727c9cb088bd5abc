"""The validation set: published measurements (scenarios/validation/*.yaml) against what the simulator predicts.

Each file is one source (title, table or figure, hardware, engine and version, date) and its cases: the measured
figure and what represents it, a scenario run (a Result metric) or a collective on a topology. Nothing here is
fitted: the calibration set lives apart (scenarios/measured/, read by `calibrate`, which refuses these files).
"""
from __future__ import annotations

import datetime
import glob
import os
from typing import Any, Literal, Optional, Union

from pydantic import Field, PositiveFloat, PositiveInt

from ..compiled import dataclass
from ..config.base import Strict, validate
from ..config.errors import ConfigError
from ..config.yaml_files import read_yaml



def default_dir() -> str:
    """The shipped validation set: inside the installed package, else the checkout's scenarios/validation."""
    from ..config.catalog import data_dir

    return os.path.join(data_dir("scenario"), "validation")


def locate(path: str) -> str:
    """A validation file or folder: a path as given, else a bare name of a shipped file (nccl_tests_272_h200)."""
    if os.path.exists(path):
        return path
    shipped = os.path.join(default_dir(), path if path.endswith((".yaml", ".json")) else path + ".yaml")
    if os.path.sep not in path and "/" not in path and os.path.isfile(shipped):
        return shipped
    known = ", ".join(os.path.splitext(os.path.basename(f))[0] for f in files(default_dir()))
    raise ConfigError("command line", path, "no such validation file or folder", f"a path, or one of {known}")


class Source(Strict):
    id: str = Field(description="Short name; files sharing an id count as one source")
    title: str
    where: str = Field(description="Table, figure or section the figures are read from")
    url: str
    hardware: str
    engine: str = Field(description="Serving engine or library, and its version")
    date: Union[str, datetime.date] = Field(description="Publication date (YYYY-MM or YYYY-MM-DD)")
    organisation: str = Field(description="Who measured: sources are independent when their organisations differ")


class Case(Strict):
    name: str
    measured: float = Field(description="The published figure")
    unit: str
    kind: Literal["scenario", "collective"] = "scenario"
    metric: str = Field(description="scenario: a dotted Result path (e.g. baseline_tok_s) or decode_speedup; collective: "
                        "time_us or busbw_GBps")
    scenario: Optional[str] = Field(None, description="Scenario file, relative to this file")
    set: dict[str, Any] = Field(default_factory=dict, description="Overrides for this case's run")
    topology: Optional[str] = Field(None, description="collective: topology file, relative to this file")
    bytes: Optional[PositiveInt] = Field(None, description="collective: message size (the whole buffer, as nccl-tests)")
    ranks: Optional[PositiveInt] = None
    algorithm: str = "nccl"
    accept_len: Optional[float] = Field(None, ge=1.0, description="The source's mean accept length (bonus token "
                                        "included): replayed as the acceptance, so the case tests the step costs")
    note: str = Field("", description="How the case maps to the source; why it may miss")


class ValidationFile(Strict):
    source: Source
    cases: list[Case] = Field(min_length=1)


@dataclass(frozen=True)
class Outcome:
    source: Source
    case: Case
    simulated: float
    file: str

    @property
    def error(self) -> float:
        """Signed relative error of the simulation against the measurement."""
        return self.simulated / self.case.measured - 1.0


def is_validation_file(path: str) -> bool:
    """A file of the validation set: under a `validation` folder or shaped like one (source + cases)."""
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    if "validation" in parts[:-1]:
        return True
    data = read_yaml(path) if os.path.isfile(path) else None
    return isinstance(data, dict) and "source" in data and "cases" in data


def load(path: str) -> ValidationFile:
    return validate(ValidationFile, read_yaml(path), path)


def files(directory: str) -> list[str]:
    found = sorted(glob.glob(os.path.join(directory, "*.yaml")))
    if not found:
        raise ConfigError(directory, "<folder>", "no validation files (*.yaml) here")
    return found


def _collective(case: Case, base: str, path: str) -> float:
    from ..config.topology import Topology
    from ..hardware.collectives import AllReduce, allreduce_bus_factor
    from ..hardware.interconnect import Fabric

    if case.topology is None or case.bytes is None:
        raise ConfigError(path, f"cases[{case.name}]", "a collective case needs topology and bytes")
    topo_path = os.path.join(base, case.topology)
    data = read_yaml(topo_path)
    for dotted, value in case.set.items():
        node = data
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    topology = validate(Topology, data, topo_path)
    ranks = case.ranks or topology.num_gpus
    # every collective case is an nccl-tests measurement: eager launches (nccl-tests' default, no -G)
    cost = AllReduce(Fabric(topology), ranks, case.algorithm, topology.gpu.kernel_floor_us,
                     launch="eager").cost(case.bytes)
    if case.metric == "time_us":
        return cost.time_us
    if case.metric == "busbw_GBps":
        return case.bytes / (1000.0 * cost.time_us) * allreduce_bus_factor(ranks)
    raise ConfigError(path, f"cases[{case.name}].metric", f"unknown collective metric {case.metric!r}",
                      "time_us, busbw_GBps")


def accept_trace(accept_len: float, rows: int = 100) -> list[int]:
    """Whole accept lengths whose mean is accept_len (to 1/rows), spread evenly so every window has the same mean."""
    low = int(accept_len)
    highs = round((accept_len - low) * rows)
    return [low + (((i + 1) * highs) // rows - (i * highs) // rows) for i in range(rows)]


def _trace_file(accept_len: float) -> str:
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"specsim_validation_accept_{accept_len:.4f}.csv")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("accept_len\n" + "\n".join(str(v) for v in accept_trace(accept_len)) + "\n")
    return path


def decode_speedup(result: dict) -> float:
    """The decode phase's speedup, prefills left out (what a source timing only the generation loop reports): tokens
    a speculative step emits per request over its mean time, against the baseline's plain decode steps."""
    steps = result["step_ms"]
    return result["mean_accept_len"] * steps["baseline_decode"]["mean"] / steps["step"]["mean"]


def _scenario(case: Case, base: str, path: str) -> float:
    from ..api.run import resolve, run
    from .calibrate import metric

    if case.scenario is None:
        raise ConfigError(path, f"cases[{case.name}]", "a scenario case needs scenario")
    overrides = dict(case.set)
    if case.accept_len is not None:
        overrides["speculation.acceptance"] = {"kind": "trace", "file": _trace_file(case.accept_len)}
    scenario = resolve(os.path.join(base, case.scenario), {k.replace(".", "__"): v for k, v in overrides.items()})
    result = run(scenario).to_dict()
    if case.metric == "decode_speedup":
        return decode_speedup(result)
    return metric(result, case.metric, path)


def evaluate(path: str) -> list[Outcome]:
    """Every case of one validation file, simulated."""
    vfile = load(path)
    base = os.path.dirname(os.path.abspath(path))
    out = []
    for case in vfile.cases:
        value = _collective(case, base, path) if case.kind == "collective" else _scenario(case, base, path)
        out.append(Outcome(vfile.source, case, value, path))
    return out


GROUPS = ("plain decode", "speculative", "collectives")


def group(outcome: Outcome) -> str:
    """Which part of the model a case tests: a collective, a plain-decode rate (a `baseline_*` figure: the machine
    with speculation off), or a speculative figure (anything else a scenario gives: speedups, speculative rates)."""
    if outcome.case.kind == "collective":
        return "collectives"
    return "plain decode" if outcome.case.metric.startswith("baseline") else "speculative"


def _errors(outcomes: list[Outcome]) -> dict:
    errors = [abs(o.error) for o in outcomes]
    return {"figures": len(outcomes), "mean_abs_error": sum(errors) / len(errors) if errors else 0.0,
            "max_abs_error": max(errors) if errors else 0.0}


def summary(outcomes: list[Outcome]) -> dict:
    """Figures, sources, organisations, mean and maximum absolute error, overall and per group (GROUPS)."""
    groups = {name: _errors([o for o in outcomes if group(o) == name]) for name in GROUPS}
    return {**_errors(outcomes), "sources": len({o.source.id for o in outcomes}),
            "organisations": len({o.source.organisation for o in outcomes}),
            "groups": {name: g for name, g in groups.items() if g["figures"]}}
