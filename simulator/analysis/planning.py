"""What single change would help: `LEVERS` lists the one-at-a-time changes `plan_levers` simulates (adding a lever
is one entry there), ranked by throughput. Break-even tables live in simulator.breakeven.
"""
from __future__ import annotations

import math
import os
from dataclasses import field
from typing import Any, Callable

from ..compiled import dataclass
from .breakeven import CHAIN_DRAFTS
from ..config import Scenario
from ..config.errors import ConfigError
from ..config.paths import get_path
from ..results.sections import json_of
from .accept_scaling import _SCALED, accept_scale_for, scaled_acceptance  # noqa: F401  (accept_scale_for re-exported)
from ..speculation.setup import build_speculation
from .split_levers import lever_split

# -- levers ----------------------------------------------------------------------------------------------------
Overrides = dict[str, Any]


@dataclass(frozen=True)
class Lever:
    """One change to try. `candidates(scenario, path)` gives override sets (the best is kept; an entry may be an
    (overrides, note) pair), or a str: why the lever does not apply. `hardware`: it changes plain decode too (its
    baseline must be rerun)."""

    name: str
    description: str
    candidates: Callable[[Scenario, str], list[Overrides] | str]
    hardware: bool = True


def _speculating(scenario: Scenario) -> bool:
    return scenario.spec.speculation.method != "none"


def _nvlink_topology(scenario: Scenario, path: str) -> str | None:
    """The shipped NVLink board (topology nvlink8_h200), found like any topology name: the package's data first,
    then the user's folders (so an installed specsim finds it from any folder, whatever `path` is)."""
    from ..config.catalog import names

    return names("topology", os.path.dirname(os.path.abspath(path))).get("nvlink8_h200")


def _has_nvlink(scenario: Scenario) -> bool:
    return any(link.kind == "nvlink" for link in scenario.topology.fabric.links)


def lever_nvlink_board(scenario: Scenario, path: str):
    if _has_nvlink(scenario):
        return "the machine already has NVLink"
    topology = _nvlink_topology(scenario, path)
    return [{"topology": topology}] if topology else "topologies/nvlink8_h200.yaml not found"


def lever_nvlink_fabric(scenario: Scenario, path: str):
    if _has_nvlink(scenario):
        return "the machine already has NVLink"
    topology = _nvlink_topology(scenario, path)
    if topology is None:
        return "topologies/nvlink8_h200.yaml not found"
    from ..config.yaml_files import read_yaml
    return [{"topology.fabric": read_yaml(topology)["fabric"]}]


def lever_graph_verify(scenario: Scenario, path: str):
    if not _speculating(scenario):
        return "speculation is off"
    return "already on" if scenario.spec.runtime.cuda_graph_verify else [{"runtime.cuda_graph_verify": True}]


def lever_fused_allreduce(scenario: Scenario, path: str):
    return "already on" if scenario.spec.runtime.fuse_allreduce_rmsnorm else [{"runtime.fuse_allreduce_rmsnorm": True}]


def lever_one_shot(scenario: Scenario, path: str):
    if scenario.spec.runtime.allreduce == "one_shot" and scenario.topology.fabric.p2p_level == "system":
        return "already on"
    return [{"runtime.allreduce": "one_shot", "topology.fabric.p2p_level": "system"}]


def lever_p2p(scenario: Scenario, path: str):
    return "already on" if scenario.topology.fabric.p2p_level == "system" else [{"topology.fabric.p2p_level": "system"}]


def lever_memory_bandwidth(scenario: Scenario, path: str):
    return [{"topology.gpu.memory_bandwidth_GBps": 2 * scenario.topology.gpu.memory_bandwidth_GBps}]


def lever_accept(scenario: Scenario, path: str):
    if not _speculating(scenario):
        return "speculation is off"
    found = accept_scale_for(scenario, 0.5)
    if isinstance(found, str):
        return found
    scale, _, _ = found
    data = scaled_acceptance(scenario.spec.speculation.acceptance, scale)
    out = {}
    for dotted in _SCALED[data["kind"]]:
        node = get_path(data, dotted)
        out[f"speculation.acceptance.{dotted}"] = [round(p, 4) for p in node] if isinstance(node, list) else round(node, 4)
    _, before, after = found
    note = f"expected accept length {before:.2f} -> {after:.2f}, probabilities x{scale:.3f}"
    if data["kind"] == "ngram_context":
        note += " (on the long-run mixture of the regimes; the simulated history gains less)"
    return [(out, note)]


