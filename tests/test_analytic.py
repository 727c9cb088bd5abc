"""Closed forms: Leviathan's chain, per-depth chains, break-even and speedup, and their agreement with trees."""
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simulator.analysis import analytic as analytic
from simulator.speculation.acceptance import AcceptanceModel
from simulator.speculation.trees import Tree

probabilities = st.floats(0, 1)


def test_leviathan_closed_form_values():
    assert analytic.chain_expected_tokens_iid(0.0, 5) == 1.0
    assert analytic.chain_expected_tokens_iid(1.0, 4) == 5.0
    assert analytic.chain_expected_tokens_iid(0.5, 2) == pytest.approx(1.75)
    assert analytic.chain_expected_tokens_iid(0.8, 0) == pytest.approx(1.0)
    assert analytic.chain_speedup_iid(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    with pytest.raises(ValueError):
        analytic.chain_expected_tokens_iid(1.5, 3)
    with pytest.raises(ValueError):
        analytic.chain_expected_tokens_iid(0.5, -1)


@given(probabilities, st.integers(0, 20))
def test_iid_chain_is_the_geometric_sum(alpha, k):
    expected = analytic.chain_expected_tokens_iid(alpha, k)
    assert expected == pytest.approx(sum(alpha**j for j in range(k + 1)))
    assert expected == pytest.approx(analytic.chain_expected_tokens([alpha] * k))
    assert 1.0 <= expected <= k + 1 + 1e-12


@given(st.lists(probabilities, max_size=10))
@settings(max_examples=60)
def test_per_depth_chain_matches_tree_and_acceptance_model(probs):
    expected = analytic.chain_expected_tokens(probs)
    tree = Tree.chain(len(probs))
    table = [[p] for p in probs]
    assert expected == pytest.approx(analytic.tree_expected_tokens(tree, table))
    assert analytic.chain_tokens_variance(probs) == pytest.approx(analytic.tree_tokens_variance(tree, table), abs=1e-9)
    if probs:
        model = AcceptanceModel(probs)
        assert expected == pytest.approx(model.expected_tokens(tree))


def test_chain_variance_values():
    assert analytic.chain_tokens_variance([]) == 0.0
    assert analytic.chain_tokens_variance([1.0, 1.0]) == 0.0
    assert analytic.chain_tokens_variance([0.5]) == pytest.approx(0.25)  # Bernoulli(0.5) + 1
    assert analytic.chain_tokens_variance([0.5, 1.0]) == pytest.approx(1.0)  # 1 or 3, equally likely


def test_optimal_tree_returns_tree_and_value():
    tree, value = analytic.optimal_tree([0.6, 0.2, 0.1], 16)
    assert tree.size == 16 and value == pytest.approx(analytic.tree_expected_tokens(tree, [0.6, 0.2, 0.1]))
    tree, value = analytic.optimal_tree([0.6, 0.2, 0.1], 16, max_depth=2)
    assert tree.depth <= 2 and value < analytic.optimal_tree([0.6, 0.2, 0.1], 16)[1]
    assert analytic.optimal_tree([0.7], 1) == (Tree.chain(0), 1.0)
    with pytest.raises(ValueError):
        analytic.optimal_tree([0.7], 0)
    with pytest.raises(ValueError):
        analytic.optimal_tree([0.7], 3, max_depth=0)


def test_breakeven_and_speedup():
    assert analytic.breakeven_accept_len(30.0, 20.0) == pytest.approx(1.5)
    assert analytic.speedup(3.0, 30.0, 20.0) == pytest.approx(2.0)
    assert analytic.speedup(analytic.breakeven_accept_len(30.0, 20.0), 30.0, 20.0) == pytest.approx(1.0)
    for bad in [(0.0, 1.0), (1.0, -1.0), (float("inf"), 1.0), (float("nan"), 1.0)]:
        with pytest.raises(ValueError):
            analytic.breakeven_accept_len(*bad)


@given(st.floats(1.0, 8.0), st.floats(1e-3, 1e3), st.floats(1e-3, 1e3))
def test_speedup_above_one_exactly_past_breakeven(accept_len, spec_step_time, baseline_step_time):
    ratio = analytic.speedup(accept_len, spec_step_time, baseline_step_time)
    breakeven = analytic.breakeven_accept_len(spec_step_time, baseline_step_time)
    assert ratio == pytest.approx(accept_len / breakeven)
    assume(abs(accept_len - breakeven) > 1e-9 * breakeven)
    assert (ratio > 1.0) == (accept_len > breakeven)
