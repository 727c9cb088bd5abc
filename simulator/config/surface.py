"""What the configuration classes offer beyond their fields (derived properties, lookups), as plain mixins: the
pydantic models and their plain-class mirror (config/mirror.py) inherit the same code. No pydantic import here."""
from __future__ import annotations


class ParallelismSurface:
    __slots__ = ()

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


class TopologySurface:
    __slots__ = ()

    @property
    def gpu_names(self) -> list[str]:
        return [n.name for n in self.fabric.nodes if n.kind == "gpu"]

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_names)

    @property
    def machine_of(self) -> dict[str, str]:
        """Each GPU's machine ("node0" on a single-machine topology)."""
        return {n.name: n.machine or "node0" for n in self.fabric.nodes if n.kind == "gpu"}


class WorkloadSurface:
    __slots__ = ()

    @property
    def concurrency(self) -> int:
        """Requests one instance runs at once: the engine's cap, and the client's where it is lower (one instance:
        the client holds back what the engine would otherwise queue, so the batches are the same)."""
        if self.max_concurrency is None:
            return self.max_running_requests
        return min(self.max_running_requests, self.max_concurrency)


class ModelCardSurface:
    __slots__ = ()

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.moe else 0


class HostWorkSurface:
    __slots__ = ()

    def sourced(self) -> dict:
        return {name: getattr(self, name) for name in type(self).model_fields if getattr(self, name) is not None}

    def value(self):
        """The host work as the scenario's runtime holds it (a SpeculativeHost of the mirror)."""
        from .mirror import SpeculativeHost

        return SpeculativeHost(**{name: item.value for name, item in self.sourced().items()})


class CustomAllReduceSurface:
    __slots__ = ()

    def two_shot_bytes(self, ranks: int) -> int:
        """The message size from which the kernel runs two-shot over `ranks` GPUs (0: one-shot at every size): the
        entry of the smallest GPU count at or above `ranks` (the kernel's `world_size <= k` branches)."""
        keys = sorted(self.two_shot_from_bytes)
        return self.two_shot_from_bytes[next((k for k in keys if k >= ranks), keys[-1])]

    def algorithm(self, ranks: int, nbytes: int) -> str:
        """one_shot or two_shot: the kernel's own switch for nbytes over `ranks` GPUs."""
        bound = self.two_shot_bytes(ranks)
        return "two_shot" if bound and nbytes >= bound else "one_shot"

    def runs(self, ranks: int, nbytes: int, nvlink: bool) -> bool:
        """Whether the engine runs its kernel, not NCCL, for an all-reduce of nbytes over `ranks` GPUs (`nvlink`: NVLink
        joins every pair): a GPU count it supports, within pcie_max_gpus without NVLink, at most max_bytes."""
        return ranks in self.gpu_counts and (nvlink or ranks <= self.pcie_max_gpus) and nbytes <= self.max_bytes


class EngineProfileSurface:
    __slots__ = ()

    def inputs(self) -> dict:
        """Every sourced input by name (speculative_host's as speculative_host.<code>.<field>)."""
        from .mirror import Sourced

        out = {name: getattr(self, name) for name in type(self).model_fields if isinstance(getattr(self, name), Sourced)}
        for code, work in self.speculative_host.items():
            out.update({f"speculative_host.{code}.{name}": item for name, item in work.sourced().items()})
        return out

    def host_work(self, code: str, method: str):
        """The speculative step's host work of the drafter's code: its own entry, else its method's, else default."""
        table = self.speculative_host
        return table.get(code, table.get(method, table["default"])).value()
