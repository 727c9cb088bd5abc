"""A better drafter, as a lever: every per-depth acceptance probability scaled by one factor (capped at 1), the factor
found by bisection so that the acceptance model's analytic expected accept length rises by a given gain.
"""
from __future__ import annotations

from ..config import Scenario
from ..config.paths import get_path, parent_of
from ..speculation.models import build_acceptance
from ..speculation.setup import build_tree

_SCALED = {"iid": ("alpha",), "positional": ("probs",), "bursty": ("easy.probs", "hard.probs"),
           "ngram_context": ("copying.probs", "novel.probs")}


def scaled_acceptance(config, scale: float) -> dict:
    """The acceptance config with every per-depth probability multiplied by `scale` (capped at 1)."""
    data = config.model_dump(mode="json")
    if data["kind"] not in _SCALED:
        raise ValueError(f"{data['kind']} acceptance has no probabilities to scale")
    for dotted in _SCALED[data["kind"]]:
        node, last = parent_of(data, dotted)
        value = node[last]
        node[last] = [min(1.0, p * scale) for p in value] if isinstance(value, list) else min(1.0, value * scale)
    return data


def _smallest_probability(data: dict) -> float:
    values = []
    for dotted in _SCALED[data["kind"]]:
        node = get_path(data, dotted)
        values += node if isinstance(node, list) else [node]
    positive = [p for p in values if p > 0]
    return min(positive) if positive else 0.0


def expected_accept_len(scenario: Scenario, acceptance_config) -> float:
    """The acceptance model's analytic tokens per verify on the scenario's tree (an optimal tree is reshaped)."""
    s = scenario.spec.speculation
    model = build_acceptance(acceptance_config, ".", scenario.source)
    tree = build_tree(s.tree, s.draft_tokens, s.verify, model, scenario.source, "speculation.tree")
    return model.expected_tokens(tree)


def accept_scale_for(scenario: Scenario, gain: float) -> tuple[float, float, float] | str:
    """Bisection on the scale of the per-depth probabilities so that the analytic expected accept length rises by
    `gain`: (scale, expected before, expected after), or why it cannot."""
    config = scenario.spec.speculation.acceptance
    if config is None:
        return "acceptance is computed from the corpus text: no probabilities to scale"
    if config.kind not in _SCALED:
        return f"{config.kind} acceptance has no probabilities to scale"
    kind = type(config)

    def expected(scale: float) -> float:
        return expected_accept_len(scenario, kind.model_validate(scaled_acceptance(config, scale)))

    before, target = expected(1.0), expected(1.0) + gain
    smallest = _smallest_probability(config.model_dump(mode="json"))
    if smallest == 0.0:
        return "every acceptance probability is 0: nothing to scale"
    low, high = 1.0, 1.0 / smallest  # at `high` every probability is capped at 1: the most this tree can give
    if expected(high) < target:
        return f"cannot: at most {expected(high):.2f} tokens per verify on this tree (today {before:.2f})"
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if expected(mid) < target else (low, mid)
    return high, before, expected(high)
