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
from .surface import ParallelismSurface


class Parallelism(ParallelismSurface, Strict):
    """How the model is split over GPUs: tp, dp, ep, pp, dp_attention and the placement."""

    tp: PositiveInt = Field(description="Tensor-parallel degree: ranks that share every layer (SGLang --tp)")
    dp: PositiveInt = Field(1, description="Data parallelism: replicas, or attention groups with dp_attention (SGLang --dp)")
    ep: PositiveInt = Field(1, description="Expert-parallel degree inside the tp ranks (SGLang --ep-size; vLLM --enable-expert-parallel: ep = tp)")
    pp: PositiveInt = Field(1, description="Pipeline stages of consecutive layers, tp GPUs each (--pp-size / --pipeline-parallel-size)")
    dp_attention: bool = Field(False, description="dp attention groups inside the tp ranks instead of dp replicas (SGLang --enable-dp-attention)")
    gpus: Optional[list[list[str]]] = Field(None, description=(
        "Explicit placement: per instance, the GPU names of its ranks in rank order (stage by stage, tp ranks "
        "within a stage); default: the topology's GPUs in order"))


from .checks import check_parallelism  # noqa: E402,F401  (re-exported: read from here)
