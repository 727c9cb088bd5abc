"""One TP group on one machine: turns a pass shape into a PassPlan (cost model x roofline x collectives).

A plan's cost grows with the cached context (KV bytes and attention FLOPs), piecewise: plans are built at anchor
contexts on a doubling grid and interpolated linearly between them (timing.anchors: the grid and the one blending
rule, at_context, used by every caller); a pass shape is costed once per anchor.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from functools import partial

import numpy as np

from ..cache import current, key_of
from ..config import Scenario
from ..config.errors import ConfigError
from ..hardware.collectives import NotPermitted
from ..hardware.gpu import GPU, Host
from ..hardware.interconnect import Fabric
from ..hardware.multinode import make_allreduce
from ..kernels.timer import KernelTimer
from ..model.cost import PassShape
from ..model.layout import pass_layout
from ..model.draft_cards import draft_head_card, mtp_card
from ..model.heads import head_cards
from ..model.split_layout import Split
from .placement import (DRAFT_PART, held_draft_parts, replicates_shared_experts, require_simulated,
                        split_memory_budget)
from .split_costs import SplitCollectives
from . import sampling
from .sampling import FAST_SAMPLES, SAMPLE_FIELDS  # noqa: F401  (re-exported)
from .kernellines import kernel_lines
from .anchors import at_context, context_anchors, context_anchors_many  # noqa: F401  (re-exported)
from .passplan import PassPlan, blend  # noqa: F401  (blend re-exported)
from .piecewise import attention_split_us, host_times, piecewise_ready_us


def memory_budget(scenario: Scenario, cards: dict, tp: int) -> dict:
    """Weights per GPU (target and draft parts) against the usable device memory; what is left holds the KV cache
    (under a wider split: placement.split_memory_budget). Of the draft parts in `cards` it holds only those of the
    drafters the scenario runs (placement.held_draft_parts): the others are planned, never loaded (analysis.breakeven
    costs a drafter the scenario does not run)."""
    from ..model.cards import kv_bytes_per_token_layer, weight_bytes_per_gpu
    from ..model.draft_cards import eh_proj_bytes

    held = held_draft_parts(scenario)
    cards = {name: card for name, card in cards.items() if name not in DRAFT_PART.values() or name in held}
    par = scenario.spec.parallelism
    if (par.ep, par.pp, par.dp_attention) != (1, 1, False):  # more than a TP group per instance (dp replicas are)
        return split_memory_budget(scenario, cards)

    gpu = scenario.topology.gpu
    usable = gpu.memory_GB * 1e9 * scenario.spec.runtime.memory_fraction
    # an MTP module uses the target's embedding and lm_head (model.draft_cards.mtp_card): held once, with the target
    # and its eh_proj beside its decoder layer (model.draft_cards.eh_proj_bytes)
    eh_proj = scenario.spec.runtime.mtp_eh_proj
    vocab_parallel = scenario.spec.runtime.vocab_parallel
    whole = scenario.spec.runtime.replicated_embedding
    weights = sum(weight_bytes_per_gpu(card, tp, own_vocab=name != "mtp", vocab_parallel=vocab_parallel,
                                       whole_embedding=card.architecture in whole)
                  + eh_proj_bytes(card, tp, eh_proj if name == "mtp" else None) for name, card in cards.items())
    if weights > usable:
        raise ConfigError(scenario.source, "parallelism.tp",
                          f"{scenario.model.name} does not fit: {weights / 1e9:.1f} GB of weights per GPU at tp={tp}, "
                          f"more than {scenario.spec.runtime.memory_fraction:.0%} of one {gpu.name}'s {gpu.memory_GB:g} GB",
                          "a larger tp, GPUs with more memory, or a higher runtime.memory_fraction")
    kv_per_token = sum(kv_bytes_per_token_layer(card, tp) * card.num_layers for card in cards.values())
    return {"usable_GB": usable / 1e9, "weights_GB": weights / 1e9, "kv_GB": (usable - weights) / 1e9,
            "kv_bytes_per_token": kv_per_token, "kv_capacity_tokens": int((usable - weights) // kv_per_token)}


def _collective_steps(collectives: SplitCollectives, layout, shape: PassShape) -> tuple:
    """A plan's collectives as steps over links, per segment (PassPlan.collective_steps: link fidelity only)."""
    steps = [collectives.time(s, shape)[1] for s in layout.segments]
    return tuple(steps[i] for i in layout.order)