def lever_chain_tree(scenario: Scenario, path: str):
    s = scenario.spec.speculation
    if not _speculating(scenario):
        return "speculation is off"
    tree = build_speculation(scenario).slots[0].tree
    if s.verify == "chain":
        return [{"speculation.verify": "tree", "speculation.tree.kind": "optimal", "speculation.draft_tokens": n}
                for n in sorted({s.draft_tokens, 2 * s.draft_tokens, 8})]
    return [{"speculation.verify": "chain", "speculation.draft_tokens": k} for k in sorted({tree.depth, s.draft_tokens})]


def lever_draft_length(scenario: Scenario, path: str):
    s = scenario.spec.speculation
    if not _speculating(scenario):
        return "speculation is off"
    if s.verify == "chain" or s.tree.kind == "optimal":
        return [{"speculation.draft_tokens": k} for k in CHAIN_DRAFTS]
    if s.tree.kind == "topk":
        return [{"speculation.tree.depth": d, "speculation.draft_tokens": s.tree.k * d} for d in CHAIN_DRAFTS]
    return f"a {s.tree.kind} tree has a fixed size"


LEVERS: list[Lever] = [
    Lever("NVLink board (8x H200)", "topology nvlink8_h200: NVLink + NVSwitch, but also H200 GPUs (2.7x the "
          "memory bandwidth, ~2x the compute): not the fabric alone", lever_nvlink_board),
    Lever("NVLink fabric, same GPUs", "this machine's GPUs and host joined by the H200 board's NVLink/NVSwitch "
          "fabric: the interconnect alone", lever_nvlink_fabric),
    Lever("CUDA-graph verify", "capture the verify pass in a CUDA graph", lever_graph_verify, hardware=False),
    Lever("fused all-reduce + RMSNorm", "runtime.fuse_allreduce_rmsnorm: one kernel fewer per all-reduce",
          lever_fused_allreduce),
    Lever("one-shot all-reduce + P2P", "custom one-shot all-reduce, with the P2P it needs "
          "(topology.fabric.p2p_level=system)", lever_one_shot),
    Lever("P2P on", "peer-to-peer across root ports (NCCL_P2P_LEVEL=SYS) instead of host memory", lever_p2p),
    Lever("2x memory bandwidth", "twice the GPU memory bandwidth", lever_memory_bandwidth),
    Lever("+0.5 accept length", "a better drafter: per-depth acceptance scaled until the expected accept length "
          "rises by 0.5", lever_accept, hardware=False),
    Lever("chain <-> tree", "verify a token tree instead of a chain, or the reverse (best of a few sizes)",
          lever_chain_tree, hardware=False),
    Lever("best draft length", "1..8 drafts (a top-k tree: depth 1..8); the best kept", lever_draft_length,
          hardware=False),
    Lever("another split", "the same GPUs split another way: replicas of smaller TP groups; expert parallelism and "
          "DP-attention for a model with experts (the best kept)", lever_split),
]


@dataclass
class Outcome:
    name: str
    description: str
    overrides: Overrides | None = None
    throughput_tok_s: float = math.nan
    baseline_tok_s: float = math.nan
    mean_accept_len: float = math.nan
    verify_ms: float | None = None
    note: str = ""
    tried: int = 0
    figures: dict = field(default_factory=dict)  # the result's figures a plan ranks by (results/planner.py)

    @property
    def speedup(self) -> float:
        return self.throughput_tok_s / self.baseline_tok_s

    @property
    def pays(self) -> bool:
        return self.speedup > 1.0

    def to_dict(self, today: "Outcome | None" = None) -> dict:
        out = {"lever": self.name, "description": self.description, "overrides": self.overrides,
               "throughput_tok_s": self.throughput_tok_s, "baseline_tok_s": self.baseline_tok_s,
               "speedup": self.speedup, "pays": self.pays, "mean_accept_len": self.mean_accept_len,
               "verify_ms": self.verify_ms, "note": self.note, "candidates_tried": self.tried,
               "planner": self.figures.get("planner")}
        if today is not None:
            out["vs_today"] = self.throughput_tok_s / today.throughput_tok_s
        return out


@dataclass
class Plan:
    scenario: str
    today: Outcome
    ranked: list[Outcome]
    skipped: list[Outcome] = field(default_factory=list)
    rank_by: str = "throughput"  # the results.planner.RANKINGS name the levers are ordered by

    @property
    def speculating(self) -> bool:
        return self.today.verify_ms is not None

    def conclusion(self) -> str:
        paying = [o for o in self.ranked if o.pays]
        if not self.speculating:
            best = self.ranked[0] if self.ranked else None
            return "Speculation is off in this scenario" + (
                f"; the fastest single change is {best.name} ({best.throughput_tok_s:.1f} tok/s)." if best else ".")
        if self.today.pays:
            head = f"Speculation already pays here ({self.today.speedup:.2f}x the plain-decode baseline)"
            best = self.ranked[0] if self.ranked else None
            return head + (f"; the best single change is {best.name} ({best.throughput_tok_s:.1f} tok/s)." if best else ".")
        if not paying:
            best = max(self.ranked, key=lambda o: o.speedup, default=None)
            return "No single change makes speculation pay here" + (
                f"; the closest is {best.name} ({best.speedup:.2f}x its baseline)." if best else ".")
        first, rest = paying[0], paying[1:]
        text = (f"The single change that makes speculation pay here: {first.name} ({first.throughput_tok_s:.1f} tok/s, "
                f"{first.speedup:.2f}x its plain-decode baseline of {first.baseline_tok_s:.1f})")
        if rest:
            text += "; it also pays with " + ", ".join(f"{o.name} ({o.speedup:.2f}x)" for o in rest)
        return text + "."


