"""Ranks of a deployment placed on GPUs, their parallel groups, and the weights each GPU holds under the split.

What is modelled: `parallelism` (config/parallelism.py) turns into ranks, each with its instance, pipeline stage,
tensor-parallel rank, DP-attention group and expert shard, on a named GPU of a machine (node). The weights of a
rank follow the engines' sharding: attention over the attention ranks (tp, or tp / dp with DP-attention; MLA's
latent projections replicated), dense MLPs, shared experts and the vocabulary over tp, routed experts over ep ranks
and each expert over tp / ep (so a rank holds num_experts / tp experts' worth either way), layers over pipeline
stages as SGLang's get_pp_indices splits them (python/sglang/srt/distributed/utils.py: equal shares, the last
`layers % pp` stages one layer more), the embedding on the first stage and the lm_head and draft parts on the last.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Scenario
from ..config.errors import ConfigError
from ..config.parallelism import Parallelism
from ..model.cards import attention_params, bytes_per_param
from ..model.cost import draft_head_card, mtp_card


@dataclass(frozen=True)
class Rank:
    index: int  # global rank, in placement order
    instance: int  # engine instance (replica)
    stage: int  # pipeline stage
    tp_rank: int  # rank inside its stage's tensor-parallel group
    attention_group: int  # DP-attention group inside the stage (0 without DP-attention)
    expert_shard: int  # which 1/ep of the experts this rank holds
    gpu: str
    machine: str  # the server (NCCL's "node") the GPU sits in


@dataclass(frozen=True)
class Placement:
    parallelism: Parallelism
    ranks: tuple[Rank, ...]

    def tp_groups(self) -> list[list[Rank]]:
        """Ranks sharing every layer's MoE/MLP all-reduce: one group per instance and stage."""
        return _groups(self.ranks, lambda r: (r.instance, r.stage))

    def attention_groups(self) -> list[list[Rank]]:
        """Ranks splitting one attention layer (the whole tp group without DP-attention)."""
        return _groups(self.ranks, lambda r: (r.instance, r.stage, r.attention_group))

    def pipeline_pairs(self) -> list[tuple[Rank, Rank]]:
        """(sender, receiver) of every stage boundary: tp rank k of stage s sends to tp rank k of stage s + 1."""
        at = {(r.instance, r.stage, r.tp_rank): r for r in self.ranks}
        return [(r, at[(r.instance, r.stage + 1, r.tp_rank)]) for r in self.ranks if r.stage + 1 < self.parallelism.pp]

    def machines(self) -> list[str]:
        return sorted({r.machine for r in self.ranks})


def _groups(ranks, key) -> list[list[Rank]]:
    out: dict = {}
    for rank in ranks:
        out.setdefault(key(rank), []).append(rank)
    return list(out.values())


