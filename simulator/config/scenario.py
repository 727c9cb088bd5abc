"""A scenario: which machine, which model, how it is run, what it serves, and how it speculates."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from .base import Strict

Probability = Annotated[float, Field(ge=0.0, le=1.0)]

ALLREDUCE_CHOICES = ("auto", "nccl", "nccl_ring", "nccl_tree", "nvls", "one_shot", "two_shot")


class Parallelism(Strict):
    tp: PositiveInt = Field(description="Tensor-parallel degree: ranks that share every layer")


class Runtime(Strict):
    cuda_graph_decode: bool = Field(True, description="Plain decode passes replay a captured CUDA graph")
    cuda_graph_verify: bool = Field(False, description="Verify passes replay a captured CUDA graph (else eager)")
    cuda_graph_draft: bool = Field(True, description="Draft-head passes replay a captured CUDA graph")
    allreduce: Literal[ALLREDUCE_CHOICES] = Field(  # type: ignore[valid-type]
        "auto", description="auto: cheapest permitted; nccl: NCCL's tuner; or force one algorithm")
    fuse_allreduce_rmsnorm: bool = Field(False, description="All-reduce fused with the following RMSNorm: one kernel fewer per all-reduce")
    overlap_schedule: bool = Field(True, description="Scheduler host work overlaps the GPU in plain decode (SGLang's overlap scheduler; off while speculating)")


class Workload(Strict):
    requests: PositiveInt = 1
    prompt_tokens: PositiveInt = 1000
    output_tokens: PositiveInt = 2048
    concurrency: PositiveInt = 1


class IIDAcceptance(Strict):
    """Every draft token accepted with the same probability, independent of depth."""

    kind: Literal["iid"]
    alpha: Probability


class PositionalAcceptance(Strict):
    """Draft token at depth d accepted with probability probs[d-1], given its parent was."""

    kind: Literal["positional"]
    probs: list[Probability] = Field(min_length=1)


Acceptance = Annotated[Union[IIDAcceptance, PositionalAcceptance], Field(discriminator="kind")]


class Speculation(Strict):
    method: Literal["none", "eagle3", "mtp", "draft_model", "ngram"] = "none"
    draft_tokens: PositiveInt = Field(3, description="Draft tokens proposed per step (chain length)")
    verify: Literal["chain", "tree"] = "chain"
    acceptance: Optional[Acceptance] = None

    @model_validator(mode="after")
    def _needs_acceptance(self):
        if self.method != "none" and self.acceptance is None:
            raise ValueError("a speculation method needs an acceptance model")
        return self


class StaticPolicy(Strict):
    kind: Literal["static"]


Policy = Annotated[Union[StaticPolicy], Field(discriminator="kind")]


class ScenarioSpec(Strict):
    name: str
    description: str = ""
    topology: Union[str, dict[str, Any]] = Field(description="Path to a topology YAML (relative to this file) or an inline mapping")
    model: Union[str, dict[str, Any]] = Field(description="Path to a model card YAML (relative to this file) or an inline mapping")
    parallelism: Parallelism
    runtime: Runtime = Runtime()
    workload: Workload = Workload()
    speculation: Speculation = Speculation()
    policy: Policy = StaticPolicy(kind="static")
    seed: NonNegativeInt = 0
    fidelity: Literal["fast", "layer", "link"] = "fast"
