"""Checks that span a scenario, its topology and its model card (each part is validated on its own first)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import ConfigError

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
    if spec.workload.turns > 1 and (spec.parallelism.instances > 1 or spec.workload.arrival.kind != "all_at_once"):
        raise ConfigError(file, "workload.turns", "conversations of several turns are modelled for one instance whose "
                          "requests all arrive at once (the client sends each later turn when the one before "
                          "completes)", "1, or arrival all_at_once on one instance")
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
    if policy.kind == "assistant_heuristic" and spec_cfg.method != "none" and spec_cfg.verify != "chain":
        raise ConfigError(file, "speculation.verify", "assistant_heuristic drafts a chain (transformers' assisted "
                          "generation verifies its candidates as one sequence)", "chain")
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


def _divisors(n: int, up_to: int | None = None) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and (up_to is None or d <= up_to))


def check_parallelism(par, topology, card, file: str) -> None:
    """The split against the machine and the model: GPUs, heads, KV heads, experts, layers, placement names.

    Each problem is one ConfigError naming the key, what is wrong and what is allowed (memory per GPU is checked
    where the weights are costed: timing/placement.py).
    """
    gpus, tp = topology.num_gpus, par.tp
    if par.dp_attention and tp % par.dp:
        raise ConfigError(file, "parallelism.dp", f"dp_attention splits the tp={tp} ranks into dp={par.dp} attention "
                          "groups: dp must divide tp", _divisors(tp))
    if tp % par.ep:
        raise ConfigError(file, "parallelism.ep", f"ep={par.ep} expert groups must divide the tp={tp} ranks of the "
                          "MoE block", _divisors(tp))
    if par.gpus is None and (tp > gpus or gpus % tp):
        raise ConfigError(file, "parallelism.tp", f"tp={tp} does not divide the {gpus} GPUs of {topology.name}",
                          _divisors(gpus))
    if par.num_gpus > gpus:
        factors = [f"tp={tp}"] + [f"pp={par.pp}"] * (par.pp > 1) + [f"dp={par.dp}"] * (par.instances > 1)
        product = f"{' x '.join(factors)} = {par.num_gpus}"
        raise ConfigError(file, "parallelism", f"{product} GPUs, more than the {gpus} of {topology.name}",
                          f"at most {gpus} GPUs in all")
    heads, attn = card.attention.num_heads, par.attention_tp
    if heads % attn:
        key, what = ("parallelism.dp", f"tp / dp = {attn}") if par.dp_attention else ("parallelism.tp", f"tp={tp}")
        raise ConfigError(file, key, f"{what} does not divide the {heads} attention heads of {card.name}",
                          _divisors(heads, up_to=gpus))
    kv_heads = getattr(card.attention, "num_kv_heads", None)
    if kv_heads is not None and kv_heads % attn and attn % kv_heads:
        raise ConfigError(file, "parallelism.tp", f"{attn} attention ranks and the {kv_heads} KV heads of {card.name}: "
                          "neither divides the other", f"a divisor or a multiple of {kv_heads}")
    if par.ep > 1:
        if card.moe is None:
            raise ConfigError(file, "parallelism.ep", f"ep={par.ep} but {card.name} has no experts", "1")
        experts = card.moe.num_experts
        if experts % par.ep:
            raise ConfigError(file, "parallelism.ep", f"ep={par.ep} does not divide the {experts} experts of {card.name}",
                              _divisors(experts, up_to=tp))
    if par.pp > card.num_layers:
        raise ConfigError(file, "parallelism.pp", f"pp={par.pp} stages for the {card.num_layers} layers of {card.name}",
                          f"at most {card.num_layers}")
    if par.gpus is not None:
        _check_placement(par, topology, file)


def _check_placement(par, topology, file: str) -> None:
    known, seen = set(topology.gpu_names), set()
    if len(par.gpus) != par.instances:
        raise ConfigError(file, "parallelism.gpus", f"{len(par.gpus)} instances listed, the split has {par.instances}",
                          f"{par.instances} lists of {par.ranks_per_instance} GPU names")
    for i, names in enumerate(par.gpus):
        if len(names) != par.ranks_per_instance:
            raise ConfigError(file, f"parallelism.gpus[{i}]", f"{len(names)} GPUs for the tp x pp = "
                              f"{par.ranks_per_instance} ranks of an instance", f"{par.ranks_per_instance} GPU names")
        for j, name in enumerate(names):
            if name not in known:
                raise ConfigError(file, f"parallelism.gpus[{i}][{j}]", f"{name!r} is not a GPU of {topology.name}",
                                  ", ".join(topology.gpu_names))
            if name in seen:
                raise ConfigError(file, f"parallelism.gpus[{i}][{j}]", f"{name!r} is placed twice",
                                  "each GPU holds at most one rank")
            seen.add(name)
