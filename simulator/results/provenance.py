"""What was run: every result names the simulator version, the files and names it read, every override, the seed,
the fidelity and the kernel-cost source; and a one-line description generated from the resolved configuration
(so it cannot disagree with what ran, whatever the scenario file's own `description:` says).
"""
from __future__ import annotations

import json
import os
from typing import Any

from ..config.catalog import display_path
from ..config.loader import Scenario
from ..config.version import __version__
from .sections import Provenance

DRAFTERS = {"eagle3": "EAGLE-3 head", "mtp": "MTP head", "ngram": "n-gram drafter", "draft_model": "draft model",
            "suffix": "suffix decoding", "medusa": "Medusa heads", "hydra": "Hydra heads",
            "lookahead": "lookahead decoding", "eagle2": "EAGLE-2 dynamic tree", "sparse_self": "sparse-KV self-draft"}


def _file(path: str | None) -> str | None:
    if not path or path.startswith("<"):
        return path
    return display_path(path) if os.path.isfile(path) else path


def override_text(path: str, value: Any) -> str:
    """'a.b=value' with the value as the user would write it in YAML/JSON."""
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    return f"{path}={shown}"


def kernel_source(scenario: Scenario) -> str:
    """Which source costs the kernels: `measured` where the scenario asks for it (runtime.kernels) and the database
    serves its GPU, else `roofline` (the result's `kernels` section says which source served each kernel family)."""
    from ..kernels.source import roofline_reason

    choice = str(getattr(scenario.spec.runtime, "kernels", None) or "roofline")
    return "roofline" if roofline_reason(choice, scenario.topology.gpu) else "measured"


def provenance(scenario: Scenario) -> Provenance:
    """The record every output carries (JSON, CSV, trace, figure metadata, sweep rows)."""
    files = dict(scenario.files)
    return Provenance(
        specsim_version=__version__,
        scenario=scenario.spec.name,
        scenario_file=_file(scenario.source),
        topology=scenario.topology.name,
        topology_file=_file(files.get("topology")),
        model=scenario.model.name,
        model_file=_file(files.get("model")),
        overrides=tuple(override_text(p, v) for p, v in scenario.overrides),
        seed=scenario.spec.seed,
        fidelity=scenario.spec.fidelity,
        kernel_source=kernel_source(scenario),
        engine=scenario.engine.label() if scenario.engine is not None else None,
        engine_profile=_file(scenario.engine.profile_file) if scenario.engine is not None else None,
        description=describe(scenario))


def _tokens(length) -> str:
    from ..config.typical import mean_length

    mean = mean_length(length)
    text = f"{mean / 1000:.0f}K" if mean >= 1000 and mean % 1000 < 50 else f"{mean:,.0f}"
    return text if isinstance(length, int) or getattr(length, "kind", "fixed") == "fixed" else f"~{text} ({length.kind})"


def _machine(scenario: Scenario) -> str:
    topo = scenario.topology
    fabric = "NVLink" if any(link.kind == "nvlink" for link in topo.fabric.links) else "PCIe"
    split = _split(scenario.spec.parallelism, scenario.spec.deployment.router)
    pool = scenario.spec.deployment.prefill_instances
    if pool:
        split += f", prefill on {pool} and decode on {scenario.spec.parallelism.dp - pool} of them"
    return f"{topo.num_gpus}x {topo.gpu.name} {fabric}, {split}"


def _split(par, router: str = "round_robin") -> str:
    """TP8; TP8 x PP2; TP8, DP-attention in 8 groups + EP8; 2 x TP4 (round-robin router)."""
    text = f"TP{par.tp}" + (f" x PP{par.pp}" if par.pp > 1 else "")
    if par.dp_attention:
        text += f", DP-attention in {par.dp} groups"
    elif par.dp > 1:
        text = f"{par.dp} x {text} ({router.replace('_', '-')} router)"
    return text + (f" + EP{par.ep}" if par.ep > 1 else "")


def _speculation(scenario: Scenario) -> list[str]:
    spec, runtime = scenario.spec.speculation, scenario.spec.runtime
    if spec.method == "none":
        return [f"plain decode ({'CUDA graph' if runtime.cuda_graph_decode else 'eager'}), no speculation"]
    drafter = DRAFTERS[spec.method]
    if spec.method == "draft_model" and scenario.draft_model is not None:
        drafter = f"draft model {scenario.draft_model.name}"
    tree = {"topk": f"top-{spec.tree.k} tree", "k_ary": f"{spec.tree.k}-ary tree", "optimal": "optimal tree"}
    shape = f"chain of {spec.draft_tokens}" if spec.verify == "chain" else \
        f"{tree.get(spec.tree.kind, 'tree')} of {spec.draft_tokens} drafts"
    if spec.method == "lookahead":
        la = spec.lookahead
        shape = f"W{la.window} N{la.ngram} G{la.guesses} ({spec.draft_tokens} drafts + {la.window * (la.ngram - 1)} window)"
    elif spec.method == "eagle2":
        d = spec.dynamic_tree
        shape = f"topk {d.eagle_topk}, {d.num_steps} steps, {d.num_draft_tokens} verified"
    parts = [drafter, shape, "CUDA-graph verify" if runtime.cuda_graph_verify else "eager verify"]
    if scenario.spec.policy.kind != "static":
        parts.append(f"{scenario.spec.policy.kind} policy")
    return parts


def _workload(scenario: Scenario) -> str:
    work = scenario.spec.workload
    arrival = work.arrival.kind
    if arrival == "trace":
        text = "requests replayed from a trace"
    else:
        text = f"{work.requests} request{'s' if work.requests != 1 else ''} of {_tokens(work.prompt_tokens)} " \
               f"prompt + {_tokens(work.output_tokens)} output tokens"
        if arrival in ("poisson", "fixed_rate"):
            text += f", {arrival.replace('_', ' ')} arrivals at {work.arrival.rate_per_s:g}/s"
    if work.max_concurrency is not None:
        text += f", a client sending at most {work.max_concurrency} at once"
    if work.concurrency > 1:
        text += f", up to {work.concurrency} at once" + (" per instance" if scenario.spec.parallelism.instances > 1 else "")
    if work.kv_overflow == "preempt":
        text += ", preemption when the KV cache fills"
    return text


def describe(scenario: Scenario) -> str:
    """'Kimi-K2.5, 8x RTX PRO 6000 Blackwell PCIe, TP8, n-gram drafter, parents tree of 8 drafts, eager verify, ...'"""
    return ", ".join([scenario.model.name, _machine(scenario), *_speculation(scenario), _workload(scenario)])
