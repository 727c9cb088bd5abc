"""Drafters whose cost and verify shape follow from the method's own structure (config/methods.py).

- Medusa: one pass of K heads on the last hidden state (model/heads.py), a static tree verified.
- Hydra: head i reads the tokens drafted before it, so a round is one head pass per tree depth, over the nodes of
  the depth above that have children.
- Lookahead decoding: no draft pass; the verify pass is wider by the lookahead branch, W (N - 1) tokens a request,
  and verifies G candidate n-grams (G chains of N - 1); the n-gram pool is looked up on the host.
- EAGLE-2 (SGLang's EAGLEWorker with topk > 1): num_steps - 1 head passes of eagle_topk tokens a request after the
  extend pass's first; the verify tree is the num_draft_tokens - 1 candidates of highest path confidence.
- Sparse-KV self-speculation (MagicDec): the target drafts itself, each draft pass reading kv_budget_tokens of a
  request's cache; the verify reads all of it.
"""
from __future__ import annotations

from collections import Counter

from .drafters import DraftPass, HeadDrafter, HostDrafter, widest_level
from .trees import Tree, positional_rows


class MedusaDrafter:
    """K heads on the verified position's hidden state: one pass a round, one token a request."""

    part = "medusa"

    def __init__(self, graph: bool, num_heads: int):
        self.graph = graph
        self.max_depth = num_heads  # a tree no deeper than the heads

    def passes(self, tree: Tree, batch: int) -> tuple[DraftPass, ...]:
        return (DraftPass(self.part, 1, self.graph),)

    def host_us(self, tree: Tree, batch: int) -> float:
        return 0.0


def expanded_per_depth(tree: Tree) -> list[int]:
    """Nodes with children at each depth 0 .. depth-1: where head d + 1 runs."""
    counts = Counter(tree.depths[node] for node, kids in enumerate(tree.children) if kids)
    return [counts.get(d, 0) for d in range(tree.depth)]


class HydraDrafter:
    """Sequentially dependent heads: head d runs over the nodes at depth d - 1 that the tree expands."""

    def __init__(self, graph: bool, num_heads: int):
        self.graph = graph
        self.max_depth = num_heads

    def passes(self, tree: Tree, batch: int) -> tuple[DraftPass, ...]:
        return tuple(DraftPass(f"hydra{d + 1}", n, self.graph) for d, n in enumerate(expanded_per_depth(tree)))

    def host_us(self, tree: Tree, batch: int) -> float:
        return 0.0


class LookaheadDrafter(HostDrafter):
    """Lookahead decoding: the pool's lookup on the host, and a verify pass wider by the Jacobi window."""

    def __init__(self, config):
        super().__init__(config.host_us_per_step, config.host_us_per_request)
        self.extra = config.window * (config.ngram - 1)

    def extra_verify_tokens(self, tree: Tree) -> int:
        return self.extra


def lookahead_tree(config) -> Tree:
    """G candidate n-grams, each a chain of N - 1 tokens from the current one (LADE's verification branch)."""
    parents = [-1]
    for _ in range(config.guesses):
        parents.append(0)
        parents.extend(range(len(parents) - 1, len(parents) + config.ngram - 3))
    return Tree.from_parents(parents)


class DynamicTreeDrafter(HeadDrafter):
    """EAGLE-2 in SGLang: every draft step runs eagle_topk tokens a request, whatever tree is then verified."""

    def __init__(self, config, graph: bool, extend_graph: bool | None = None):
        super().__init__("draft_head", graph, extend_graph)
        self.topk, self.steps = config.eagle_topk, config.num_steps

    def passes(self, tree: Tree, batch: int) -> tuple[DraftPass, ...]:
        steps = [DraftPass(self.part, self.topk, self.graph) for _ in range(self.steps - 1)]
        return tuple(steps + [DraftPass(self.part, self.steps + 1, self.extend_graph)])


def dynamic_tree(P, topk: int, steps: int, num_draft_tokens: int) -> Tree:
    """EAGLE-2's selection over confidences P (positional table): expand the topk best nodes a depth by their topk
    children for `steps` depths (Tree.topk), then keep the num_draft_tokens - 1 nodes of highest path confidence
    (ties to the earlier node). A node's confidence is at most its parent's and its parent is numbered before it,
    so every kept node's parent ranks before it and is kept."""
    candidates = Tree.topk(topk, steps, positional_rows(P, steps))
    probs = candidates.path_probs(P)
    ranked = sorted(range(1, candidates.size), key=lambda node: (-probs[node], node))
    kept = [0] + sorted(ranked[: num_draft_tokens - 1])
    index = {node: i for i, node in enumerate(kept)}
    return Tree.from_parents([-1] + [index[candidates.parents[node]] for node in kept[1:]])


class SparseSelfDrafter:
    """The target drafting itself with a sparse KV cache: one target pass a draft depth, widest level wide."""

    part = "target"

    def __init__(self, config, graph: bool):
        self.graph = graph
        self.budget = config.kv_budget_tokens

    def passes(self, tree: Tree, batch: int) -> tuple[DraftPass, ...]:
        width = widest_level(tree)
        return tuple(DraftPass(self.part, width, self.graph, self.budget) for _ in range(tree.depth))

    def host_us(self, tree: Tree, batch: int) -> float:
        return 0.0


def build_method_drafter(method: str, speculation, runtime):
    """The drafter of a structural method, or None for the others (drafters.build_drafter)."""
    graph = runtime.cuda_graph_draft
    if method == "medusa":
        return MedusaDrafter(graph, speculation.heads.num_heads)
    if method == "hydra":
        return HydraDrafter(graph, speculation.heads.num_heads)
    if method == "lookahead":
        return LookaheadDrafter(speculation.lookahead)
    if method == "eagle2":
        return DynamicTreeDrafter(speculation.dynamic_tree, graph, runtime.cuda_graph_draft_extend)
    if method == "sparse_self":
        return SparseSelfDrafter(speculation.sparse_kv, graph)
    return None
