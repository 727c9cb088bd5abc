"""Break-even accept lengths: what a drafter must reach for chains and trees, eager and CUDA-graph verify.

`breakeven_table` costs each shape from the machine's memoised pass samples at the workload's mean context (no
decode loop runs; the figure for the scenario's own configuration agrees with a full run's breakeven_accept_len,
a test). Break-even = speculative step (verify + drafting + host work) / plain decode step; verify-only is
docs/reference.md's rule (verify pass / plain step).
"""
from __future__ import annotations

from dataclasses import replace

from ..compiled import dataclass
from ..config import Scenario
from ..config.typical import mean_length
from ..timing.stepspec import (StepSpec, around_drafts, expected_emitted, exposed_before_verify_us,
                               exposed_behind_drafts_us, speculative_host_us, speculative_passes, step_overhead_us)
from ..timing.machine import Machine, context_anchors
from ..model.cost import PassShape
from ..speculation.acceptance import positional_table
from ..speculation.models import typical_table
from ..speculation.drafters import build_drafter
from ..speculation.setup import build_speculation
from ..speculation.trees import Tree

CHAIN_DRAFTS = tuple(range(1, 9))
TREE_DRAFTS = (4, 8, 16, 32)
# Only when a scenario does not speculate: the acceptance that decides which tree of n nodes the table costs (0.7 for
# the rank-1 child at every depth, halved per sibling). A shaping assumption, not a measurement: the costs and
# break-evens reported depend on it only through the tree's shape, and no expected accept length is shown with it.
GENERIC_TABLE = dict(probs=[0.7], sibling_decay=0.5)


# -- break-even ------------------------------------------------------------------------------------------------
def _pass_us(machine: Machine, part: str, shape: PassShape, graph: bool, seed: int, contexts) -> float:
    """Mean pass time over `contexts`, each blended between anchor contexts exactly as the fast engine does (so the
    table's figures are the same quantities a run reports: means over the contexts its steps see)."""
    means: dict[int, float] = {}

    def at(c: int) -> float:
        if c not in means:
            sample = machine.samples(part, replace(shape, context=c), graph, seed)
            means[c] = float(sample[:, 0].mean())
        return means[c]

    total = 0.0
    for context in contexts:
        low, high, weight = context_anchors(context)
        total += at(low) if weight == 0.0 else at(low) + (at(high) - at(low)) * weight
    return total / len(contexts)


def step_contexts(workload, batch: int, points: int = 32) -> list[int]:
    """The contexts a step sees over a generation, evenly spread (the server costs a step at the batch's sum):
    the mean prompt plus 0.5/points ... (points - 0.5)/points of the mean output."""
    prompt, output = mean_length(workload.prompt_tokens), mean_length(workload.output_tokens)
    return [int(batch * (prompt + (k + 0.5) / points * output)) for k in range(points)]


@dataclass(frozen=True)
class StepCost:
    verify_ms: float
    draft_ms: float
    other_ms: float  # scheduler work and end-of-step synchronisation

    @property
    def step_ms(self) -> float:
        return self.verify_ms + self.draft_ms + self.other_ms


@dataclass(frozen=True)
class BreakevenRow:
    label: str
    tree: Tree
    expected_accept_len: float | None  # the scenario's acceptance model on this tree
    eager: StepCost
    graph: StepCost
    is_own: bool = False


@dataclass
class BreakevenTable:
    scenario: str
    method: str
    batch: int
    context: int
    decode_step_ms: float
    own_graph_verify: bool
    rows: list[BreakevenRow]
    note: str = ""

    @property
    def decode_tok_s(self) -> float:
        """Tokens per second while plain decode steps run (prefill excluded, unlike a run's baseline_tok_s)."""
        return self.batch * 1e3 / self.decode_step_ms

    def verify_only(self, cost: StepCost) -> float:
        return cost.verify_ms / self.decode_step_ms

    def with_drafting(self, cost: StepCost) -> float:
        return cost.step_ms / self.decode_step_ms

    @property
    def own(self) -> BreakevenRow | None:
        """The scenario's own drafter and tree (None when it does not speculate)."""
        return next((r for r in self.rows if r.is_own), None)

    def own_cost(self) -> StepCost | None:
        own = self.own
        return None if own is None else own.graph if self.own_graph_verify else own.eager


