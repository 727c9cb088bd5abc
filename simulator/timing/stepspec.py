"""What a step is made of: its passes (drafts, then a decode, verify or prefill pass) and the host time around
them (the scheduler, the end-of-step sync, an engine's speculative host path), as values that cost tables are keyed by.
"""
from __future__ import annotations

from dataclasses import field, replace

import numpy as np

from ..compiled import dataclass
from ..model.cost import PassShape


@dataclass(frozen=True)
class PassSpec:
    part: str
    shape: PassShape  # context 0: the step's context is applied when it runs
    graph: bool


def scheduler_us(host, runtime, batch: int = 1) -> float:
    """The scheduler's host work a step of `batch` running requests: its time (the engine's, else the topology's),
    the engine's per-request time, and the device ops it issues before the step's first pass kernel
    (runtime.step_eager_ops, each at host.eager_launch_us)."""
    scheduler = host.step_overhead_us if runtime.scheduler_step_us is None else runtime.scheduler_step_us
    if runtime.scheduler_per_request_us:
        scheduler += runtime.scheduler_per_request_us * batch
    return scheduler + runtime.step_eager_ops * host.eager_launch_us


def step_overhead_us(host, runtime, speculating: bool, batch: int = 1) -> float:
    """Host time around a step's passes: the end-of-step synchronisation, and the scheduler's work, which overlaps
    the GPU under an overlap scheduler (the engine profile's: in SGLang, in plain decode but not while speculating)."""
    hidden = runtime.overlap_schedule_speculative if speculating else runtime.overlap_schedule
    return host.sync_us + (0.0 if hidden else scheduler_us(host, runtime, batch))


def hidden_scheduler_us(host, runtime, speculating: bool, batch: int = 1) -> float:
    """The scheduler's host work of a step that the overlap scheduler runs beside the GPU (what step_overhead_us leaves
    out: the fast fidelity takes it as hidden; the event fidelity runs it after the pass's launches, exposing what
    the GPU does not cover)."""
    hidden = runtime.overlap_schedule_speculative if speculating else runtime.overlap_schedule
    return scheduler_us(host, runtime, batch) if hidden else 0.0


def speculative_host_us(host, runtime, batch: int, tree=None, emitted: float = 1.0, stop_strings: int = 0) -> float:
    """The engine's exposed host work in a speculative step beyond the scheduler's (runtime.speculative_host), serial
    with the GPU: eager ops launched with the GPU idle and device syncs (each a fixed number and more per draft step
    of the tree's depth after the first), fixed host code beyond those ops (step_host_us), and Python loops over the
    `batch` requests, their draft tokens (the tree's; eager ops per draft token too) and the `emitted` tokens each
    request gets a step on average (bonus included; eager ops and syncs per accepted draft token, bonus excluded),
    with a stop-string finish check per emitted token and per request where the requests carry stop strings, and the
    draft graph's padding ops where the batch replays it padded (pads). The ops issued behind the draft graph are not
    here (exposed_behind_drafts_us). tree None: a chain of one."""
    extra = runtime.speculative_host
    depth, drafts = (tree.depth, tree.num_drafts) if tree is not None else (1, 1)
    ops = extra.eager_ops + extra.eager_ops_per_draft_step * max(depth - 1, 0)
    if extra.eager_ops_padded_draft and pads(runtime, batch, runtime.cuda_graph_draft):
        ops += extra.eager_ops_padded_draft
    syncs = extra.syncs + extra.syncs_per_draft_step * max(depth - 1, 0)
    per_request = (extra.per_request_us + extra.per_draft_token_us * drafts + extra.per_accepted_token_us * emitted
                   + (extra.stop_check_us * (emitted + 1.0) if stop_strings else 0.0))
    ops_per_request = (extra.eager_ops_per_draft_token * drafts
                       + extra.eager_ops_per_accepted_token * max(emitted - 1.0, 0.0))
    syncs_per_request = extra.syncs_per_accepted_token * max(emitted - 1.0, 0.0)
    return ((ops + ops_per_request * batch) * host.eager_launch_us + (syncs + syncs_per_request * batch) * host.sync_us
            + extra.step_host_us + per_request * batch)


def pads(runtime, batch: int, graphed: bool) -> bool:
    """Whether a graph-captured pass of `batch` requests replays padded: graphed, the batch not itself a captured
    size and not above the largest (runtime.speculative_graph_batch_sizes, counted in requests)."""
    if not graphed or runtime.speculative_graph_pads != "requests":
        return False
    return captured_batch(runtime.speculative_graph_batch_sizes, batch) not in (None, batch)


