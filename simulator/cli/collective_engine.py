"""The engine's custom all-reduce that `collective` shows beside the model's figure: its release's rule (the
profile's custom_allreduce, should_custom_ar's), the kernel as measured where the database has a table, and the
physical model fitted to the tables (kernels/custom_allreduce_fit.py)."""
from __future__ import annotations


def parse_engine(text: str | None) -> tuple[str, str]:
    """(name, version) of --engine NAME:VERSION (default: the default engine profile's)."""
    from ..config.engine import DEFAULT_ENGINE
    from ..config.errors import ConfigError

    if text is None:
        return DEFAULT_ENGINE["name"], DEFAULT_ENGINE["version"]
    name, _, version = text.partition(":")
    if name not in ("sglang", "vllm", "trtllm") or not version:
        raise ConfigError("command line", "--engine", f"cannot read {text!r}", "sglang:0.5.9, vllm:0.8.5, trtllm:1.0.0")
    return name, version


def measured(topology, ranks: int, engine: tuple[str, str], nbytes: int) -> dict | None:
    """The engine's custom all-reduce on this GPU (graph and eager): as measured where the database has a table,
    the physical model fitted to the tables (kernels/custom_allreduce_fit.py), and whether the engine's profile runs
    it on this fabric; None without the database."""
    from ..hardware.interconnect import Fabric
    from ..kernels.custom_allreduce import measured as measured_row
    from ..kernels.custom_allreduce_fit import fitted

    nvlink = ranks > 1 and Fabric(topology).all_pairs_nvlink(ranks)
    model = fitted(topology.gpu.kernel_database, engine[0], engine[1], ranks, nvlink)
    if model is None:
        return None
    g = model.graph
    how = f"{g.algorithm(nbytes).replace('_', '-')}: " + ("the measured rows" if g.measured_rows(nbytes) else "the fit")
    out = {"engine": engine[0], "asked_version": engine[1], "model_graph_us": g.time_us(nbytes),
           "model_eager_us": model.eager.time_us(nbytes), "model_basis": model.basis,
           "model_version": model.version, "model_algorithm": g.algorithm(nbytes), "model_how": how,
           **_engine_runs_it(engine, ranks, nbytes, nvlink)}
    picked = out.get("engine_algorithm")
    if picked is not None and picked != g.algorithm(nbytes) and g.covers(nbytes, picked):
        # the engine's own switch picks what the table's kernel did not run at this size: what the simulation times
        out.update(engine_graph_us=g.time_us(nbytes, picked), engine_eager_us=model.eager.time_us(nbytes, picked),
                   engine_how=g.how(nbytes, picked).strip())
    row = measured_row(topology.gpu.kernel_database, engine[0], engine[1], ranks, nbytes)
    if row is not None:
        out.update(version=row.version, kernel=row.kernel, graph_us=row.graph_us, eager_us=row.eager_us,
                   source=row.label())
    return out


def engine_rule(engine: tuple[str, str]) -> tuple:
    """(the engine release's custom all-reduce rule, its profile's custom_allreduce, or None; why None: NCCL only,
    or no profile for that release)."""
    from ..config.engine_profile import load_profile
    from ..config.errors import ConfigError

    try:
        item = load_profile(*engine)[0].custom_allreduce
    except ConfigError:
        return None, f"no {engine[0]} {engine[1]} profile"
    return item.value, f"NCCL only ({item.source})"


def _engine_runs_it(engine: tuple[str, str], ranks: int, nbytes: int, nvlink: bool) -> dict:
    """Whether the engine release's profile (custom_allreduce: should_custom_ar's rule) runs its kernel here, and
    which of its algorithms."""
    rule, why = engine_rule(engine)
    if rule is None:
        return {"engine_runs_it": None if why.startswith("no ") else False, "rule": why}
    if rule.runs(ranks, nbytes, nvlink):
        picked = rule.algorithm(ranks, nbytes)
        return {"engine_runs_it": True, "engine_algorithm": picked,
                "rule": f"runs it here, {picked.replace('_', '-')} (up to {rule.max_bytes:,} B)"}
    if ranks not in rule.gpu_counts:
        why = f"not at {ranks} GPUs (only {', '.join(map(str, rule.gpu_counts))}): NCCL"
    elif not nvlink and ranks > rule.pcie_max_gpus:
        why = f"not on more than {rule.pcie_max_gpus} GPUs without NVLink between all: NCCL"
    else:
        why = f"not above {rule.max_bytes:,} B: NCCL"
    return {"engine_runs_it": False, "rule": why}


def measured_line(row: dict | None, engine: tuple[str, str]) -> str:
    """The one-size report's lines on the engine's custom all-reduce (`measured`'s row, None: no database)."""
    if row is None:
        return (f"  {engine[0]} {engine[1]}'s custom all-reduce: no measured table (aiconfigurator-core, extra "
                "specsim[measured])")
    lines = [f"  {engine[0]} {engine[1]}'s custom all-reduce: the profile: {row['rule']}"]
    model = f"CUDA graph {row['model_graph_us']:.2f} us, eager {row['model_eager_us']:.2f} us"
    if "engine_graph_us" in row:
        lines.append(f"    as this release runs it ({row['engine_how']}): CUDA graph {row['engine_graph_us']:.2f} us, "
                     f"eager {row['engine_eager_us']:.2f} us")
    if "graph_us" in row:
        asked = "" if row["version"] == engine[1] else f", the measured version nearest {engine[1]}"
        lines.append(f"    measured ({row['engine']} {row['version']}'s {row['kernel']}{asked}): CUDA graph "
                     f"{row['graph_us']:.2f} us, eager {row['eager_us']:.2f} us")
        graph_miss, eager_miss = (row[f"model_{m}_us"] / row[f"{m}_us"] - 1 for m in ("graph", "eager"))
        lines.append(f"    model fitted to that table: {model} ({graph_miss:+.1%} / {eager_miss:+.1%}; {row['model_how']})")
        lines.append(f"  figures from: {row['source']}")
    else:
        lines.append(f"    no table for this GPU: the model fitted to {row['model_basis']}: {model} ({row['model_how']})")
    return "\n".join(lines)
