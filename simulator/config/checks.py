"""Checks that span a scenario, its topology and its model card (each part is validated on its own first)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ConfigError
from .parallelism import check_parallelism

if TYPE_CHECKING:
    from .loader import Scenario


def check(scenario: Scenario) -> None:
    """Checks that span the scenario, its topology and its model card."""
    spec, topo, card, file = scenario.spec, scenario.topology, scenario.model, scenario.source
    check_parallelism(spec.parallelism, topo, card, file)
    if spec.workload.max_concurrency is not None and spec.parallelism.instances > 1:
        raise ConfigError(file, "workload.max_concurrency", f"a client's concurrency over {spec.parallelism.instances} "
                          "instances is not modelled (the router would have to see the client's requests in flight)",
                          "none, with workload.max_running_requests each instance's cap")
    spec_cfg = spec.speculation
    if spec_cfg.method == "mtp" and card.mtp_layers == 0:
        raise ConfigError(file, "speculation.method", f"mtp needs a model with MTP modules; {card.name} has none",
                          "eagle3, draft_model, ngram, none")
    if spec_cfg.method == "eagle2" and card.draft_head is None:
        raise ConfigError(file, "speculation.method", f"eagle2 drafts with model.draft_head; {card.name} defines none",
                          "a model card with draft_head")
    if spec_cfg.method == "eagle3" and card.draft_head is None:
        raise ConfigError(file, "speculation.method", f"eagle3 needs model.draft_head; {card.name} defines none",
                          "a model card with draft_head")
    acc = spec_cfg.acceptance
    if spec_cfg.method != "none" and acc is not None and acc.kind == "positional" and not acc.repeat_last:
        if len(acc.probs) < spec_cfg.draft_tokens and spec_cfg.verify == "chain":
            raise ConfigError(file, "speculation.acceptance.probs",
                              f"{len(acc.probs)} probabilities for a chain of {spec_cfg.draft_tokens} drafts",
                              f"at least {spec_cfg.draft_tokens} entries, one per depth (or repeat_last: true)")
    policy = spec.policy
    if policy.kind == "multi_drafter":
        if spec_cfg.method != "ngram":
            raise ConfigError(file, "policy.kind", "multi_drafter drafts with the n-gram cache where it matches: "
                              f"speculation.method must be ngram, not {spec_cfg.method}", "static, hybrid, adaptive_length")
        fallback = policy.fallback.method
        if fallback == "eagle3" and card.draft_head is None:
            raise ConfigError(file, "policy.fallback.method", f"eagle3 needs model.draft_head; {card.name} has none",
                              "mtp, draft_model")
        if fallback == "mtp" and card.mtp_layers == 0:
            raise ConfigError(file, "policy.fallback.method", f"{card.name} has no MTP modules", "eagle3, draft_model")
        if fallback == "draft_model" and scenario.draft_model is None:
            raise ConfigError(file, "policy.fallback.method", "draft_model needs speculation.draft_model.model",
                              "a draft model card path")