def breakeven_table(scenario: Scenario, chains=CHAIN_DRAFTS, trees=TREE_DRAFTS) -> BreakevenTable:
    spec = scenario.spec
    machine = Machine(scenario)
    host = scenario.host
    work = spec.workload
    batch = work.concurrency
    contexts = step_contexts(work, batch)
    context = int(sum(contexts) / len(contexts))  # the mean, for the report
    seed = spec.seed
    setup = build_speculation(scenario)
    note = ""
    if setup.slots:
        slot = setup.slots[0]
        method, drafter, acceptance, own_tree = slot.method, slot.drafter, slot.acceptance, slot.tree
    else:
        card = scenario.model
        method = "eagle3" if card.draft_head is not None else "mtp" if card.mtp_layers else "ngram"
        drafter, acceptance, own_tree = build_drafter(method, spec.speculation, spec.runtime), None, None
        note = f"speculation is off in this scenario: drafting costed as {method}, trees shaped for a generic drafter"
    config = spec.speculation.acceptance
    has_expectation = acceptance is not None and config is not None and config.kind != "ngram_context"

    def table(depth: int):
        return typical_table(acceptance, depth) if acceptance is not None else \
            positional_table(GENERIC_TABLE["probs"], GENERIC_TABLE["sibling_decay"], depth, True)

    def cost(tree: Tree, graph: bool) -> StepCost:
        main, drafts = speculative_passes(drafter, tree, batch, spec.runtime, graph)
        verify = _pass_us(machine, "target", main.shape, main.graph, seed, contexts)
        passes = [(_pass_us(machine, d.part, d.shape, d.graph, seed, contexts), d.graph) for d in drafts]
        graphed = sum(us for us, graphed in passes if graphed)
        around = StepSpec(main, drafts, **around_drafts(host, spec.runtime, tree, batch)) if drafts else None
        own = spec.runtime.draft_on_own_gpus  # the verify's inputs then the target's (stepspec)
        draft = drafter.host_us(tree, batch) + sum(us for us, _ in passes) + (
            sum(float(exposed_behind_drafts_us(around, graphed, c, machine.gpu, own)) for c in contexts) / len(contexts)
            if around is not None else 0.0)  # at each context (the mask grows with it), against the graphed
        # drafts' mean over the contexts (_pass_us), not each context's: the two differ only where max() switches
        emitted = expected_emitted(acceptance, tree, config)
        other = step_overhead_us(host, spec.runtime, True, batch) + speculative_host_us(
            host, spec.runtime, batch, tree, emitted, spec.workload.stop_strings)
        if around is not None and own:
            other += sum(exposed_before_verify_us(around, c, machine.gpu, own) for c in contexts) / len(contexts)
        return StepCost(verify / 1e3, draft / 1e3, other / 1e3)

    def row(label: str, tree: Tree) -> BreakevenRow:
        expected = acceptance.expected_tokens(tree) if has_expectation else None
        return BreakevenRow(label, tree, expected, cost(tree, False), cost(tree, True), tree == own_tree)

    limit = getattr(drafter, "max_depth", None)  # heads draft no deeper than they are many (Medusa, Hydra)
    rows = [row(f"chain {k}", Tree.chain(k)) for k in chains if limit is None or k <= limit]
    rows += [row(f"tree {n}", Tree.optimal(table(n), n + 1, limit)) for n in trees]
    if own_tree is not None and not any(r.is_own for r in rows):
        rows.insert(0, row(f"own {spec.speculation.verify} {own_tree.num_drafts}", own_tree))
    decode = _pass_us(machine, "target", PassShape(1, batch), spec.runtime.cuda_graph_decode, seed, contexts)
    decode_other = step_overhead_us(host, spec.runtime, False, batch)
    return BreakevenTable(spec.name, method, batch, context, (decode + decode_other) / 1e3,
                          spec.runtime.cuda_graph_verify, rows, note)


def throughput_map(table: BreakevenTable, accept_lens, verify_ms):
    """Tokens/s over (verify cost, accept length) with the own configuration's drafting and overheads."""
    import numpy as np

    rows = table.rows
    own = table.own_cost() or next((r.eager for r in rows if r.label == "chain 3"), rows[0].eager)
    extra = own.draft_ms + own.other_ms
    return table.batch * 1e3 * np.asarray(accept_lens)[None, :] / (np.asarray(verify_ms)[:, None] + extra)
