"""Drafters: what one round of proposals costs, as passes on the ranks and time on the host CPU.

EAGLE-3 / MTP heads and separate draft models run on the target's own ranks (same TP group, their own kernels and
all-reduces). A head drafting a chain of k costs k head passes a round: the first draft comes from the previous
round's extend pass, k-1 single-token passes propose the rest, and one extend pass over the k+1 verified positions
(padded to them in a captured graph; run eagerly, as SGLang did before v0.4.7, it covers only the accepted tokens,
which the k+1 here overstate) refreshes the head's state (SGLang's EAGLEWorker: draft -> verify ->
forward_draft_extend_after_decode). A tree of depth D and widest level w costs D-1 passes of w tokens per request
plus the extend. A separate draft model runs k single-token passes. The n-gram and suffix drafters look proposals
up in caches on the host CPU: no GPU passes, host time per step, per request and per node visited. Medusa, Hydra,
lookahead, EAGLE-2's dynamic tree and the sparse-KV self-draft: speculation/methods.py.
"""
from __future__ import annotations

from collections import Counter

from ..compiled import dataclass
from .trees import Tree


@dataclass(frozen=True)
class DraftPass:
    """One drafting pass: which model card runs it, the tokens per request it processes, graph-captured or not."""

    part: str  # draft_head | mtp | draft_model | medusa | hydra<i> | target (a sparse-KV self-draft)
    tokens: int
    graph: bool
    kv_budget: int = 0  # cached tokens a request's pass reads (0: all; a sparse-KV self-draft's budget)


def widest_level(tree: Tree) -> int:
    counts = Counter(tree.depths[1:])
    return max(counts.values()) if counts else 1


class HeadDrafter:
    """A draft head (EAGLE-3) or MTP module sharing the target's ranks."""

    def __init__(self, part: str, graph: bool, extend_graph: bool | None = None):
        self.part = part
        self.graph = graph
        self.extend_graph = graph if extend_graph is None else extend_graph  # SGLang captured it only from v0.4.7

    def passes(self, tree: Tree, batch: int) -> tuple[DraftPass, ...]:
        width = widest_level(tree)
        steps = [DraftPass(self.part, width, self.graph) for _ in range(tree.depth - 1)]
        extend = DraftPass(self.part, tree.depth + 1, self.extend_graph)
        return tuple(steps + [extend])

    def host_us(self, tree: Tree, batch: int) -> float:
        return 0.0


class DraftModelDrafter:
    """A separate small model drafting autoregressively on the same ranks."""

    part = "draft_model"

    def __init__(self, graph: bool):
        self.graph = graph

    def passes(self, tree: Tree, batch: int) -> tuple[DraftPass, ...]:
        width = widest_level(tree)
        return tuple(DraftPass(self.part, width, self.graph) for _ in range(tree.depth))

    def host_us(self, tree: Tree, batch: int) -> float:
        return 0.0


class HostDrafter:
    """A model-free drafter on the host CPU (n-gram / prompt lookup, suffix trees): proposals cost CPU time, not GPU
    passes: a fixed part per step and per request, and per trie node a request's lookup visits (nodes_per_request,
    counted from the algorithm's parameters: the most its insert, match and expansion touch)."""

    def __init__(self, host_us_per_step: float, host_us_per_request: float, host_us_per_node: float = 0.0,
                 nodes_per_request=None):
        self.per_step = host_us_per_step
        self.per_request = host_us_per_request
        self.per_node = host_us_per_node
        self.nodes = nodes_per_request or (lambda tree: 0)

    def passes(self, tree: Tree, batch: int) -> tuple[DraftPass, ...]:
        return ()

    def host_us(self, tree: Tree, batch: int) -> float:
        return self.per_step + (self.per_request + self.per_node * self.nodes(tree)) * batch


def ngram_nodes(config):
    """Trie nodes a request's step visits at most: SGLang inserts the branch_length - min_window suffixes of its last
    branch_length tokens and walks every window; vLLM's prompt lookup indexes max_n n-grams a token and probes max_n."""
    if config.algorithm == "prompt_lookup":
        return lambda tree: 2 * config.prompt_lookup_max + tree.num_drafts
    b, lo, hi = config.branch_length, config.min_match_window, config.max_match_window
    insert = sum(b - i for i in range(b - lo))
    match = sum(range(lo, hi + 1))
    return lambda tree: insert + match + tree.num_drafts


def suffix_nodes(config):
    """A suffix tree's step: max_tree_depth nodes updated per new token (one a step counted), every match length
    walked in the shared tree (depth^2 / 2) and the drafts followed."""
    d = config.max_tree_depth
    shared = d * (d - 1) // 2 if config.cache_requests else 0
    return lambda tree: d + shared + tree.num_drafts


def build_drafter(method: str, speculation, runtime):
    if method == "none":
        return None
    from .methods import build_method_drafter
    structural = build_method_drafter(method, speculation, runtime)
    if structural is not None:
        return structural
    if method == "eagle3":
        return HeadDrafter("draft_head", runtime.cuda_graph_draft, runtime.cuda_graph_draft_extend)
    if method == "mtp":
        return HeadDrafter("mtp", runtime.cuda_graph_draft, runtime.cuda_graph_draft_extend)
    if method == "draft_model":
        return DraftModelDrafter(runtime.cuda_graph_draft)
    if method == "ngram":
        c = speculation.ngram
        return HostDrafter(c.host_us_per_step, c.host_us_per_request, c.host_us_per_node, ngram_nodes(c))
    if method == "suffix":
        c = speculation.suffix
        return HostDrafter(c.host_us_per_step, c.host_us_per_request, c.host_us_per_node, suffix_nodes(c))
    raise ValueError(f"unknown speculation method {method!r}")
