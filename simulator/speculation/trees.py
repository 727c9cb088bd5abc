"""Token trees for tree verification, and the walk that decides how deep the target accepts into one.

A tree is a parents list: node 0 is the root (the last accepted token, parent -1) and every other node's
parent has a smaller index. Siblings are ranked by order of appearance: a node's first child is its rank-1
child, the drafter's most likely token.

Acceptance is positional (Sequoia, Chen et al. 2024): P = [P_1, P_2, ...], where P_k is the probability that
the rank-k child of an accepted node is the one accepted (sum_k P_k <= 1; ranks beyond len(P) get 0). P may
also be a table P[d-1][k-1] for children at depth d (rows beyond the table get 0); a chain with per-depth
acceptance p_d is the table [[p_1], [p_2], ...].
"""
from __future__ import annotations

import heapq
import math
import numbers
from bisect import bisect_right
from dataclasses import field
from functools import cached_property

import numpy as np

from ..compiled import dataclass
from ..cache import current

_SUM_TOLERANCE = 1e-9


def _is_sequence(value) -> bool:
    return hasattr(value, "__len__") and not isinstance(value, (str, bytes))


def _checked_row(row) -> tuple[float, ...]:
    values = tuple(float(p) for p in row)
    if any(not (0.0 <= p <= 1.0) for p in values):  # also rejects NaN
        raise ValueError(f"acceptance probabilities must lie in [0, 1], got {values}.")
    if sum(values) > 1.0 + _SUM_TOLERANCE:
        raise ValueError(f"positional acceptance probabilities of one node's children sum above 1: {values}.")
    return values


def positional_rows(P, max_depth: int) -> tuple[tuple[float, ...], ...]:
    """Validated acceptance rows for child depths 1..max_depth: element d-1 holds P_k by rank for depth d."""
    if isinstance(P, np.ndarray):
        P = P.tolist()
    if not _is_sequence(P):
        raise ValueError(f"positional acceptance must be a list of probabilities or a table of them, got {P!r}.")
    nested = [_is_sequence(x) for x in P]
    if any(nested) and not all(nested):
        raise ValueError("positional acceptance mixes numbers and rows; give a 1-D list or a 2-D table.")
    if not P or not nested[0]:
        return (_checked_row(P),) * max_depth
    table = tuple(_checked_row(row) for row in P)
    return table[:max_depth] + ((),) * max(0, max_depth - len(table))


def _value_of(P):
    """Hashable form of P (a tuple of floats, or a tuple of tuples): its value, as the run's store keys by it."""
    if isinstance(P, tuple):
        return P
    if isinstance(P, np.ndarray):
        P = P.tolist()
    if P and _is_sequence(P[0]):
        return tuple(tuple(row) for row in P)
    return tuple(P)


