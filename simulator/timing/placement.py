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


from ..compiled import dataclass
from ..config import Scenario
from ..config.errors import ConfigError
from ..config.mirror import Parallelism
from ..model.cards import attention_params, bytes_per_param
from ..model.draft_cards import draft_head_card, eh_proj_bytes, mtp_card
from ..model.split_layout import stage_layers


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
    gpu_names = topology.gpu_names  # a property that walks the fabric: once
    names = par.gpus or [gpu_names[i * per_instance:(i + 1) * per_instance] for i in range(par.instances)]
    attention_size, expert_size = par.attention_tp, par.expert_tp
    ranks = []
    for instance, gpus in enumerate(names):
        for local, gpu in enumerate(gpus):
            stage, tp_rank = divmod(local, par.tp)
            ranks.append(Rank(len(ranks), instance, stage, tp_rank, tp_rank // attention_size, tp_rank // expert_size,
                              gpu, machine_of[gpu]))
    return Placement(par, tuple(ranks))


def replicates_shared_experts(scenario: Scenario) -> bool:
    """Whether every rank holds the whole shared experts: under DeepEP's dispatch and combine (SGLang builds them
    with tp_size=1 when the all-to-all backend is DeepEP), which runtime.ep_backend auto takes over NVLink. With
    1 < ep < tp there is no all-to-all (DeepEP needs ep = tp): the shared experts are split over tp."""
    par, backend = scenario.spec.parallelism, scenario.spec.runtime.ep_backend
    if par.ep <= 1 or par.ep < par.tp:
        return False
    nvlink = any(link.kind == "nvlink" for link in scenario.topology.fabric.links)
    return backend.startswith("deepep") or (backend == "auto" and nvlink)


def _layer_bytes(card, par: Parallelism, layer: int, replicated_shared: bool = False) -> float:
    d, w = card.hidden_size, card.weights
    replicated, sharded = attention_params(card, par.attention_tp)
    total = (replicated + sharded) * bytes_per_param(card, w.attention)
    if layer < card.num_dense_layers:
        return total + 3 * d * card.dense_intermediate_size / par.tp * bytes_per_param(card, w.dense_mlp)
    m = card.moe
    total += m.num_experts * 3 * d * m.intermediate_size / par.tp * bytes_per_param(card, w.experts)
    shared_split = 1 if replicated_shared else par.tp
    total += m.num_shared_experts * 3 * d * m.intermediate_size / shared_split * bytes_per_param(card, w.shared_experts)
    return total + d * m.num_experts * bytes_per_param(card, w.router)


def stage_weight_bytes(card, par: Parallelism, stage: int, first: bool, last: bool,
                       replicated_shared: bool = False, whole_embedding: bool = False) -> float:
    """Weights one rank of `stage` holds of `card` (embedding if first, lm_head if last; whole_embedding: the
    embedding whole on every rank, runtime.replicated_embedding)."""
    total = sum(_layer_bytes(card, par, layer, replicated_shared)
                for layer in stage_layers(card.num_layers, par.pp)[stage])
    vocab = card.vocab_size * card.hidden_size / par.tp
    if first:  # replicated under DP-attention (SGLang: VocabParallelEmbedding(enable_tp=not dp_attention))
        total += vocab * (par.tp if par.dp_attention or whole_embedding else 1) * \
            bytes_per_param(card, card.weights.embedding)
    if last:
        total += vocab * bytes_per_param(card, card.weights.lm_head)
    return total


# the draft part each drafter runs (speculation.drafters / methods); the others draft with no weights of their own
# (ngram, suffix, lookahead: host-side; sparse_self: the target) or with heads (medusa, hydra: model.heads.head_cards)
DRAFT_PART = {"eagle3": "draft_head", "eagle2": "draft_head", "mtp": "mtp", "draft_model": "draft_model"}


def held_draft_parts(scenario: Scenario) -> set[str]:
    """The draft parts the memory budget holds: those of every drafter the scenario may run (speculation.method, and
    a multi-drafter policy's fallback; a hybrid policy runs the method or nothing). Assumed, as the engines load
    them: a card's EAGLE head or MTP modules are loaded only when their method is configured (SGLang loads the
    --speculative-draft-model-path of the algorithm it runs, and nothing for NGRAM)."""
    spec = scenario.spec
    methods = {spec.speculation.method}
    if spec.policy.kind == "multi_drafter":
        methods.add(spec.policy.fallback.method)
    return {DRAFT_PART[m] for m in methods if m in DRAFT_PART}


def weight_bytes_per_gpu(scenario: Scenario) -> list[float]:
    """Per pipeline stage, the weights one of its GPUs holds: the target's share, and on the last stage the draft
    parts of the drafters it runs (held_draft_parts: EAGLE head, MTP modules, draft model) split the same way but
    whole in layers (the MTP modules without an embedding or lm_head: they use the target's)."""
    card, par = scenario.model, scenario.spec.parallelism
    held = held_draft_parts(scenario)
    # (card, holds its own embedding and lm_head): an MTP module uses the target's (model.draft_cards.mtp_card)
    drafts = ([(draft_head_card(card), True)] if card.draft_head is not None and "draft_head" in held else []) + \
             ([(mtp_card(card), False)] if card.mtp_layers and "mtp" in held else []) + \
             ([(scenario.draft_model, True)] if scenario.draft_model is not None and "draft_model" in held else [])
    whole = par.model_copy(update={"pp": 1})
    shared = replicates_shared_experts(scenario)
    replicated = scenario.spec.runtime.replicated_embedding  # the engine's model code: architectures
    out = []
    for stage in range(par.pp):
        last = stage == par.pp - 1
        total = stage_weight_bytes(card, par, stage, stage == 0, last, shared, card.architecture in replicated)
        if last:
            total += sum(stage_weight_bytes(draft, whole, 0, own, own, shared, draft.architecture in replicated)
                         for draft, own in drafts)
            if card.mtp_layers and "mtp" in held:  # the MTP modules' eh_proj (replicated under DP-attention)
                mode = "replicated" if par.dp_attention else scenario.spec.runtime.mtp_eh_proj
                total += eh_proj_bytes(mtp_card(card), par.tp, mode)
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