def _outcome(name: str, description: str, overrides, result, baseline_tok_s: float | None = None) -> Outcome:
    verify = result.step_ms.verify and result.step_ms.verify.mean
    outcome = Outcome(name, description, overrides, result.throughput_tok_s,
                      result.baseline_tok_s if baseline_tok_s is None else baseline_tok_s, result.mean_accept_len,
                      verify)
    outcome.figures = {"throughput_tok_s": outcome.throughput_tok_s, "speedup": outcome.speedup,
                       "load": {"goodput_tok_s": result.load.get("goodput_tok_s")}, "planner": json_of(result.planner)}
    return outcome


def plan_levers(path: str, set_args: list[str] | None = None, levers: list[Lever] | None = None,
                progress: Callable[[str], None] | None = None, rank_by: str = "throughput") -> Plan:
    """Simulate the scenario, then each lever on its own (every candidate of a lever; the best kept), ranked by
    `rank_by` (a name of results.planner.RANKINGS: throughput, throughput_per_gpu, goodput_per_gpu, cost, ...)."""
    from ..results.planner import lookup, sort_key
    from ..api.run import resolve, run

    better = sort_key(rank_by, lambda outcome, dotted: lookup(outcome.figures, dotted))

    set_args = list(set_args or [])
    say = progress or (lambda text: None)
    levers = LEVERS if levers is None else levers
    scenario = resolve(path, None, set_args)
    say(f"plan: today's configuration ({scenario.name})")
    today_result = run(scenario)
    today = _outcome("today", "the scenario as it is", None, today_result)
    ranked, skipped = [], []
    for i, lever in enumerate(levers, start=1):
        candidates = lever.candidates(scenario, path)
        if isinstance(candidates, str):
            skipped.append(Outcome(lever.name, lever.description, note=candidates))
            continue
        best, errors = None, []
        for j, overrides in enumerate(candidates, start=1):
            overrides, note = overrides if isinstance(overrides, tuple) else (overrides, "")
            say(f"plan: [{i}/{len(levers)}] {lever.name}" + (f" ({j}/{len(candidates)})" if len(candidates) > 1 else ""))
            try:
                variant = resolve(path, overrides, set_args)
                result = today_result if variant == scenario else run(variant, baseline=lever.hardware)
            except ConfigError as exc:
                errors.append(exc.problem)
                continue
            outcome = _outcome(lever.name, lever.description, overrides, result,
                               None if lever.hardware else today.baseline_tok_s)
            outcome.note = "today's setting is the best" if variant == scenario else note
            if best is None or better(outcome) < better(best):
                best = outcome
        if best is None:
            skipped.append(Outcome(lever.name, lever.description, note="; ".join(dict.fromkeys(errors))))
            continue
        best.tried = len(candidates)
        if errors:
            rejected = f"{len(errors)} of {len(candidates)} candidates rejected: {errors[0]}"
            best.note = f"{best.note}; {rejected}" if best.note else rejected
        ranked.append(best)
    ranked.sort(key=better)
    return Plan(scenario.name, today, ranked, skipped, rank_by)


def describe_overrides(overrides: Overrides | None, width: int = 80) -> str:
    """A short 'key=value' summary of an override set (long values abbreviated)."""
    if not overrides:
        return "-"
    parts = []
    for key, value in overrides.items():
        if isinstance(value, dict):
            flat = all(isinstance(v, (bool, int, float, str)) for v in value.values())
            text = " ".join(f"{k}:{str(v).lower() if isinstance(v, bool) else v}" for k, v in value.items())
            text = "{" + text + "}" if flat and len(text) <= 60 else "{...}"
        elif isinstance(value, str) and os.sep in value:
            text = os.path.basename(value)
        else:
            text = str(value).lower() if isinstance(value, bool) else str(value)
        parts.append(f"{key}={text}")
    joined = " ".join(parts)
    return joined if len(joined) <= width else joined[: width - 3] + "..."