@dataclass(frozen=True)
class Tree:
    """A validated token tree; derived shape (depths, children, ranks) is computed once at construction."""

    parents: tuple[int, ...]
    depths: tuple[int, ...] = field(init=False, repr=False, compare=False)
    children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    ranks: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        parents = _checked_parents(self.parents)
        depths, ranks = [0], [0]
        children: list[list[int]] = [[] for _ in parents]
        for node in range(1, len(parents)):
            parent = parents[node]
            children[parent].append(node)
            depths.append(depths[parent] + 1)
            ranks.append(len(children[parent]))
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "depths", tuple(depths))
        object.__setattr__(self, "children", tuple(tuple(c) for c in children))
        object.__setattr__(self, "ranks", tuple(ranks))
        object.__setattr__(self, "_hash", hash(parents))  # trees key hot-path caches: hash once

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def size(self) -> int:
        """Nodes including the root (a chain of 3 drafts has size 4)."""
        return len(self.parents)

    @cached_property
    def num_drafts(self) -> int:
        return len(self.parents) - 1

    @cached_property
    def depth(self) -> int:
        return max(self.depths)

    # --- constructors -------------------------------------------------------------------------------

    @classmethod
    def from_parents(cls, parents) -> "Tree":
        return cls(parents)

    @classmethod
    def chain(cls, num_drafts: int) -> "Tree":
        if num_drafts < 0:
            raise ValueError(f"a chain needs num_drafts >= 0, got {num_drafts}.")
        return cls(tuple(range(-1, num_drafts)))

    @classmethod
    def k_ary(cls, branching: int, depth: int) -> "Tree":
        """Every node above `depth` has `branching` children (breadth-first numbering)."""
        if branching < 1 or depth < 0:
            raise ValueError(f"a k-ary tree needs branching >= 1 and depth >= 0, got {branching} and {depth}.")
        parents, level = [-1], [0]
        for _ in range(depth):
            next_level = []
            for parent in level:
                for _ in range(branching):
                    next_level.append(len(parents))
                    parents.append(parent)
            level = next_level
        return cls(tuple(parents))

    @classmethod
    def topk(cls, k: int, depth: int, P) -> "Tree":
        """EAGLE-2-style per-depth top-k: at each depth keep the k children with the highest path probability.

        Each kept node offers its ranks 1..k as candidates; a rank is kept only with its better-ranked siblings
        (a tree cannot hold rank 3 without rank 2), which is plain top-k whenever P is non-increasing in rank.
        Ties go to the earlier parent, then the better rank. Exactly k nodes per depth: size = 1 + k * depth.
        """
        if k < 1 or depth < 0:
            raise ValueError(f"a top-k tree needs k >= 1 and depth >= 0, got {k} and {depth}.")
        rows = positional_rows(P, depth)
        parents, level, level_probs = [-1], [0], [1.0]
        for d in range(1, depth + 1):
            row = rows[d - 1] + (0.0,) * k

            def candidate(slot: int, rank: int):  # heap key: best path probability, then parent, then rank
                return (-level_probs[slot] * row[rank - 1], slot, rank)

            frontier = [candidate(slot, 1) for slot in range(len(level))]
            heapq.heapify(frontier)
            kept = []
            while len(kept) < k:
                neg_prob, slot, rank = heapq.heappop(frontier)
                kept.append((slot, rank, -neg_prob))
                if rank < k:
                    heapq.heappush(frontier, candidate(slot, rank + 1))
            kept.sort()  # breadth-first numbering: by parent, then rank
            next_level = []
            for slot, _, _ in kept:
                next_level.append(len(parents))
                parents.append(level[slot])
            level, level_probs = next_level, [prob for _, _, prob in kept]
        return cls(tuple(parents))

    @classmethod
    def optimal(cls, P, size: int, max_depth: int | None = None) -> "Tree":
        """The tree of exactly `size` nodes with the most expected tokens under P (Sequoia's dynamic program,
        memoised by value: see speculation/optimal.py)."""
        from .optimal import optimal_tree_and_value

        return optimal_tree_and_value(P, size, max_depth)[0]

    # --- acceptance -----------------------------------------------------------------------------------

    def path_probs(self, P) -> tuple[float, ...]:
        """Probability that each node is accepted: the product of P along its path (root 1)."""
        rows = positional_rows(P, self.depth)
        probs = [1.0]
        for node in range(1, self.size):
            row, rank = rows[self.depths[node] - 1], self.ranks[node]
            probs.append(probs[self.parents[node]] * (row[rank - 1] if rank <= len(row) else 0.0))
        return tuple(probs)

    def expected_tokens(self, P) -> float:
        """Mean tokens per verify, bonus included: the sum of path_probs (plain decode = 1.0)."""
        return math.fsum(self.path_probs(P))

    def thresholds(self, P) -> tuple[tuple[tuple[float, ...], ...], tuple[tuple[int, ...], ...]]:
        """Per node: cumulative child acceptance thresholds in rank order, and the children; in the run's store by
        the tree and P."""
        key = _value_of(P)
        return current().get(("trees.thresholds", self.parents, key), lambda: self._thresholds(key))

    def _thresholds(self, P: tuple) -> tuple:
        rows = positional_rows(P, self.depth)
        cums = []
        for node, kids in enumerate(self.children):
            row = rows[self.depths[node]] if kids else ()
            cums.append(tuple(np.cumsum(row[: len(kids)]).tolist()))
        return tuple(cums), self.children


