"""Token trees: construction, the Sequoia optimum against brute force, and the sampling walk against theory."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.analysis.analytic import (chain_expected_tokens_iid, optimal_tree, tree_expected_tokens,
                                        tree_tokens_variance)
from simulator.speculation.trees import Tree, walk, walk_many

# --- strategies ---------------------------------------------------------------------------------------


@st.composite
def trees(draw, max_size=12):
    size = draw(st.integers(1, max_size))
    return Tree.from_parents([-1] + [draw(st.integers(0, node - 1)) for node in range(1, size)])


def _sub_stochastic(values):
    total = sum(values)
    return [v / total for v in values] if total > 1 else values


positional_vectors = st.lists(st.floats(0, 1), min_size=0, max_size=4).map(_sub_stochastic)
positional_tables = st.lists(st.lists(st.floats(0, 1), min_size=1, max_size=3).map(_sub_stochastic), min_size=1, max_size=4)
positional = st.one_of(positional_vectors, positional_tables)


def all_trees(size):
    """Every parents list of `size` nodes (each ordered tree appears at least once)."""
    for parents in itertools.product(*[range(node) for node in range(1, size)]):
        yield Tree.from_parents((-1,) + parents)


# --- construction ---------------------------------------------------------------------------------------


def test_shape_of_a_small_tree():
    tree = Tree.from_parents([-1, 0, 0, 1, 2, 2])
    assert tree.size == 6 and tree.num_drafts == 5 and tree.depth == 2
    assert tree.depths == (0, 1, 1, 2, 2, 2)
    assert tree.children == ((1, 2), (3,), (4, 5), (), (), ())
    assert tree.ranks == (0, 1, 2, 1, 1, 2)


@pytest.mark.parametrize("parents", [
    [], [0], [1, 0], [-1, -1], [-1, 1], [-1, 0, 2], [-1, 0, 3, 1], [-1, 0.5], [-1, True], [-1, "0"], None, 3,
])
def test_from_parents_rejects_malformed_lists(parents):
    with pytest.raises(ValueError, match=r"\.$"):
        Tree.from_parents(parents)


def test_constructors():
    assert Tree.chain(0).parents == (-1,)
    assert Tree.chain(3).parents == (-1, 0, 1, 2) and Tree.chain(3).size == 4
    assert Tree.k_ary(2, 2).parents == (-1, 0, 0, 1, 1, 2, 2)
    assert Tree.k_ary(3, 0).size == 1 and Tree.k_ary(3, 3).size == 1 + 3 + 9 + 27
    assert Tree.from_parents(np.array([-1, 0, 0])) == Tree.from_parents([-1, 0, 0])
    with pytest.raises(ValueError):
        Tree.chain(-1)
    with pytest.raises(ValueError):
        Tree.k_ary(0, 2)


def test_topk_keeps_best_paths_per_depth():
    # depth 1: ranks 1,2 (0.6, 0.3); depth 2 candidates: 0.36, 0.18 (under rank 1), 0.18, 0.09 (under rank 2)
    tree = Tree.topk(2, 2, [0.6, 0.3])
    assert tree.parents == (-1, 0, 0, 1, 1)
    assert Tree.topk(1, 4, [0.7, 0.2]) == Tree.chain(4)
    # a rank is only kept with its better-ranked siblings, even when P is not sorted
    assert Tree.topk(2, 2, [0.1, 0.5]).parents == (-1, 0, 0, 2, 2)


@given(st.integers(1, 3), st.integers(0, 4), positional)
@settings(max_examples=50, deadline=None)
def test_topk_size_and_ranks(k, depth, P):
    tree = Tree.topk(k, depth, P)
    assert tree.size == 1 + k * depth and tree.depth == depth
    assert all(len(kids) <= k for kids in tree.children)


def test_rejects_bad_acceptance():
    tree = Tree.chain(2)
    for P in ([0.7, 0.5], [1.2], [-0.1], [[0.5], 0.3], [float("nan")]):
        with pytest.raises(ValueError):
            tree.expected_tokens(P)


# --- expected tokens and the optimal tree -------------------------------------------------------------


def test_chain_equals_leviathan_closed_form():
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for k in range(6):
            assert tree_expected_tokens(Tree.chain(k), [alpha]) == pytest.approx(chain_expected_tokens_iid(alpha, k))


def test_per_depth_table_with_one_column_is_a_chain():
    probs = [0.9, 0.7, 0.5]
    assert tree_expected_tokens(Tree.chain(3), [[p] for p in probs]) == pytest.approx(1 + 0.9 + 0.63 + 0.315)
    assert tree_expected_tokens(Tree.chain(5), [[p] for p in probs]) == pytest.approx(1 + 0.9 + 0.63 + 0.315)


@given(st.floats(0.01, 0.99), st.integers(1, 12))
@settings(max_examples=30, deadline=None)
def test_optimal_with_one_rank_is_the_chain(p, size):
    tree = Tree.optimal([p], size)
    chain = Tree.chain(size - 1)
    assert tree_expected_tokens(tree, [p]) == pytest.approx(tree_expected_tokens(chain, [p]), rel=1e-12)
    if p ** (size - 1) > 1e-12:  # below that the chain's last node adds less than float resolution: a tie
        assert tree == chain


@pytest.mark.parametrize("size", range(1, 7))
def test_optimal_matches_brute_force(size):
    candidates = list(all_trees(size))
    for P in ([0.6, 0.2, 0.1], [0.3, 0.3, 0.3], [0.9], [0.05, 0.9], [[0.9, 0.05], [0.2, 0.7], [0.5]]):
        for max_depth in (None, 1, 2):
            allowed = [t for t in candidates if max_depth is None or t.depth <= max_depth]
            best = max(tree_expected_tokens(t, P) for t in allowed)
            tree = Tree.optimal(P, size, max_depth)
            assert tree.size == size and (max_depth is None or tree.depth <= max_depth)
            assert tree_expected_tokens(tree, P) == pytest.approx(best, abs=1e-12)


def full_table_optimum(P, size, max_depth=None):
    """Sequoia's program over the whole (depth, rank, n) table in plain Python, first maximum on ties: the
    reference the pruned, memoised program must reproduce exactly (same tree, same value)."""
    from simulator.speculation.trees import positional_rows

    depth = size - 1 if max_depth is None else min(max_depth, size - 1)
    ranks, inf = size - 1, float("-inf")
    rows = [(row + (0.0,) * ranks)[:ranks] for row in positional_rows(P, depth)]
    best = [[inf] * (size + 1) for _ in range(depth + 1)]
    best[depth][1] = 1.0
    split = [[[0] * (size + 1) for _ in range(ranks)] for _ in range(depth)]
    for a in range(depth - 1, -1, -1):
        rest = [0.0] + [inf] * size
        for k in range(ranks - 1, -1, -1):
            new = [0.0] + [inf] * size
            for n in range(1, size + 1):
                options = [inf] + [rows[a][k] * best[a + 1][m] + rest[n - m] if best[a + 1][m] > inf else inf
                                   for m in range(1, n + 1)]
                new[n] = max(options)
                split[a][k][n] = options.index(new[n])
            rest = new
        best[a][1:] = [1.0 + r for r in rest[:-1]]
    parents, queue = [-1], [(0, size, 0)]
    for node, n, a in queue:
        remaining, k = n - 1, 0
        while remaining > 0:
            m = split[a][k][remaining]
            queue.append((len(parents), m, a + 1))
            parents.append(node)
            remaining, k = remaining - m, k + 1
    return tuple(parents), best[0][size]


@given(positional, st.integers(1, 9), st.one_of(st.none(), st.integers(1, 4)))
@settings(max_examples=60, deadline=None)
def test_optimal_equals_the_full_table(P, size, max_depth):
    tree, value = optimal_tree(P, size, max_depth)
    assert (tree.parents, value) == full_table_optimum(P, size, max_depth)


def test_optimal_is_memoised_and_fast_at_size_256():
    import time
    P = (0.6, 0.2, 0.1)
    tree = Tree.optimal(P, 256)  # cold: a fraction of a second (pruned to the non-zero ranks)
    assert tree.size == 256 and Tree.optimal(list(P), 256) is tree  # memoised by value, not by object
    started = time.perf_counter()
    Tree.optimal(P, 65)
    Tree.optimal(P, 65)
    assert time.perf_counter() - started < 2.0  # generous: the measured figure is ~10 ms cold, ~30 us warm


@given(positional, st.integers(1, 6))
@settings(max_examples=40, deadline=None)
def test_optimal_beats_every_tree_of_its_size(P, size):
    value = tree_expected_tokens(Tree.optimal(P, size), P)
    assert all(tree_expected_tokens(t, P) <= value + 1e-12 for t in all_trees(size))


@given(trees(), positional, st.data())
@settings(max_examples=60, deadline=None)
def test_adding_a_node_never_lowers_expected_tokens(tree, P, data):
    parent = data.draw(st.integers(0, tree.size - 1))
    bigger = Tree.from_parents(tree.parents + (parent,))
    assert tree_expected_tokens(bigger, P) >= tree_expected_tokens(tree, P)
    assert tree_expected_tokens(Tree.optimal(P, tree.size + 1), P) >= tree_expected_tokens(Tree.optimal(P, tree.size), P) - 1e-12


@given(positional, st.integers(1, 10), st.integers(1, 3))
@settings(max_examples=30, deadline=None)
def test_optimal_beats_topk_and_kary(P, depth, k):
    topk = Tree.topk(k, depth, P)
    if topk.size <= 24:
        assert tree_expected_tokens(Tree.optimal(P, topk.size), P) >= tree_expected_tokens(topk, P) - 1e-12
    kary = Tree.k_ary(k, min(depth, 3))
    if kary.size <= 24:
        assert tree_expected_tokens(Tree.optimal(P, kary.size, kary.depth), P) >= tree_expected_tokens(kary, P) - 1e-12


# --- the walk -------------------------------------------------------------------------------------------


class RecordingUniforms:
    def __init__(self, values):
        self.values, self.read = list(values), set()

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        self.read.add(index)
        return self.values[index]


@given(trees(), positional, st.data())
@settings(max_examples=100, deadline=None)
def test_walk_owns_exactly_depth_uniforms(tree, P, data):
    extra = data.draw(st.integers(0, 3))
    values = data.draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=tree.depth + extra, max_size=tree.depth + extra))
    uniforms = RecordingUniforms(values)
    accepted = walk(tree, P, uniforms)
    assert 0 <= accepted <= tree.depth
    assert uniforms.read <= set(range(tree.depth))
    assert walk(tree, P, values[: tree.depth] + [0.0] * extra) == accepted  # the tail is ignored
    assert walk_many(tree, P, np.array([values])).tolist() == [accepted]
    if tree.depth > 0:
        with pytest.raises(ValueError):
            walk(tree, P, values[: tree.depth - 1])


def test_walk_extremes():
    chain = Tree.chain(5)
    uniforms = np.random.default_rng(1).random((100, 5))
    assert all(walk(chain, [1.0], row) == 5 for row in uniforms)
    assert all(walk(chain, [0.0], row) == 0 for row in uniforms)
    assert all(walk(Tree.k_ary(3, 4), [], row) == 0 for row in uniforms)
    # u picks the child whose cumulative interval holds it: [0, 0.5) rank 1, [0.5, 0.8) rank 2, else stop
    tree = Tree.from_parents([-1, 0, 0, 2])
    assert walk(tree, [0.5, 0.3], [0.49, 0.0]) == 1
    assert walk(tree, [0.5, 0.3], [0.5, 0.0]) == 2
    assert walk(tree, [0.5, 0.3], [0.8, 0.0]) == 0


@pytest.mark.parametrize("tree, P", [
    (Tree.chain(6), [0.8]),
    (Tree.k_ary(2, 3), [0.5, 0.3]),
    (Tree.optimal([0.6, 0.2, 0.1], 24), [0.6, 0.2, 0.1]),
    (Tree.topk(3, 4, [[0.7, 0.1, 0.1], [0.4, 0.3, 0.2], [0.5, 0.2]]), [[0.7, 0.1, 0.1], [0.4, 0.3, 0.2], [0.5, 0.2]]),
    (Tree.from_parents([-1, 0, 0, 1, 1, 2, 3]), [0.35, 0.25, 0.2]),
])
def test_walk_mean_matches_theory(tree, P):
    rng = np.random.default_rng(20240611)
    num_walks = 20_000
    tokens = np.array([walk(tree, P, row) for row in rng.random((num_walks, tree.depth)).tolist()]) + 1
    standard_error = tokens.std(ddof=1) / np.sqrt(num_walks)
    assert abs(tokens.mean() - tree_expected_tokens(tree, P)) < 3 * standard_error
    var = tokens.var(ddof=1)  # within 3 standard errors of the sample variance, sqrt((m4 - var^2) / n)
    se_var = np.sqrt(max(np.mean((tokens - tokens.mean()) ** 4) - var**2, 0.0) / num_walks)
    assert abs(var - tree_tokens_variance(tree, P)) < 3 * se_var


@pytest.mark.benchmark
def test_walk_takes_a_few_microseconds():
    import timeit
    P = (0.6, 0.2, 0.1)
    tree = Tree.optimal(P, 64)
    rows = np.random.default_rng(0).random((1000, tree.depth)).tolist()
    seconds = min(timeit.repeat(lambda: [walk(tree, P, row) for row in rows], number=10, repeat=3)) / 10_000
    assert seconds < 10e-6
