"""Simulation against theory: accept lengths against the closed forms, throughput against analytic.speedup.

Every check is seeded and compares a sample statistic with its closed form within 3 standard errors computed from the
samples themselves (so the tests have a fixed, known false-alarm rate of about 0.3% per check, paid once: the seeds
are fixed). Steps that a request's output length may have cut short (fewer than depth + 1 tokens left) are left out
of accept-length statistics; which steps those are depends only on the tokens already generated, so dropping them
does not bias the rest.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats

import simulator
from simulator.analysis import analytic as analytic
from simulator.timing import machine as machine_module
from simulator.serving.server import KIND_DECODE, KIND_PREFILL
from simulator.model.cost import PassShape
from simulator.speculation.acceptance import positional_table
from simulator.speculation.setup import build_speculation
from strategies import TINY_CARD, TINY_GPU, TINY_HOST, make_scenario, pcie_fabric, topology

GPU, HOST, CARD = TINY_GPU, TINY_HOST, TINY_CARD


def base(acceptance: dict, draft_tokens: int = 3, verify: str = "chain", tree: dict | None = None,
         requests: int = 4, output_tokens: int = 4096, prompt_tokens: int = 64, seed: int = 0, host=HOST) -> dict:
    """A 2-GPU PCIe machine serving a small dense model; EAGLE-3 drafts."""
    return {"name": "oracle", "topology": topology(pcie_fabric(2, sockets=1, gpus_per_switch=2), GPU, dict(host)),
            "model": copy.deepcopy(CARD), "parallelism": {"tp": 2},
            "workload": {"requests": requests, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens},
            "speculation": {"method": "eagle3", "draft_tokens": draft_tokens, "verify": verify,
                            "tree": tree or {"kind": "chain"}, "acceptance": acceptance},
            "policy": {"kind": "static"}, "seed": seed}


def uncut_lengths(result, raw) -> np.ndarray:
    """Accept lengths of the steps that had at least depth + 1 tokens left to generate."""
    depth = int(result.run.steps["depth"][result.run.spec_steps].max())
    left = raw["workload"]["output_tokens"] - result.run.accept_positions
    return result.run.accept_lengths[left >= depth + 1]


def mean_and_se(samples: np.ndarray) -> tuple[float, float]:
    return float(samples.mean()), float(samples.std(ddof=1) / np.sqrt(samples.size))


def assert_variance_within_3_se(samples: np.ndarray, expected: float) -> None:
    """The sample variance within 3 of its standard errors, sqrt((m4 - var^2) / n), of `expected`."""
    x = np.asarray(samples, dtype=float)
    var = x.var(ddof=1)
    se = np.sqrt(max(np.mean((x - x.mean()) ** 4) - var**2, 0.0) / x.size)
    assert abs(var - expected) <= 3 * se + 1e-12, (var, expected, se)


def assert_mean_within_3_se(samples: np.ndarray, expected: float) -> None:
    """The sample mean within 3 standard errors of `expected`; a constant sample must equal it."""
    mean, se = mean_and_se(samples)
    if se == 0:
        assert mean == pytest.approx(expected, abs=1e-12)
    else:
        assert abs(mean - expected) < 3 * se, (mean, expected, se)


def chain_pmf(probs: list[float]) -> np.ndarray:
    """P(accept length = j + 1), j = 0..k, of a chain with per-depth conditional acceptance probs."""
    survive, pmf = 1.0, []
    for p in probs:
        pmf.append(survive * (1 - p))
        survive *= p
    return np.array(pmf + [survive])


def assert_matches_pmf(lengths: np.ndarray, pmf: np.ndarray) -> None:
    """Pearson chi-square of the accept-length histogram against the pmf (cells under 5 expected pooled)."""
    observed = np.bincount(lengths - 1, minlength=len(pmf))[: len(pmf)].astype(float)
    assert observed.sum() == lengths.size  # no length above depth + 1
    expected = pmf * lengths.size
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        assert obs[-1] == 0
        obs, exp = obs[:-1], exp[:-1]
    if obs.size > 1:
        assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-3, (obs, exp)


# --- i.i.d. and positional chains ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha, k", [(0.0, 3), (0.3, 1), (0.6, 4), (0.8, 3), (0.95, 6), (1.0, 2)])
def test_iid_chain_accept_length_matches_leviathan(alpha, k):
    raw = base({"kind": "iid", "alpha": alpha}, draft_tokens=k, seed=11)
    r = simulator.run(make_scenario(raw), baseline=False)
    lengths = uncut_lengths(r, raw)
    mean, se = mean_and_se(lengths)
    expected = analytic.chain_expected_tokens_iid(alpha, k)
    assert r.speculation["expected_accept_len"] == pytest.approx(expected)
    if se == 0:  # alpha 0 or 1: every step is the same
        assert np.all(lengths == expected)
        return
    assert abs(mean - expected) < 3 * se, (mean, expected, se)
    assert se < 0.04  # enough samples to see a bias of a tenth of a token
    assert_matches_pmf(lengths, chain_pmf([alpha] * k))


@pytest.mark.parametrize("probs", [[0.75, 0.33, 0.2], [0.9, 0.9, 0.5, 0.5, 0.1], [0.2], [1.0, 0.0, 1.0]])
def test_positional_chain_accept_length_matches_closed_form(probs):
    raw = base({"kind": "positional", "probs": probs}, draft_tokens=len(probs), seed=5)
    r = simulator.run(make_scenario(raw), baseline=False)
    lengths = uncut_lengths(r, raw)
    expected = analytic.chain_expected_tokens(probs)
    assert_mean_within_3_se(lengths, expected)
    assert_matches_pmf(lengths, chain_pmf(probs))
    # the sample variance agrees with the closed-form variance (loosely: a 10% band, n in the thousands)
    assert_variance_within_3_se(lengths, analytic.chain_tokens_variance(probs))


def test_repeat_last_extends_the_probabilities_to_every_depth():
    raw = base({"kind": "positional", "probs": [0.8, 0.6], "repeat_last": True}, draft_tokens=5, seed=2)
    r = simulator.run(make_scenario(raw), baseline=False)
    assert_mean_within_3_se(uncut_lengths(r, raw), analytic.chain_expected_tokens([0.8, 0.6, 0.6, 0.6, 0.6]))


def test_chain_z_scores_over_many_seeds_are_standard_normal():
    """Over 40 seeds the standardised errors of the mean accept length behave like N(0, 1) draws."""
    probs = [0.7, 0.5, 0.3]
    expected = analytic.chain_expected_tokens(probs)
    z = []
    for seed in range(40):
        raw = base({"kind": "positional", "probs": probs}, requests=1, output_tokens=1024, seed=seed)
        lengths = uncut_lengths(simulator.run(make_scenario(raw), baseline=False), raw)
        mean, se = mean_and_se(lengths)
        z.append((mean - expected) / se)
    z = np.array(z)
    assert abs(z.mean()) < 3 / np.sqrt(z.size), z  # the mean of 40 N(0,1) has sd 1/sqrt(40)
    assert 0.5 < z.std(ddof=1) < 1.5, z
    assert np.sum(np.abs(z) > 3) <= 1, z
    assert stats.kstest(z, "norm").pvalue > 1e-3


# --- fixed trees ---------------------------------------------------------------------------------------------------


def sequoia_tokens(parents, probs, decay) -> float:
    """Tokens per verify of a tree, worked out apart from the simulator's trees and tables: a node of depth d that is
    its parent's r-th child is accepted after its parent with p_d decay^(r-1) x prod_{j<r} (1 - p_d decay^(j-1))
    (the earlier siblings rejected first); the sum of the nodes' path probabilities, the root counting 1."""
    depth, children, path = [0], {}, [1.0]
    for node in range(1, len(parents)):
        parent = parents[node]
        depth.append(depth[parent] + 1)
        children[parent] = rank = children.get(parent, 0) + 1
        p = probs[depth[node] - 1] if depth[node] <= len(probs) else 0.0
        marginal = p * decay ** (rank - 1) * math.prod(1 - p * decay ** j for j in range(rank - 1))
        path.append(path[parent] * marginal)
    return math.fsum(path)