def require_simulated(scenario: Scenario) -> None:
    """What one instance's passes can be costed under: a TP group (inside a machine, or spread evenly over
    machines), DP-attention, expert parallelism (ep = tp: an all-to-all over one or two machines; 1 < ep < tp: TP's
    all-reduce after the experts), or pipeline stages of TP groups (1 < ep < tp allowed) inside machines; dp replicas
    of any of these run as a deployment (serving.deployment), each instance on its own GPUs. The split is checked (placement, memory);
    a valid split the engine does not simulate yet is one line and exit 2."""
    par, topology = scenario.spec.parallelism, scenario.topology
    if not par.is_single_group:
        check_memory(scenario)

    def refuse(key: str, what: str, allowed: str):
        raise ConfigError(scenario.source, key, what, allowed)

    backend = scenario.spec.runtime.ep_backend
    if 1 < par.ep < par.tp and backend != "auto":
        refuse("runtime.ep_backend", f"{backend} with ep={par.ep} < tp={par.tp}: an all-to-all backend needs ep = tp "
               "(SGLang's DeepEP sets --ep-size to --tp); with ep < tp the experts' outputs are all-reduced over tp",
               f"auto, or ep={par.tp}")
    if par.pp > 1 and (par.dp_attention or par.ep == par.tp > 1):
        what = "dp_attention" if par.dp_attention else f"ep={par.ep} = tp (an all-to-all)"
        refuse("parallelism.pp", f"pp={par.pp} with {what} is not simulated",
               "pp with tp alone or with 1 < ep < tp; dp_attention or ep = tp without pp")
    machine_of = topology.machine_of
    for names in instance_gpus(scenario):  # each instance's first stage (dp replicas: serving.deployment)
        stage = [machine_of[gpu] for gpu in names[:par.tp]]
        if len(set(stage)) > 1:
            _check_spread(stage, par, refuse)


def _check_spread(stage: list[str], par, refuse) -> None:
    """A first stage whose tp ranks sit on several machines (`stage`: each rank's machine)."""
    per_machine = stage.count(stage[0])
    if par.pp > 1:
        refuse("parallelism.tp", f"tp={par.tp} spans machines {', '.join(sorted(set(stage)))}: pipeline stages "
               "are simulated with each stage's tp ranks inside one machine", f"tp up to {per_machine}")
    if len(set(stage)) > 8 and par.ep > 1 and par.ep == par.tp:
        refuse("parallelism.ep", f"ep={par.ep} spans {len(set(stage))} machines: DeepEP's latencies are known "
               "for up to eight", f"ep up to {8 * per_machine}")
    if any(stage.count(m) != per_machine for m in set(stage)):
        refuse("parallelism.tp", f"tp={par.tp} spreads unevenly over machines {', '.join(sorted(set(stage)))}",
               f"a multiple of {per_machine} that divides the GPUs")


def instance_gpus(scenario: Scenario) -> list[list[str]]:
    """The GPU of each rank of each instance, in rank order (stage by stage, tp ranks within a stage)."""
    out: list[list[str]] = [[] for _ in range(scenario.spec.parallelism.instances)]
    for rank in place(scenario).ranks:
        out[rank.instance].append(rank.gpu)
    return out




def split_memory_budget(scenario: Scenario, cards: dict) -> dict:
    """Weights and KV cache per GPU under a wider split: each stage's weights (weight_bytes_per_gpu: the drafts on
    the last); a token's KV cache on a GPU is its stage's layers' share over the attention group (and the drafts'
    on the last stage); each DP-attention group caches only its own requests, so the instance holds `groups` x what
    its most constrained GPU holds."""
    from ..model.cards import kv_bytes_per_token_layer

    par, card = scenario.spec.parallelism, scenario.model
    usable = scenario.topology.gpu.memory_GB * 1e9 * scenario.spec.runtime.memory_fraction
    per_stage = check_memory(scenario)
    stages = stage_layers(card.num_layers, par.pp)
    kv_per_layer = kv_bytes_per_token_layer(card, par.attention_tp)
    drafts = sum(kv_bytes_per_token_layer(c, par.attention_tp) * c.num_layers for name, c in cards.items()
                 if name != "target")
    kv = [kv_per_layer * len(layers) + (drafts if s == par.pp - 1 else 0.0) for s, layers in enumerate(stages)]
    tokens = min(int((usable - w) // k) for w, k in zip(per_stage, kv))
    groups = par.dp if par.dp_attention else 1
    heaviest = max(range(par.pp), key=lambda s: per_stage[s])
    return {"usable_GB": usable / 1e9, "weights_GB": per_stage[heaviest] / 1e9,
            "kv_GB": (usable - per_stage[heaviest]) / 1e9, "kv_bytes_per_token": max(kv) / groups,
            "kv_capacity_tokens": tokens * groups}