def behind_draft_graph(host, runtime, batch: int = 1) -> tuple[int, float]:
    """The eager ops the engine issues while its draft graph runs on the GPU (runtime.speculative_host: between the
    draft graph's replay and the step's next sync: the drafter's own and those building the verify's inputs, a
    padded verify's among them) and their host time at host.eager_launch_us, as (ops, us)."""
    ops = runtime.speculative_host.eager_ops_behind_draft_graph + verify_inputs(host, runtime, batch)[0]
    return (ops, ops * host.eager_launch_us)


def verify_inputs(host, runtime, batch: int = 1) -> tuple[int, float]:
    """Of behind_draft_graph's ops, those building the verify's inputs (runtime.speculative_host.verify_input_ops,
    and verify_input_ops_padded where the graphed verify of `batch` requests replays padded) and their host time,
    as (ops, us): the target's side where the drafter has GPUs of its own."""
    extra = runtime.speculative_host
    ops = extra.verify_input_ops
    if extra.verify_input_ops_padded and pads(runtime, batch, runtime.cuda_graph_verify):
        ops += extra.verify_input_ops_padded
    return (ops, ops * host.eager_launch_us)


def tree_mask_bytes(runtime, tree, batch: int) -> tuple[float, float]:
    """Device bytes the verify's tree mask moves a step, as (per context token of a request, fixed): each request's
    mask holds draft tokens x (context + draft tokens) booleans, each moved tree_mask_bytes_per_entry times by the
    kernels that fill, pack and copy it (runtime.speculative_host); none without a tree (tree None)."""
    per_entry = runtime.speculative_host.tree_mask_bytes_per_entry
    if tree is None or not per_entry:
        return (0.0, 0.0)
    tokens = tree.size
    return (per_entry * tokens * batch, per_entry * tokens * tokens * batch)


def around_drafts(host, runtime, tree, batch: int) -> dict:
    """A speculative StepSpec's work around its drafts, as its keyword arguments: the ops behind the draft graph, the
    verify's inputs among them, the tree mask's bytes (one place for the serving loop and the break-even table)."""
    return {"behind_drafts": behind_draft_graph(host, runtime, batch), "mask_bytes": tree_mask_bytes(runtime, tree, batch),
            "verify_inputs": verify_inputs(host, runtime, batch)}


def adds_behind_drafts(step) -> bool:
    """Whether the step issues ops behind its draft graph or moves a tree mask (exposed_behind_drafts_us,
    exposed_before_verify_us)."""
    return bool(step.behind_drafts[0]) or step.mask_bytes != (0.0, 0.0)


def _after_ops_us(ops: int, host_us, graphed_us, gpu):
    """n ops launched at host time L each behind `graphed_us` of GPU work: each kernel at least the floor, the last
    no sooner than the host has issued it: max(n L + floor - graphed, n floor)."""
    return np.maximum(host_us + gpu.floor_us - graphed_us, ops * gpu.floor_us) if ops else 0.0


def exposed_behind_drafts_us(step, graphed_us, context: int, gpu, own_gpus: bool = False):
    """What the drafter's round adds past its graphed draft passes' GPU time (`graphed_us`, a float or an array of
    samples): the ops issued behind the draft graph run on the GPU after it (_after_ops_us); on the target's GPUs
    (own_gpus False) these include the verify's inputs and the tree mask's bytes follow at the device's achievable
    bandwidth (serial on the GPU stream: built behind the draft graph, packed and copied after a sync; its kernels'
    floors are among the ops). A drafter on GPUs of its own issues only its own ops (exposed_before_verify_us)."""
    ops, host_us = step.behind_drafts
    if own_gpus:
        verify_ops, verify_us = step.verify_inputs
        return _after_ops_us(ops - verify_ops, host_us - verify_us, graphed_us, gpu)
    per_context, fixed = step.mask_bytes
    return _after_ops_us(ops, host_us, graphed_us, gpu) + (per_context * context + fixed) / gpu.bytes_per_us


def exposed_before_verify_us(step, context: int, gpu, own_gpus: bool = False) -> float:
    """What the target's ranks run before the verify beyond the drafter's round: nothing where the drafter shares
    their GPUs (exposed_behind_drafts_us has it); where it has its own, the verify's inputs (their ops with the
    target's GPUs idle, _after_ops_us behind nothing: the next sync waits for the last) and the tree mask's bytes."""
    if not own_gpus or not adds_behind_drafts(step):
        return 0.0
    ops, host_us = step.verify_inputs
    per_context, fixed = step.mask_bytes
    return float(_after_ops_us(ops, host_us, 0.0, gpu)) + (per_context * context + fixed) / gpu.bytes_per_us


