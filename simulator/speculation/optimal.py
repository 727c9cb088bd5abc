"""The optimal token tree under positional acceptance: Sequoia's dynamic program (Chen et al. 2024), memoised.

best[a][n]: most expected tokens of an n-node subtree whose root sits at absolute depth a (the root counts 1). Its
root's children take ranks 1, 2, ... in order; rest[a][k][n] is the best the ranks k.. can do with n nodes between
them, and split[a][k][n] how many of those n the rank-k child's subtree takes:

    rest[a][k][n] = max over 1 <= m <= n of  P[a][k] * best[a+1][m] + rest[a][k+1][n-m],   rest[a][k][0] = 0

Two exact economies keep it fast (same values and the same first-maximum choices as the full table):
- only the sizes a tree of `size` nodes can give a subtree are computed: a root at depth a has a ancestors and a
  rank-k child has k elder siblings, each holding at least one node, so n <= size - 1 - a - k;
- ranks past the last non-zero probability of a depth's row add nothing: with every later rank at P = 0 their
  options are 0 or infeasible, so their rest and split have a closed form (see _tail_split).
Cost O(depth x nonzero ranks x size^2), under a second at size 256; results memoised by value (P, size, depth).
"""
from __future__ import annotations


import numpy as np

from ..cache import stored
from .trees import Tree, positional_rows


def optimal_tree_and_value(P, size: int, max_depth: int | None = None) -> tuple[Tree, float]:
    """The tree of exactly `size` nodes with the most expected tokens under P, and that expectation."""
    if size < 1:
        raise ValueError(f"a tree has at least one node, got size {size}.")
    depth = size - 1 if max_depth is None else min(max_depth, size - 1)
    if depth < 0 or (depth == 0 and size > 1):
        raise ValueError(f"{size} nodes do not fit within max_depth {max_depth}.")
    return _solve(positional_rows(P, depth), size, depth)


@stored
def _solve(rows: tuple[tuple[float, ...], ...], size: int, depth: int) -> tuple[Tree, float]:
    """Memoised by value: rows is the validated per-depth table (a tuple of tuples of floats)."""
    ranks = size - 1
    best = [None] * (depth + 1)
    best[depth] = np.full(size - depth + 1, -np.inf)
    best[depth][1] = 1.0  # a leaf at the deepest level holds exactly one node
    splits: list[list[np.ndarray]] = [[] for _ in range(depth)]
    tails = [(0, 0)] * depth  # per depth: (first rank of the all-zero tail, largest child subtree)
    for a in range(depth - 1, -1, -1):
        top = size - 1 - a  # the most nodes the root's children can share
        child = best[a + 1][: top + 1]
        reachable = np.isfinite(child)
        reachable[0] = False  # a child takes at least one node
        largest = int(np.flatnonzero(reachable)[-1]) if reachable.any() else 0
        row = rows[a][:top]  # a rank-k child needs k elder siblings: ranks past `top` hold nothing
        tail = max((k + 1 for k, p in enumerate(row) if p != 0.0), default=0)
        tails[a] = (tail, largest)
        rest = _tail_rest(top - tail, ranks - tail, largest)
        level: list[np.ndarray] = [None] * tail
        for k in range(tail - 1, -1, -1):
            rest, level[k] = _rank_step(row[k], child, reachable, rest, top - k)  # k elder siblings: a node each
        splits[a] = level
        values = np.full(top + 2, -np.inf)
        values[1:] = 1.0 + rest
        best[a] = values
    return _build(splits, tails, ranks, size), float(best[0][size])


def _rank_step(p: float, child: np.ndarray, reachable: np.ndarray, rest: np.ndarray, n: int):
    """rest and split of one rank for 0..n nodes, from the next rank's rest over 0..n-1 nodes.

    options[i, m] = p * best_child[m] + rest[i - m] is a sum of a row and a Toeplitz view (no copy); m = 0 and
    m > i are -inf there, so the first maximum is the table's.
    """
    gain = np.full(n + 1, -np.inf)
    gain[reachable[: n + 1]] = p * child[: n + 1][reachable[: n + 1]]  # kept apart: 0 * -inf would be NaN
    padded = np.full(2 * n + 1, -np.inf)
    padded[n: 2 * n] = rest  # padded[n + j] = rest[j], -inf for j < 0 and j = n
    step = padded.strides[0]
    toeplitz = np.lib.stride_tricks.as_strided(padded[n:], shape=(n + 1, n + 1), strides=(step, -step),
                                               writeable=False)
    options = gain[None, :] + toeplitz  # options[i, m] = gain[m] + rest[i - m]
    choice = np.argmax(options, axis=1)
    out = options[np.arange(n + 1), choice]
    out[0], choice[0] = 0.0, 0
    return out, choice


def _tail_rest(n: int, count: int, largest: int) -> np.ndarray:
    """rest over ranks whose P is 0 (count of them, each child subtree 1..largest nodes): 0 where the nodes fit."""
    out = np.full(max(n, 0) + 1, -np.inf)
    out[: min(max(n, 0), count * largest) + 1] = 0.0
    return out


def _tail_split(remaining: int, later: int, largest: int) -> int:
    """A zero-probability rank's share of `remaining` nodes when `later` zero-probability ranks follow it: the
    fewest (at least one) that leaves the rest placeable, as the table's first maximum would choose."""
    return max(1, remaining - later * largest)


def _build(splits, tails, ranks: int, size: int) -> Tree:
    """Breadth-first numbering of the chosen tree: (node, subtree size, depth) in a queue."""
    parents, queue = [-1], [(0, size, 0)]
    for node, n, a in queue:
        remaining, k = n - 1, 0
        tail, largest = tails[a] if a < len(tails) else (0, 0)
        while remaining > 0:
            m = int(splits[a][k][remaining]) if k < tail else _tail_split(remaining, ranks - k - 1, largest)
            queue.append((len(parents), m, a + 1))
            parents.append(node)
            remaining, k = remaining - m, k + 1
    return Tree(tuple(parents))
