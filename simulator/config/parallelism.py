"""How a model is split over GPUs: tensor, data, expert and pipeline parallelism, with the serving engines' meaning.

The keys follow SGLang's launch flags, and the vLLM equivalents are said beside each:
- `tp` (SGLang --tp): GPUs of one pipeline stage of one instance; every dense layer and the MoE block are split
  over them. vLLM: --tensor-parallel-size, times --data-parallel-size for an MoE model run with data parallelism.
- `dp` (SGLang --dp): without `dp_attention`, independent replicas, each tp x pp GPUs (vLLM --data-parallel-size of
  a dense model). With `dp_attention` (SGLang --enable-dp-attention), the tp ranks form dp attention groups of
  tp / dp ranks, each serving its own requests, while the MoE block still spans all tp ranks (vLLM's data
  parallelism of an MoE model: --data-parallel-size D --tensor-parallel-size T is tp = D x T, dp = D here).
- `ep` (SGLang --ep-size): expert parallelism inside the tp ranks: experts are spread over ep ranks, and each
  expert's weights over tp / ep (vLLM --enable-expert-parallel sets ep = tp).
- `pp` (SGLang --pp-size, vLLM --pipeline-parallel-size): consecutive layers split into pp stages of tp GPUs.

GPUs used: tp x pp per instance, times dp replicas unless dp_attention. Ranks are placed on the topology's GPUs in
order (instance, then stage, then tp rank) unless `gpus` lists them per instance.
"""

from typing import Optional

from pydantic import Field, PositiveInt

from .base import Strict
from .errors import ConfigError


class Parallelism(Strict):
    """How the model is split over GPUs: tp, dp, ep, pp, dp_attention and the placement."""

    tp: PositiveInt = Field(description="Tensor-parallel degree: ranks that share every layer (SGLang --tp)")
    dp: PositiveInt = Field(1, description="Data parallelism: replicas, or attention groups with dp_attention (SGLang --dp)")
    ep: PositiveInt = Field(1, description="Expert-parallel degree inside the tp ranks (SGLang --ep-size; vLLM --enable-expert-parallel: ep = tp)")
    pp: PositiveInt = Field(1, description="Pipeline stages of consecutive layers, tp GPUs each (--pp-size / --pipeline-parallel-size)")
    dp_attention: bool = Field(False, description="dp attention groups inside the tp ranks instead of dp replicas (SGLang --enable-dp-attention)")
    gpus: Optional[list[list[str]]] = Field(None, description=(
        "Explicit placement: per instance, the GPU names of its ranks in rank order (stage by stage, tp ranks "
        "within a stage); default: the topology's GPUs in order"))

    @property
    def instances(self) -> int:
        """Engine instances (replicas): dp without dp_attention, else one."""
        return 1 if self.dp_attention else self.dp

    @property
    def ranks_per_instance(self) -> int:
        return self.tp * self.pp

    @property
    def num_gpus(self) -> int:
        return self.instances * self.ranks_per_instance

    @property
    def attention_tp(self) -> int:
        """Ranks that split one attention layer: tp, or tp / dp under DP-attention."""
        return self.tp // self.dp if self.dp_attention else self.tp

    @property
    def expert_tp(self) -> int:
        """Ranks that split one expert's weights."""
        return self.tp // self.ep

    @property
    def is_single_group(self) -> bool:
        """One TP group on the first tp GPUs: what the serving loop simulates today."""
        return (self.dp, self.ep, self.pp, self.dp_attention, self.gpus) == (1, 1, 1, False, None)


def _divisors(n: int, up_to: int | None = None) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0 and (up_to is None or d <= up_to))


def check_parallelism(par: Parallelism, topology, card, file: str) -> None:
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


def _check_placement(par: Parallelism, topology, file: str) -> None:
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
