"""Counts, by running vLLM 0.8.5's own code, the kernels one EAGLE-3 draft pass launches: v1/spec_decode/eagle.py
EagleProposer.propose calls model_executor/models/llama_eagle3.py Eagle3LlamaForCausalLM (forward, then
compute_logits) and logits.argmax eagerly (the model has no @support_torch_compile in this release, so no graph),
and its layers run their PyTorch-native forwards: V1 sets compilation_config.custom_ops = ["none"] whenever the
target is compiled (config.py VllmConfig.__post_init__), which turns every CustomOp (RMSNorm, SiluAndMul, the
rotary embedding) to forward_native (custom_op.py CustomOp.default_on / dispatch_forward), the draft model built under
the same config (eagle.py load_model: set_current_vllm_config). Installed in a scratch environment:

    python -m venv /tmp/v && /tmp/v/bin/pip install vllm==0.8.5 transformers==4.51.3
    /tmp/v/bin/python tools/vllm_draft_kernels.py

How: the model is moved to PyTorch's meta device (shapes only: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config) and run
under a TorchDispatchMode that records every ATen op below autograd with the module it ran in; an op launches one
kernel on a GPU unless it only makes a view or an uninitialised tensor (the op's schema aliases its input, or it is
an empty*). The attention layer's FlashAttentionImpl.forward is not run (it needs the KV cache and the FA3 build):
its two launches (reshape_and_cache_flash, the FA3 varlen forward, v1/attention/backends/flash_attn.py) are added
by hand. Tensor parallelism 1 (the case's): no all-reduce or logits gather.

Not part of the package: its counts are written into engines/vllm/0.8.5.yaml (eager_kernels.draft_head_by_code)
with this file named as their source.
"""
from __future__ import annotations

import collections
import os
import sys
import tempfile
import types

EAGLE3_LLAMA31_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "num_hidden_layers": 1, "vocab_size": 128256, "draft_vocab_size": 32000,
                     "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": 131072,
                     "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                     "hidden_act": "silu", "tie_word_embeddings": False}
ATTENTION_LAUNCHES = 2  # FlashAttentionImpl.forward: reshape_and_cache_flash, flash_attn_varlen_func (FA3)


def build():
    """The draft model of vLLM 0.8.5 on the meta device, under a V1 compilation config (custom ops off)."""
    import torch
    from transformers import LlamaConfig

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from vllm_host_step import _stand_ins

    _stand_ins()
    import vllm.platforms as platforms

    platforms._current_platform.check_and_update_config = lambda config: None  # the CPU platform's checks need a model
    from vllm.config import CompilationConfig, CompilationLevel, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"file://{tempfile.mktemp()}")
    initialize_model_parallel(1, 1)
    config = VllmConfig(compilation_config=CompilationConfig(level=CompilationLevel.PIECEWISE, custom_ops=["none"]))
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers import activation
    from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

    # SiluAndMul.__init__ looks up the compiled silu_and_mul, which forward_native (the one dispatched) never calls
    activation.SiluAndMul.__init__ = lambda self: CustomOp.__init__(self)

    hf = LlamaConfig(**EAGLE3_LLAMA31_8B)
    hf.draft_vocab_size = EAGLE3_LLAMA31_8B["draft_vocab_size"]
    torch.set_default_dtype(torch.bfloat16)
    with set_current_vllm_config(config):  # built on the CPU (its d2t map is made there), then moved to meta
        model = Eagle3LlamaForCausalLM(model_config=types.SimpleNamespace(hf_config=hf), start_layer_id=32)
    model = model.to("meta")
    attn = model.model.layers[0].self_attn.attn
    attn.forward = lambda q, k, v: torch.empty_like(q)  # FlashAttentionImpl's launches are added by hand
    return torch, model


def record(torch, model, tokens: int, hidden: int):
    """[(module path, ATen op)] of one draft pass over `tokens` tokens whose hidden states are `hidden` wide (the
    first pass takes the target's three auxiliary states, 3 x 4096; the later ones the draft's own 4096)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    names = {m: n for n, m in model.named_modules()}
    stack = ["propose"]

    def enter(module, args):
        stack.append(names.get(module, "?") or "model")

    def leave(module, args, output):
        stack.pop()  # returns None: the output stands

    pre = torch.nn.modules.module.register_module_forward_pre_hook(enter)
    post = torch.nn.modules.module.register_module_forward_hook(leave)
    ops = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            ops.append((stack[-1], func))
            return func(*args, **(kwargs or {}))

    ids = torch.zeros(tokens, dtype=torch.long, device="meta")
    hidden_states = torch.zeros(tokens, hidden, device="meta")
    try:
        with Record():
            logits_states, _ = model(input_ids=ids, positions=ids, hidden_states=hidden_states)
            stack.append("propose")
            logits = model.compute_logits(logits_states[-1:], None)
            logits.argmax(dim=-1)
    finally:
        pre.remove()
        post.remove()
    return ops


def launches(func) -> int:
    """1 where the op launches a kernel on a GPU; 0 for a view or an uninitialised allocation."""
    name = func.overloadpacket.__name__
    if func.is_view or name in ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"):
        return 0
    return 1


def group(module: str) -> str:
    """The DecoderKernels field a module's ops count under (the embedding: the pass layout's own head launch)."""
    if module.endswith("embed_tokens"):
        return "embedding"
    if ".mlp" in module or module.endswith("post_attention_layernorm"):
        return "dense_mlp"
    if ".layers." in module:
        return "attention"
    return "per_pass"


def main() -> dict:
    torch, model = build()
    out = {}
    for label, tokens, hidden in (("first pass (3 tokens, fc)", 3, 3 * 4096), ("later pass (1 token)", 1, 4096)):
        ops = record(torch, model, tokens, hidden)
        counts = collections.Counter()
        print(f"\n{label}:")
        for module, func in ops:
            n = launches(func)
            counts[group(module)] += n
            print(f"  {'+' if n else ' '} {module:45s} {func}")
        counts["attention"] += ATTENTION_LAUNCHES
        print(f"  + attention impl: {ATTENTION_LAUNCHES} (reshape_and_cache_flash, FA3)")
        out[label] = dict(counts)
        print(f"  kernels: {dict(counts)}, total {sum(counts.values())}")
    return out


if __name__ == "__main__":
    main()