def _checked_parents(parents) -> tuple[int, ...]:
    try:
        parents = tuple(parents)
    except TypeError:
        raise ValueError(f"a tree is a list of parent indices, got {parents!r}.") from None
    if not parents:
        raise ValueError("a tree needs at least the root node, got an empty parents list.")
    if any(isinstance(p, bool) or not isinstance(p, numbers.Integral) for p in parents):
        raise ValueError(f"parent indices must be integers, got {parents}.")
    parents = tuple(int(p) for p in parents)
    if parents[0] != -1:
        raise ValueError(f"node 0 is the root and must have parent -1, got {parents[0]}.")
    for node in range(1, len(parents)):
        if not 0 <= parents[node] < node:
            raise ValueError(f"node {node} has parent {parents[node]}; a parent must be an earlier node (0..{node - 1}).")
    return parents


class Walker:
    """A tree with its acceptance thresholds compiled: the hot path, once per request per step.

    uniforms[d] decides the step from depth d to d+1: with cumulative sums cum of P over the current node's
    children in rank order, move to child k when cum[k-1] <= u < cum[k], else stop.
    """

    __slots__ = ("depth", "cums", "children", "_nodes", "root_limit")

    def __init__(self, tree: Tree, P):
        self.depth = tree.depth
        self.cums, self.children = tree.thresholds(P)
        self._nodes = tuple(zip(self.cums, self.children))
        # a first uniform at or above this accepts nothing: the walk's first step, without the call (most walks of
        # a weak drafter end there)
        self.root_limit = self.cums[0][-1] if self.depth and self.cums[0] else -math.inf

    def __call__(self, uniforms, at: int = 0) -> int:
        """Accepted drafts; the walk reads uniforms[at], uniforms[at + 1], ... (one per depth)."""
        nodes = self._nodes
        node_cums, kids = nodes[0]
        for d in range(self.depth):
            k = bisect_right(node_cums, uniforms[at + d])
            if k == len(node_cums):  # past the last threshold (a row may cover fewer ranks than the children)
                return d
            node_cums, kids = nodes[kids[k]]
        return self.depth


def walk(tree: Tree, P, uniforms) -> int:
    """Accepted draft tokens in one verify: the depth of the last accepted node (see Walker).

    A walk owns exactly tree.depth uniforms (it needs at least that many; later ones are ignored), so a caller that
    advances its stream by a fixed count per walk keeps runs with the same seed aligned (common random numbers).
    """
    if len(uniforms) < tree.depth:
        raise ValueError(f"a walk over a tree of depth {tree.depth} needs {tree.depth} uniforms, got {len(uniforms)}.")
    return Walker(tree, P)(uniforms)


def walk_many(tree: Tree, P, uniforms: np.ndarray) -> np.ndarray:
    """walk() over each row of a (num_walks, >= tree.depth) array, vectorised; same results row by row."""
    uniforms = np.asarray(uniforms, dtype=float)
    depth = tree.depth
    if uniforms.ndim != 2 or uniforms.shape[1] < depth:
        raise ValueError(f"walk_many needs a (num_walks, >= {depth}) array of uniforms, got shape {uniforms.shape}.")
    cums, children = tree.thresholds(P)
    width = max(len(c) for c in cums)
    cum_table = np.full((tree.size, width + 1), np.inf)
    child_table = np.zeros((tree.size, width + 1), dtype=np.int64)
    num_thresholds = np.array([len(c) for c in cums])
    for node, (node_cums, kids) in enumerate(zip(cums, children)):
        cum_table[node, : len(node_cums)] = node_cums
        child_table[node, : len(node_cums)] = kids[: len(node_cums)]
    node = np.zeros(len(uniforms), dtype=np.int64)
    accepted = np.zeros(len(uniforms), dtype=np.int64)
    alive = np.ones(len(uniforms), dtype=bool)
    for d in range(depth):
        k = (cum_table[node] <= uniforms[:, d : d + 1]).sum(axis=1)
        alive &= k < num_thresholds[node]
        node = np.where(alive, child_table[node, np.minimum(k, width)], node)
        accepted += alive
    return accepted