def place(scenario: Scenario) -> Placement:
    """Every rank of the scenario's split on its GPU (explicit `parallelism.gpus`, else the topology's order)."""
    par, topology = scenario.spec.parallelism, scenario.topology
    machine_of = topology.machine_of
    per_instance = par.ranks_per_instance
    names = par.gpus or [topology.gpu_names[i * per_instance:(i + 1) * per_instance] for i in range(par.instances)]
    attention_size, expert_size = par.attention_tp, par.expert_tp
    ranks = []
    for instance, gpus in enumerate(names):
        for local, gpu in enumerate(gpus):
            stage, tp_rank = divmod(local, par.tp)
            ranks.append(Rank(len(ranks), instance, stage, tp_rank, tp_rank // attention_size, tp_rank // expert_size,
                              gpu, machine_of[gpu]))
    return Placement(par, tuple(ranks))


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Layer indices of each pipeline stage (SGLang's get_pp_indices without SGLANG_PP_LAYER_PARTITION)."""
    base, extra = divmod(num_layers, pp)
    sizes = [base + (1 if stage >= pp - extra else 0) for stage in range(pp)]
    starts = [sum(sizes[:stage]) for stage in range(pp)]
    return [range(start, start + size) for start, size in zip(starts, sizes)]


def _layer_bytes(card, par: Parallelism, layer: int) -> float:
    d, w = card.hidden_size, card.weights
    replicated, sharded = attention_params(card, par.attention_tp)
    total = (replicated + sharded) * bytes_per_param(card, w.attention)
    if layer < card.num_dense_layers:
        return total + 3 * d * card.dense_intermediate_size / par.tp * bytes_per_param(card, w.dense_mlp)
    m = card.moe
    total += m.num_experts * 3 * d * m.intermediate_size / par.tp * bytes_per_param(card, w.experts)
    total += m.num_shared_experts * 3 * d * m.intermediate_size / par.tp * bytes_per_param(card, w.shared_experts)
    return total + d * m.num_experts * bytes_per_param(card, w.router)


def stage_weight_bytes(card, par: Parallelism, stage: int, first: bool, last: bool) -> float:
    """Weights one rank of `stage` holds of `card` (embedding if first, lm_head if last)."""
    total = sum(_layer_bytes(card, par, layer) for layer in stage_layers(card.num_layers, par.pp)[stage])
    vocab = card.vocab_size * card.hidden_size / par.tp
    if first:
        total += vocab * bytes_per_param(card, card.weights.embedding)
    if last:
        total += vocab * bytes_per_param(card, card.weights.lm_head)
    return total


def weight_bytes_per_gpu(scenario: Scenario) -> list[float]:
    """Per pipeline stage, the weights one of its GPUs holds: the target's share, and on the last stage every draft
    part (EAGLE head, MTP modules, draft model) split the same way but whole in layers."""
    card, par = scenario.model, scenario.spec.parallelism
    drafts = ([draft_head_card(card)] if card.draft_head is not None else []) + \
             ([mtp_card(card)] if card.mtp_layers else []) + \
             ([scenario.draft_model] if scenario.draft_model is not None else [])
    whole = par.model_copy(update={"pp": 1})
    out = []
    for stage in range(par.pp):
        last = stage == par.pp - 1
        total = stage_weight_bytes(card, par, stage, stage == 0, last)
        if last:
            total += sum(stage_weight_bytes(draft, whole, 0, True, True) for draft in drafts)
        out.append(total)
    return out


def check_memory(scenario: Scenario) -> list[float]:
    """The heaviest stage's weights per GPU against the usable device memory: one line and exit 2 if over."""
    gpu, runtime, par = scenario.topology.gpu, scenario.spec.runtime, scenario.spec.parallelism
    per_stage = weight_bytes_per_gpu(scenario)
    usable = gpu.memory_GB * 1e9 * runtime.memory_fraction
    heaviest = max(range(par.pp), key=lambda s: per_stage[s])
    if per_stage[heaviest] > usable:
        split = ", ".join(f"{k}={getattr(par, k)}" for k in ("tp", "dp", "ep", "pp") if getattr(par, k) > 1 or k == "tp")
        where = f" on pipeline stage {heaviest}" if par.pp > 1 else ""
        raise ConfigError(scenario.source, "parallelism",
                          f"{scenario.model.name} does not fit: {per_stage[heaviest] / 1e9:.1f} GB of weights per GPU"
                          f"{where} at {split}{' with dp_attention' if par.dp_attention else ''}, more than "
                          f"{runtime.memory_fraction:.0%} of one {gpu.name}'s {gpu.memory_GB:g} GB",
                          "a larger tp or pp, GPUs with more memory, or a higher runtime.memory_fraction")
    return per_stage


def require_single_group(scenario: Scenario) -> None:
    """The serving loop simulates one TP group on the first tp GPUs. A wider split is checked (placement, memory)
    and then refused with one line, rather than silently simulated as one of its groups."""
    par, topology = scenario.spec.parallelism, scenario.topology
    if par.is_single_group:
        machine_of = topology.machine_of
        spanned = sorted({machine_of[gpu] for gpu in topology.gpu_names[:par.tp]})
        if len(spanned) > 1:
            per_machine = sum(1 for gpu in topology.gpu_names if machine_of[gpu] == spanned[0])
            raise ConfigError(scenario.source, "parallelism.tp", f"tp={par.tp} spans machines {', '.join(spanned)}: "
                              "collectives between machines are not simulated yet", f"tp up to {per_machine}")
        return
    check_memory(scenario)
    wider = ", ".join(f"{k}: {getattr(par, k)}" for k in ("dp", "ep", "pp") if getattr(par, k) > 1)
    wider = ", ".join(x for x in (wider, "dp_attention: true" if par.dp_attention else "",
                                  "explicit gpus" if par.gpus is not None else "") if x)
    raise ConfigError(scenario.source, "parallelism", f"{wider}: the split is valid, but this version simulates "
                      "one tensor-parallel group per machine", "tp alone (dp, ep, pp 1, no dp_attention or gpus)")
