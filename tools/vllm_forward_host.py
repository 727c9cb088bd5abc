"""Times, on this machine's CPython, the host work of one decoder layer of a vLLM 0.8.4 (V1) decode forward in
piecewise CUDA-graph mode: the compiled model is split at every attention call (config.py
CompilationConfig.set_splitting_ops_for_v1: vllm.unified_attention_with_output), so a forward replays one graph piece
per layer (and one more) and calls the attention op eagerly between them. It runs vLLM's own code (not copies),
installed in a scratch environment as tools/vllm_host_step.py says:

    python -m venv /tmp/v && /tmp/v/bin/pip install vllm==0.8.4 transformers==4.51.3
    /tmp/v/bin/python tools/vllm_forward_host.py     # CPU time: the fastest of 5 runs' medians

What is timed, per layer: compilation/backends.py PiecewiseBackend.__call__ at replay (the runtime-shape look-up,
the entry's checks, entry.cudagraph.replay(), returning entry.output), and the attention op as the split graph calls
it, torch.ops.vllm.unified_attention_with_output (the PyTorch dispatcher into attention/layer.py
unified_attention_with_output: the forward-context look-ups, then v1/attention/backends/flash_attn.py
FlashAttentionImpl.forward: kv_cache.unbind, reshape_and_cache_flash, the q / output slices, three expand()s, and
vllm_flash_attn/flash_attn_interface.py flash_attn_varlen_func's checks, maybe_contiguous and empty_like before
the FA3 call).

Stand-ins, as no GPU or CUDA driver is needed: the tensors live on the CPU (view ops cost the host alike); the
graph's replay and the two kernel ops (reshape_and_cache_flash, the FA3 forward) are Python no-ops, as each is one
launch through PyTorch's bindings, which the profile charges at host.eager_launch_us (framework dispatch +
cudaLaunchKernel), so they are not counted twice; the platform is vLLM's CpuPlatform (the op's dispatch key).
Shapes: Llama-3.1-8B's layer at TP 1 (32 query heads, 8 KV heads, head 128), one decoding request of 300 tokens.

Not part of the package: its figures are written into engines/vllm/0.8.4.yaml (piecewise_host) with this file named
as their source (0.8.5's profile takes them over, an estimate).
"""
from __future__ import annotations

import statistics
import sys
import time
import types


def _stand_ins():
    """vLLM importable without CUDA (vllm_host_step's stand-ins), and the kernel ops of the attention path as
    Python no-ops (each is a launch the profile costs apart)."""
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import torch
    from vllm_host_step import _stand_ins as host_step_stand_ins

    host_step_stand_ins()
    import vllm.vllm_flash_attn as fa
    # the real wrapper's Python (flash_attn_interface.py is pure Python around the compiled op), read from the wheel
    import importlib.util
    import vllm

    spec = importlib.util.spec_from_file_location(
        "vllm.vllm_flash_attn.flash_attn_interface", vllm.__path__[0] + "/vllm_flash_attn/flash_attn_interface.py")
    interface = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(interface)
    fa.flash_attn_varlen_func = interface.flash_attn_varlen_func
    import vllm.v1.attention.backends.flash_attn as backend  # imports the wrapper only on a CUDA platform

    backend.flash_attn_varlen_func = interface.flash_attn_varlen_func

    def no_op(*args, **kwargs):
        return None

    def fa3_fwd(q, k, v, k_new, v_new, q_v, out, *rest):
        return out, None, None, None

    # an _OpNamespace keeps a resolved op as an attribute: set one, and the call sites find it there
    torch.ops._C_cache_ops.reshape_and_cache_flash = no_op
    torch.ops._vllm_fa3_C.fwd = fa3_fwd
    # compilation/backends.py imports the post-grad pass manager, whose fusion pass reads vLLM's compiled kernels at
    # import: a placeholder module (the passes run when compiling, not at replay)
    passes = types.ModuleType("vllm.compilation.pass_manager")
    passes.PostGradPassManager = type("PostGradPassManager", (), {})
    sys.modules["vllm.compilation.pass_manager"] = passes
    return torch


class _NoReplay:
    """A captured graph whose replay is the launch the profile costs apart."""

    def replay(self):
        return None


def piece(torch, tensors: int = 12):
    """A PiecewiseBackend at replay (vLLM's class, its __init__ bypassed: it compiles and captures), with a captured
    entry for runtime shape 1, and its arguments as the split graph passes them (the symbolic size first, then the
    piece's weights and activations)."""
    from vllm.compilation.backends import ConcreteSizeEntry, PiecewiseBackend

    backend = object.__new__(PiecewiseBackend)
    entry = ConcreteSizeEntry(runtime_shape=1, need_to_compile=False, use_cudagraph=True)
    entry.runnable = lambda *a: None
    entry.cudagraph = _NoReplay()
    entry.output = (torch.empty(1, 4096), torch.empty(1, 4096))
    backend.first_run_finished = True
    backend.sym_shape_indices = [0]
    backend.concrete_size_entries = {1: entry}
    backend.is_debugging_mode = False
    args = (1, *(torch.empty(16) for _ in range(tensors)))
    return backend, args


def attention(torch, context: int = 300):
    """The attention op's inputs for one decoding request, its layer and the forward context."""
    import vllm.forward_context as fc
    from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl, FlashAttentionMetadata

    heads, kv_heads, head = 32, 8, 128
    impl = FlashAttentionImpl(heads, head, head ** -0.5, kv_heads, None, None, "auto", None, None)
    blocks = 64
    layer = types.SimpleNamespace(
        impl=impl, kv_cache=[torch.zeros(2, blocks, 16, kv_heads, head, dtype=torch.bfloat16)],
        _k_scale=torch.tensor(1.0), _v_scale=torch.tensor(1.0), _q_scale=torch.tensor(1.0))
    name = "model.layers.0.self_attn.attn"
    metadata = FlashAttentionMetadata(
        num_actual_tokens=1, max_query_len=1, query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
        max_seq_len=context, seq_lens=torch.tensor([context], dtype=torch.int32),
        block_table=torch.arange(blocks, dtype=torch.int32)[None, :], slot_mapping=torch.tensor([context - 1]),
        use_cascade=False, common_prefix_len=0, cu_prefix_query_lens=None, prefix_kv_lens=None,
        suffix_kv_lens=None)
    fc._forward_context = fc.ForwardContext(no_compile_layers={name: layer}, attn_metadata=metadata, virtual_engine=0)
    q = torch.empty(1, heads, head, dtype=torch.bfloat16)
    k = torch.empty(1, kv_heads, head, dtype=torch.bfloat16)
    v = torch.empty(1, kv_heads, head, dtype=torch.bfloat16)
    out = torch.empty(1, heads, head, dtype=torch.bfloat16)
    return (q, k, v, out, name)


def median_us(call, repeats: int = 2000, clock=time.process_time_ns) -> float:
    """Median CPU time of one call by `clock` (the process's, unless told), in us (the first tenth left out)."""
    times = []
    for _ in range(repeats):
        t0 = clock()
        call()
        times.append((clock() - t0) / 1e3)
    return statistics.median(times[repeats // 10:])


def main(runs: int = 5) -> dict:
    torch = _stand_ins()
    backend, args = piece(torch)
    inputs = attention(torch)
    op = torch.ops.vllm.unified_attention_with_output
    rows = []
    for _ in range(runs):
        rows.append((median_us(lambda: backend(*args)), median_us(lambda: op(*inputs))))
    best = min(rows, key=sum)
    return {"piece_us": round(best[0], 2), "attention_us": round(best[1], 2), "runs": rows}


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=1))