def expected_emitted(acceptance, tree, config) -> float:
    """Tokens a request emits a step on average for the host loops' costs (speculative_host_us): the acceptance
    model's expectation for the step's tree; 1 (the bonus token) where it has none (n-gram over text, whose hit rate
    depends on the history)."""
    if acceptance is None or config is None or config.kind == "ngram_context":
        return 1.0
    return float(acceptance.expected_tokens(tree))


def captured_batch(sizes, batch: int) -> int | None:
    """The batch a graph-captured pass of `batch` requests runs at: the smallest captured size >= batch (the engine
    pads the rest), or None above the largest (the pass runs eagerly). No list: every batch size is captured."""
    if sizes is None:
        return batch
    fits = [size for size in sizes if size >= batch]
    return min(fits) if fits else None


def verify_pass(tree, batch: int, graph: bool, extra_tokens: int = 0) -> PassSpec:
    """The target's pass over a verify tree: every node of every request, a tree mask unless it is a chain;
    extra_tokens a request ride along (lookahead decoding's Jacobi window: a tree mask)."""
    tree_mask = tree.depth < tree.num_drafts or extra_tokens > 0
    return PassSpec("target", PassShape(tree.size + extra_tokens, batch, 0, tree_mask, True), graph)


def extra_verify_tokens(drafter, tree) -> int:
    """Tokens a request the drafter adds to the verify pass beyond the tree (lookahead decoding's window)."""
    extra = getattr(drafter, "extra_verify_tokens", None)
    return extra(tree) if extra is not None else 0


def draft_passes(drafter, tree, batch: int) -> tuple[PassSpec, ...]:
    """A drafter's passes for one round over the batch."""
    return tuple(PassSpec(d.part, PassShape(d.tokens, batch, kv_budget=getattr(d, "kv_budget", 0)), d.graph)
                 for d in drafter.passes(tree, batch))


def speculative_passes(drafter, tree, batch: int, runtime, verify_graph: bool) -> tuple[PassSpec, tuple[PassSpec, ...]]:
    """A speculative step's verify and draft passes. Graph-captured passes run at the captured size
    (runtime.speculative_graph_batch_sizes, eager above the largest): in requests, padding requests up to it
    (PassShape.padding), or in tokens (speculative_graph_pads: tokens), padding the pass's rows (padding_rows);
    eager passes at the real batch."""
    verify = verify_pass(tree, batch, False, extra_verify_tokens(drafter, tree))
    if verify_graph:
        verify = captured_pass(verify, batch, runtime)
    drafts = tuple(captured_pass(d, batch, runtime) if d.graph else d for d in draft_passes(drafter, tree, batch))
    return verify, drafts


def captured_pass(spec: PassSpec, batch: int, runtime) -> PassSpec:
    """A pass as its captured graph runs it: padded up to the captured size and graphed, or eager above the largest."""
    sizes, shape = runtime.speculative_graph_batch_sizes, spec.shape
    if runtime.speculative_graph_pads == "tokens":
        rows = shape.tokens * batch
        graphed = captured_batch(sizes, rows)
        padded = replace(shape, padding_rows=graphed - rows) if graphed is not None else shape
    else:
        graphed = captured_batch(sizes, batch)
        padded = replace(shape, padding=graphed - batch) if graphed is not None else shape
    return replace(spec, shape=padded, graph=graphed is not None)


@dataclass(frozen=True)
class StepSpec:
    """The passes of one step and its host-side costs (compared by value; the hash is computed once, since the
    fast fidelity looks a step's samples up by it every step)."""

    main: PassSpec
    drafts: tuple[PassSpec, ...] = ()
    draft_host_us: float = 0.0  # proposals computed on the CPU (n-gram lookup)
    other_us: float = 0.0  # scheduler work and the end-of-step synchronisation
    # scheduler work the overlap scheduler runs beside the GPU (not in other_us); left out of the repr, which seeds
    # the fast fidelity's draft pairings (costs._draft_us)
    hidden_us: float = field(default=0.0, repr=False)
    # ops issued while the graphed drafts run (and their host time) and the tree mask's device bytes (per context
    # token, fixed): exposed_behind_drafts_us, exposed_before_verify_us; out of the repr too
    behind_drafts: tuple[int, float] = field(default=(0, 0.0), repr=False)  # (ops, their host us)
    mask_bytes: tuple[float, float] = field(default=(0.0, 0.0), repr=False)
    # of behind_drafts, the ops building the verify's inputs (the target's where the drafter has its own GPUs)
    verify_inputs: tuple[int, float] = field(default=(0, 0.0), repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.main, self.drafts, self.draft_host_us, self.other_us,
                                                self.hidden_us, self.behind_drafts, self.mask_bytes,
                                                self.verify_inputs)))

    def __hash__(self) -> int:
        return self._hash