# what a Machine takes from its scenario alone (shared by a deployment's instances: Machine(like=))
SCENARIO_PARTS = ("split", "scenario", "tp", "runtime", "card", "gpu", "host", "kernels", "_physical", "cards",
                  "memory", "model_key")


class Machine:
    """The hardware and model of a scenario, and the plans of its passes."""

    def __init__(self, scenario: Scenario, gpus: list[str] | None = None, like: "Machine | None" = None):
        """gpus: the GPU of each of the instance's ranks (timing.placement); default the topology's first tp.
        like: another instance's Machine of the same scenario: what depends on the scenario alone (its checks, the
        cards, the memory budget, the kernel timer, the key's JSON) is taken from it, not computed again."""
        if like is not None and like.scenario is scenario:
            for name in SCENARIO_PARTS:
                setattr(self, name, getattr(like, name))
        else:
            self._scenario_parts(scenario)
        loaded = scenario.gpu_as_loaded
        # which GPUs: a one-GPU instance's passes cross no link, so its costs are every one-GPU replica's (plans and
        # samples shared by the replicas of a deployment); an instance of more GPUs is costed over its own routes
        placed = json.dumps(list(gpus) if gpus else None)
        physical = [*self._physical, "one GPU" if gpus is not None and len(gpus) == 1 else placed,
                    loaded.model_dump_json() if loaded is not None else ""]
        self.key = hashlib.sha1("\0".join(physical).encode()).hexdigest()
        # Machine._hardware's objects (they hold no run state), by every value they depend on (the file: its errors)
        hardware = current().get(("machine.hardware", self.key, placed, scenario.source),
                                 lambda: self._hardware(scenario, gpus))
        self.fabric, self.allreduce, self.allgather, self.collectives = hardware

    def _scenario_parts(self, scenario: Scenario) -> None:
        """SCENARIO_PARTS: what a Machine takes from its scenario alone."""
        spec = scenario.spec
        require_simulated(scenario)
        self.split = Split.of(spec.parallelism, replicates_shared_experts(scenario))
        if not spec.runtime.vocab_parallel and not self.split.is_plain:
            raise ConfigError(scenario.source, "runtime.vocab_parallel", "whole vocabulary layers on every rank are "
                              "laid out for plain tensor parallelism only", "vocab_parallel: true, or ep / pp 1 "
                              "without dp_attention")
        self.scenario = scenario
        self.tp = spec.parallelism.tp
        self.runtime = spec.runtime
        self.card = scenario.model
        self.gpu = GPU(scenario.topology.gpu)
        self.host = Host(scenario.host)
        loaded = scenario.gpu_as_loaded  # a what-if GPU: measured kernel times scaled by the roofline (KernelTimer)
        self.kernels = KernelTimer(self.gpu, spec.runtime.kernels, GPU(loaded) if loaded is not None else None,
                                   spec.runtime.weight_only_gemv, spec.runtime.kernel_database,
                                   spec.runtime.unmeasured_kernels, spec.runtime.moe_backend)
        # every value the machine's figures depend on, as JSON (pydantic's serialiser: fields in their declared order)
        heads = head_cards(self.card, spec.speculation)  # Medusa / Hydra heads (model.heads)
        cards = [self.card.model_dump_json(), scenario.draft_model.model_dump_json() if scenario.draft_model else "",
                 *(c.model_dump_json() for c in heads.values())]
        self._physical = [scenario.topology.model_dump_json(), *cards, str(self.tp),
                          spec.parallelism.model_dump_json(), self.runtime.model_dump_json(),
                          # the engine release: its custom all-reduce kernel's measured times (custom_allreduce_fit)
                          f"{scenario.engine.name} {scenario.engine.version}" if scenario.engine is not None else ""]
        counts = self.runtime.eager_kernels  # the engine's own eager model code, where its profile counts it
        self.cards = {"target": engine_kernels(self.card, counts, "decoder")}
        if self.card.draft_head is not None:
            self.cards["draft_head"] = engine_kernels(draft_head_card(self.card), counts, "draft_head")
        if self.card.mtp_layers:
            self.cards["mtp"] = mtp_card(self.card)
        if scenario.draft_model is not None:
            self.cards["draft_model"] = engine_kernels(scenario.draft_model, counts, "decoder")
        self.cards.update(heads)
        self.memory = memory_budget(scenario, self.cards, self.tp)
        # what a pass's layout depends on: the model cards and the split, not the hardware (sweep points that
        # change only the machine share layouts)
        own = self.runtime.eager_kernels  # the engine's own kernel counts replace the cards' (engine_kernels)
        self.model_key = hashlib.sha1("\0".join(cards + [own.model_dump_json() if own else ""]).encode()).hexdigest()

    @property
    def value_key(self) -> str:
        """What the machine's figures are computed from, as a digest (cache.key_of keys stored results by it)."""
        return self.key

    def _hardware(self, scenario: Scenario, gpus: list[str] | None) -> tuple:
        """(fabric, all-reduce, all-gather, the split's collectives): NCCL's graphs over the routes, built once per
        process for a physical key (a sweep point or another seed on the same machine reuses them)."""
        spec = scenario.spec
        try:
            fabric = Fabric(scenario.topology, gpus)
            nvlink = self.tp > 1 and fabric.all_pairs_nvlink(self.tp)
            # the engine's rule (its profile's custom_allreduce); its measured kernel only where the rule can run it
            rule, custom = spec.runtime.custom_allreduce, None
            if rule is not None and rule.runs(self.tp, 0, nvlink):
                from ..kernels.custom_allreduce_fit import simulation_model  # here: its measured tables only then

                custom = simulation_model(scenario, self.tp, nvlink)
            allreduce = make_allreduce(fabric, self.tp, spec.runtime.allreduce, self.gpu.floor_us, custom, rule)
            allgather = make_allreduce(fabric, self.tp, "nccl", self.gpu.floor_us)
            return fabric, allreduce, allgather, SplitCollectives(fabric, spec.parallelism, spec.runtime, self.card,
                                                                  allreduce, allgather, self.gpu.floor_us,
                                                                  scenario.source)
        except NotPermitted as exc:
            raise ConfigError(scenario.source, "runtime.allreduce", str(exc), "auto, nccl, nccl_ring, nccl_tree") from None
        except ValueError as exc:
            raise ConfigError(scenario.source, "topology.fabric", str(exc)) from None

    # -- plans -------------------------------------------------------------------------------------------------
    def anchor_plan(self, part: str, shape: PassShape, graph: bool) -> PassPlan:
        """The plan at exactly shape.context (used at anchor contexts); in the run's store by every value it depends
        on (another seed, a baseline, a planner's variant that changes no hardware share it)."""
        return current().get(("machine.anchor_plan", self.key, part, key_of(shape), graph),
                             lambda: self._build(part, shape, graph))

    def plan(self, part: str, shape: PassShape, graph: bool) -> PassPlan:
        """The plan of a pass of `part` (target, draft_head, mtp) over `shape`, interpolated in context."""
        return self.plan_at(part, shape.at(0), graph, shape.context)

    def plan_at(self, part: str, shape: PassShape, graph: bool, context: int) -> PassPlan:
        """plan() of `shape` (given at context 0, as a step's PassSpec holds it) at `context`, without building a
        shape per call (layer fidelity asks once per pass)."""
        low, high, weight = context_anchors(context)
        a = self._anchor_of(part, shape, graph, low)
        if weight == 0.0:
            return a
        label = a.label.replace(f"ctx{low}", f"ctx{context}")
        return a.blended(self._anchor_of(part, shape, graph, high), weight, label)

    def _anchor_of(self, part: str, shape: PassShape, graph: bool, anchor: int) -> PassPlan:
        """anchor_plan of `shape` (at context 0) at an anchor context, found by the shape at 0 (no shape built)."""
        return current().get(("machine.anchor_of", self.key, part, key_of(shape), graph, anchor),
                             lambda: self.anchor_plan(part, shape.at(anchor), graph))

    def _build(self, part: str, shape: PassShape, graph: bool) -> PassPlan:
        split = self.split if part == "target" else replace(self.split, pp=1)  # drafts run on the last stage
        layout = self.layout(part, shape, split)
        node_us = self.scenario.topology.host.graph_node_us if graph else 0.0
        rows, kernels, splits = [], [], []
        for s in layout.segments:
            t = self.kernels.segment(s, graph)
            kernels.append((t.kernel_us, t.small_us, t.num_kernels - len(t.kernel_us)))
            splits.append(attention_split_us(s, t))
            coll, _, is_allreduce = self.collectives.time(s, shape, steps=False)
            launches = t.num_kernels + (1 if s.collective else 0)
            gaps = (launches - t.gapless_kernels) * node_us  # a measured op's time includes its node gaps
            rows.append((launches, t.compute_us, t.memory_us, gaps, t.last_kernel_us, coll, is_allreduce))
        distinct, lines = np.array(rows, dtype=float), kernel_lines(kernels)
        table = distinct[list(layout.order)]
        positions, suffixes = (a[list(layout.order)] for a in lines)
        # the plan's sampled values, exactly and compactly (the anchors of a shape often share them: sampling)
        ready = None
        if graph and self.runtime.piecewise_host is not None:  # vLLM V1: a piece per layer, eager attention between
            gpu = table[:, 1] + table[:, 2] + table[:, 3]
            works = [(w, splits[i]) for w, i in zip(gpu.tolist(), layout.order)]
            layers = sum(1 for _, split in works if split is not None)  # an attention call a layer on this rank
            ready = piecewise_ready_us(works, *host_times(self.runtime.piecewise_host, self.host.spec.eager_launch_us,
                                                         layers))
        sampled_key = (graph, layout.order, distinct.shape, distinct.tobytes(), lines[0].shape,
                       *(a.tobytes() for a in lines), None if ready is None else ready.tobytes())
        return PassPlan(
            launches=table[:, 0], compute_us=table[:, 1], memory_us=table[:, 2], gap_us=table[:, 3],
            last_us=table[:, 4], collective_us=table[:, 5], allreduce_mask=table[:, 6].astype(bool),
            graph=graph, ranks=self.tp, steps_of=partial(_collective_steps, self.collectives, layout, shape),
            line_positions=positions, line_suffix_us=suffixes, sampled_key=sampled_key, graph_ready_us=ready,
            label=f"{part} {shape.tokens}x{shape.batch}{f'+{shape.padding}' if shape.padding else ''} "
                  f"ctx{shape.context}{' tree' if shape.tree else ''}"
                  f" {'graph' if graph else 'eager'}",
        )

    def layout(self, part: str, shape: PassShape, split=None):
        """pass_layout of a part's card, stored by value (the layout is only read; sweep points that change only the
        machine share it)."""
        fused = self.runtime.fuse_allreduce_rmsnorm
        eh_proj = self.runtime.mtp_eh_proj if part == "mtp" else None  # an MTP module's input projection
        vocab, separate = self.runtime.vocab_parallel, tuple(self.runtime.separate_gate_up)  # the engine's model code
        whole = self.cards[part].architecture in self.runtime.replicated_embedding
        top1 = part == "mtp" and self.runtime.mtp_draft_gather == "top1"  # the MTP head's draft sampler
        return current().get(("machine.layout", self.model_key, part, self.tp, key_of(shape), fused, key_of(split),
                              eh_proj, vocab, separate, whole, top1),
                             lambda: pass_layout(self.cards[part], self.tp, shape, fused, split, eh_proj,
                                                 vocab_parallel=vocab, separate_gate_up=separate,
                                                 whole_embedding=whole, top1_gather=top1))

    # -- fast fidelity ----------------------------------------------------------------------------------------
    def samples(self, part: str, shape: PassShape, graph: bool, seed: int) -> np.ndarray:
        """FAST_SAMPLES passes of this shape at an anchor context: array (samples, SAMPLE_FIELDS), memoised
        (timing.sampling)."""
        return sampling.samples(self, part, shape, graph, seed)

    def sample_durations(self, part: str, shape: PassShape, graph: bool, seed: int) -> np.ndarray:
        """The duration column of samples(), the same floats, without the breakdown (timing.sampling)."""
        return sampling.sample_durations(self, part, shape, graph, seed)

    def sample_rows(self, part: str, shape: PassShape, graph: bool, seed: int, rows: list[int]) -> np.ndarray:
        """samples()[rows], the same floats, evaluating those passes alone (timing.sampling)."""
        return sampling.sample_rows(self, part, shape, graph, seed, rows)


def engine_kernels(card, counts, role: str):
    """`card` with the kernel counts of the engine's own eager model code for `role` (runtime.eager_kernels:
    decoder, or draft_head falling back to decoder), where the engine profile has them; else the card as it is."""
    if counts is None:
        return card
    own = (counts.draft_head if role == "draft_head" else None) or counts.decoder
    if own is None:  # the engine counts only its draft head (its target runs in graphs of its own compiler)
        return card
    kernels = card.kernels.model_copy(update={**own.model_dump(), "attention_fused": 0})
    return card.model_copy(update={"kernels": kernels})