def test_sequoia_reference_by_hand():
    """The reference on a full binary tree of depth 3, probs [0.6, 0.5, 0.4], decay 0.5, by hand: a level's two
    children accept 0.6 + 0.4 x 0.6 x 0.5 = 0.72, 0.5 + 0.5 x 0.5 x 0.5 = 0.625, 0.4 + 0.6 x 0.4 x 0.5 = 0.52, so
    1 + 0.72 + 0.72 x 0.625 + 0.72 x 0.625 x 0.52 = 1 + 0.72 + 0.45 + 0.234 = 2.404."""
    binary = [-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    assert sequoia_tokens(binary, [0.6, 0.5, 0.4], 0.5) == pytest.approx(2.404, rel=1e-12)


@pytest.mark.parametrize("tree, draft_tokens, probs, decay", [
    ({"kind": "k_ary", "k": 2, "depth": 3}, 14, [0.6, 0.5, 0.4], 0.5),
    ({"kind": "topk", "k": 3, "depth": 2}, 6, [0.5, 0.4], 0.7),
    ({"kind": "optimal"}, 8, [0.7, 0.5, 0.4, 0.3], 0.4),
    ({"kind": "optimal", "depth": 2}, 5, [0.5, 0.5], 1.0),
])
def test_fixed_tree_accept_length_matches_sequoia(tree, draft_tokens, probs, decay):
    acceptance = {"kind": "positional", "probs": probs, "sibling_decay": decay}
    raw = base(acceptance, draft_tokens=draft_tokens, verify="tree", tree=tree, seed=17)
    scenario = make_scenario(raw)
    r = simulator.run(scenario, baseline=False)
    built = build_speculation(scenario).slots[0].tree
    table = positional_table(probs, decay, built.depth)
    expected = sequoia_tokens(built.parents, probs, decay)  # not the simulator's Tree.expected_tokens
    assert r.speculation["expected_accept_len"] == pytest.approx(expected, rel=1e-12)
    lengths = uncut_lengths(r, raw)
    assert_mean_within_3_se(lengths, expected)
    assert_variance_within_3_se(lengths, analytic.tree_tokens_variance(built, table))


# --- bursty regimes ------------------------------------------------------------------------------------------------
# Not the model's stationary token mixture: the regime switches per generated token, so an easy step (more tokens)
# ends an easy stretch sooner, and the share of *steps* spent easy is lower than the share of *tokens*. Per step the
# regime is a two-state Markov chain with switch chances q_s = E[1 - (1 - 1/m_s)^L_s] (L_s: the regime's accept length,
# m_s: its mean stretch length), whose stationary easy share is q_h / (q_e + q_h); the per-step mean accept length is
# that mixture of the regimes' means (a closed form after all). Steps are correlated through the regime, so the
# standard error is taken from batch means (batches of 100 steps, many times the chain's mixing time).

BURSTY = {"kind": "bursty", "easy": {"probs": [0.95, 0.9, 0.85]}, "hard": {"probs": [0.4, 0.2, 0.1]},
          "mean_easy_tokens": 20.0, "mean_hard_tokens": 30.0}


def bursty_step_mean(config: dict, k: int) -> float:
    means, switch = [], []
    for regime, stretch in (("easy", config["mean_easy_tokens"]), ("hard", config["mean_hard_tokens"])):
        probs = config[regime]["probs"]
        probs = (probs + [probs[-1]] * k)[:k]  # a regime's last probability repeats
        pmf = chain_pmf(probs)
        lengths = np.arange(1, k + 2)
        means.append(float(lengths @ pmf))
        switch.append(float((1 - (1 - 1 / stretch) ** lengths) @ pmf))
    easy_share = switch[1] / (switch[0] + switch[1])
    return easy_share * means[0] + (1 - easy_share) * means[1]


def batch_mean_se(result, raw, batch: int = 100) -> tuple[float, float]:
    depth = int(result.run.steps["depth"][result.run.spec_steps].max())
    lengths, positions = result.run.accept_lengths, result.run.accept_positions
    keep = raw["workload"]["output_tokens"] - positions >= depth + 1
    # each request's steps are contiguous (one request at a time): batch within the kept series
    series = lengths[keep]
    usable = series.size // batch * batch
    means = series[:usable].reshape(-1, batch).mean(axis=1)
    return float(series.mean()), float(means.std(ddof=1) / np.sqrt(means.size))


def test_bursty_per_step_mean_matches_the_two_state_chain():
    raw = base(BURSTY, requests=4, output_tokens=8192, seed=3)
    r = simulator.run(make_scenario(raw), baseline=False)
    mean, se = batch_mean_se(r, raw)
    expected = bursty_step_mean(BURSTY, 3)
    assert abs(mean - expected) < 3 * se, (mean, expected, se)
    assert se < 0.03


def test_bursty_reported_expectation_is_the_per_step_mean():
    """The report prints the acceptance model's expectation beside the simulated mean accept length (per step): for a
    regime model it must be the per-step stationary mean, not the token-weighted mixture of the regimes' means."""
    raw = base(BURSTY, requests=4, output_tokens=8192, seed=3)
    r = simulator.run(make_scenario(raw), baseline=False)
    mean, se = batch_mean_se(r, raw)
    reported = r.speculation["expected_accept_len"]
    assert abs(mean - reported) < 3 * se, (f"simulated {mean:.3f} +- {se:.3f}, reported expectation {reported:.3f}, "
                                           f"per-step closed form {bursty_step_mean(BURSTY, 3):.3f}")


# --- throughput against analytic.speedup with fixed step costs ----------------------------------------------------
# No launch jitter, no rank skew, and a model whose attention kernel sits on the kernel floor at every context of the
# run: every pass of a shape then costs the same, so a speculative step costs S and a plain step D exactly, and the
# only randomness left is the accept lengths. With n tokens after prefill, E the analytic mean accept length and P
# the prefill time (the same in both runs), the speculative run takes P + n D / analytic.speedup(E, S, D) = P + n S / E.
# Its number of speculative steps N has (renewal CLT) standard deviation sqrt(n var / E^3), var estimated from the
# samples; each request's last step can be cut short, adding at most one step per request.

FIXED_HOST = {**HOST, "launch_jitter_cv": 0.0, "rank_skew_cv": 0.0}


@pytest.mark.parametrize("acceptance, draft_tokens, verify, tree, graph_verify", [
    ({"kind": "iid", "alpha": 0.8}, 4, "chain", None, False),
    ({"kind": "positional", "probs": [0.75, 0.33, 0.2]}, 3, "chain", None, True),
    ({"kind": "positional", "probs": [0.6, 0.5, 0.4], "sibling_decay": 0.5}, 6, "tree", {"kind": "topk", "k": 2, "depth": 3}, False),
    ({"kind": "iid", "alpha": 0.2}, 2, "chain", None, False),
])
def test_speculative_throughput_is_analytic_speedup_times_baseline(acceptance, draft_tokens, verify, tree, graph_verify):
    raw = base(acceptance, draft_tokens=draft_tokens, verify=verify, tree=tree, requests=2, output_tokens=4096,
               prompt_tokens=16, seed=7, host=FIXED_HOST)
    raw["runtime"] = {"cuda_graph_verify": graph_verify}
    scenario = make_scenario(raw)
    r = simulator.run(scenario)
    spec, base_steps = r.run.steps, r.baseline.steps
    S_all = spec["duration_us"][r.run.spec_steps]
    D_all = base_steps["duration_us"][base_steps["kind"] == KIND_DECODE]
    # fixed step costs: every speculative step costs the same, and so does every plain step
    assert np.ptp(S_all) <= 1e-9 * S_all[0] and np.ptp(D_all) <= 1e-9 * D_all[0]
    S, D = float(S_all[0]), float(D_all[0])
    P = float(spec["duration_us"][spec["kind"] == KIND_PREFILL].sum())
    assert P == pytest.approx(float(base_steps["duration_us"][base_steps["kind"] == KIND_PREFILL].sum()), rel=1e-12)

    expected_accept = r.speculation["expected_accept_len"]
    n = r.tokens - raw["workload"]["requests"]  # tokens after each request's prefill token
    lengths = r.run.accept_lengths
    spread = 3 * np.sqrt(n * lengths.var(ddof=1) / expected_accept**3) + raw["workload"]["requests"]
    steps = n * D / analytic.speedup(expected_accept, S, D) / S  # = n / E
    hi = r.tokens / ((P + (steps - spread) * S) / 1e6)
    lo = r.tokens / ((P + (steps + spread) * S) / 1e6)
    assert lo <= r.throughput_tok_s <= hi, (lo, r.throughput_tok_s, hi)
    # the same statement on the ratio: speedup equals analytic.speedup at the simulated mean, prefill aside
    assert r.baseline_tok_s == pytest.approx(r.tokens / ((P + n * D) / 1e6), rel=1e-9)
    assert r.speedup == pytest.approx((P + n * D) / (P + n * D / analytic.speedup(r.mean_accept_len, S, D)),
                                      rel=1e-9)


def test_fixed_costs_mean_identical_pass_samples():
    """With jitter and skew at zero every memoised sample of a pass shape is the same number."""
    raw = base({"kind": "iid", "alpha": 0.5}, host=FIXED_HOST)
    m = machine_module.Machine(make_scenario(raw))
    for graph in (False, True):
        for tokens in (1, 4):
            samples = m.samples("target", PassShape(tokens, 1, 1024, False, tokens > 1), graph, seed=0)
            assert np.ptp(samples, axis=0).max() <= 1e-9 * samples[:, 0].max()
