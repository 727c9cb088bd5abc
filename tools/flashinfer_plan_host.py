"""Times, on this machine's CPU, the host work of flashinfer 0.2.3's attention plans (the pin of SGLang v0.4.4.post2)
beyond their device ops, as SGLang's EAGLE step calls them: BatchPrefillWithPagedKVCacheWrapper.plan for the verify
(CUDA-graph wrapper, EAGLE's tree mask) and for the draft extend (no graph, no mask), and SGLang's own
fast_decode_plan (layers/attention/flashinfer_backend.py, read from the wheel and run as is) for a draft step. The
library's Python runs unchanged on CPU stand-ins of its tensors; what needs a GPU is stubbed: the JIT module's C++
plan (PrefillPlan / its workspace upload), segment_packbits' kernel, the CUDA stream handle. A plan's "beyond" is
its time less the same device ops run alone in its order (those the model costs as launches); it holds the Python
and the CPU-tensor ops (get_seq_lens) that run on the host in the engine too.

    pip download --no-deps flashinfer-python==0.2.3 sglang==0.4.4.post2   # a scratch environment with torch (CPU)
    python tools/flashinfer_plan_host.py FLASHINFER_SRC SGLANG_SRT         # the unpacked sdist / the wheel's srt

Best of 9 a run (200 calls each); a plan and its device ops are timed side by side in each of 15 runs, its beyond
the median of the 15 differences; fast_decode_plan the fastest run (the least disturbed on a shared machine). Not part of the
package: its figures are written into engines/sglang/0.4.4.post2.yaml with this file named as their source.
"""

import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "flashinfer_python-0.2.3")
SRT = sys.argv[2] if len(sys.argv) > 2 else "sglang/srt"
import torch
import flashinfer.prefill as P
import flashinfer.quantization as Q

torch.set_num_threads(1)
RUNS = 15  # runs of best(): a plan's beyond is the median of its runs' differences, a time the fastest run's
class Stub:
    def plan(self, *args):
        return []
    def segment_packbits(self, *args):
        return None
P.get_cuda_stream = lambda device: 0
Q.get_cuda_stream = lambda device: 0
Q.get_quantization_module = lambda: Stub()

_empty = torch.empty
def empty_nopin(*a, **k):
    k.pop("pin_memory", None)
    return _empty(*a, **k)

def wrapper(graph, bs, maxctx=4096):
    torch.empty = empty_nopin
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8)
    if graph:
        w = P.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=True,
            qo_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32), paged_kv_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32),
            paged_kv_indices_buf=torch.zeros(bs * maxctx, dtype=torch.int32),
            paged_kv_last_page_len_buf=torch.ones(bs, dtype=torch.int32),
            custom_mask_buf=torch.zeros(bs * maxctx * 64, dtype=torch.uint8), mask_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32))
    else:
        w = P.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
    torch.empty = _empty
    w._backend = "fa2"
    w._jit_module = Stub()
    return w

def inputs(bs, N, ctx, mask):
    qo = torch.arange(0, (bs + 1) * N, N, dtype=torch.int32)
    kv = torch.zeros(bs + 1, dtype=torch.int32); kv[1:] = torch.cumsum(torch.full((bs,), ctx + N, dtype=torch.int32), 0)
    idx = torch.zeros(int(kv[-1]), dtype=torch.int32)
    last = torch.ones(bs, dtype=torch.int32)
    m = torch.ones(N * (ctx + N) * bs, dtype=torch.bool) if mask else None
    return qo, kv, idx, last, m

def plan(w, qo, kv, idx, last, m):
    w.plan(qo, kv, idx, last, 8, 1, 128, 1, q_data_type=torch.float16, kv_data_type=torch.float16, custom_mask=m,
           non_blocking=True)

def device_ops(w, qo, kv, idx, last, m):
    """plan()'s device ops alone (the ones SGLang runs on the GPU), in its order."""
    if m is not None:
        mi = torch.empty_like(qo); mi[0] = 0
        mi[1:] = torch.cumsum((qo[1:] - qo[:-1]) * ((kv[1:] - kv[:-1] - 1) * 1 + last), 0)
        seglen = mi[1:] - mi[:-1]; packed = (seglen + 7) // 8
        new = torch.zeros(len(mi), dtype=mi.dtype); new[1:] = torch.cumsum(packed, 0)
        n = new[-1].item(); mi = mi.to(torch.int32); new = new.to(torch.int32); y = torch.empty(n, dtype=torch.uint8)
    qh = qo.to("cpu"); kh = kv.to("cpu"); lh = last.to("cpu")
    w._kv_lens_buffer[: len(lh)].copy_(lh, non_blocking=True)
    if w.is_cuda_graph_enabled:
        w._qo_indptr_buf.copy_(qo, non_blocking=True); w._paged_kv_indptr_buf.copy_(kv, non_blocking=True)
        w._paged_kv_indices_buf[: len(idx)].copy_(idx, non_blocking=True)
        w._paged_kv_last_page_len_buf.copy_(last, non_blocking=True)
        if m is not None:
            w._custom_mask_buf[: len(y)].copy_(y, non_blocking=True); w._mask_indptr_buf.copy_(new, non_blocking=True)

def best(fn, args, inner=200, runs=9):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        times.append((time.perf_counter() - t) / inner * 1e6)
    return min(times)

def fast_decode_plan_host(draft_steps=7, bs=8):
    """SGLang 0.4.4.post2's fast_decode_plan (flashinfer_backend.py, read from the wheel's source and run as is) for
    one draft step's wrapper in CUDA-graph mode with tensor cores (GQA 8 at TP 8), its C++ plan stubbed."""
    import ast
    import flashinfer.decode as D
    src = open(f"{SRT}/layers/attention/flashinfer_backend.py").read()
    node = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "fast_decode_plan")
    ns = {"torch": torch, "Optional": __import__("typing").Optional, "Union": __import__("typing").Union,
          "_get_range_buf": D._get_range_buf, "get_seq_lens": D.get_seq_lens, "global_override_indptr_cpu": None}
    exec(compile(ast.Module([node], []), "fast_decode_plan", "exec"), ns)
    torch.empty = empty_nopin
    ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8)
    w = D.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=True, use_tensor_cores=True,
        paged_kv_indptr_buffer=torch.zeros(bs + 1, dtype=torch.int32),
        paged_kv_indices_buffer=torch.zeros(bs * 4096, dtype=torch.int32),
        paged_kv_last_page_len_buffer=torch.ones(bs, dtype=torch.int32))
    torch.empty = _empty
    w._cached_module = Stub()
    class Stream:  # torch.cuda.current_stream().cuda_stream on the CPU: a stand-in
        cuda_stream = 0
    torch.cuda.current_stream = lambda *a: Stream()
    indptr = torch.arange(0, (bs + 1) * 301, 301, dtype=torch.int32)
    ns["global_override_indptr_cpu"] = indptr  # common_template's copy of the indptrs, as SGLang sets it
    args = (w, indptr, torch.zeros(int(indptr[-1]), dtype=torch.int32), torch.ones(bs, dtype=torch.int32), 8, 1, 128, 1)
    fn = ns["fast_decode_plan"]
    fn(*args, data_type=torch.float16, q_data_type=torch.float16)
    def call(*a):
        fn(*a, data_type=torch.float16, q_data_type=torch.float16)
    return min(best(call, args) for _ in range(RUNS))


def main():
    for name, graph, mask, bs, N, ctx in [("verify (graph, mask)", True, True, 1, 64, 300),
                                         ("verify (graph, mask)", True, True, 32, 4, 1000),
                                         ("draft extend (no graph, no mask)", False, False, 1, 3, 300),
                                         ("draft extend (no graph, no mask)", False, False, 32, 3, 1000)]:
        w = wrapper(graph, bs)
        args = (w, *inputs(bs, N, ctx, mask))
        plan(*args)
        pairs = [(best(plan, args), best(device_ops, args)) for _ in range(RUNS)]  # side by side: the same load
        beyond = sorted(a - b for a, b in pairs)
        print(f"{name:34s} bs {bs:3d} N {N:3d} ctx {ctx:5d}: plan {min(a for a, _ in pairs):7.1f} us, its device ops"
              f" alone {min(b for _, b in pairs):6.1f} us, beyond them (median of {RUNS} runs) {beyond[RUNS // 2]:6.1f} us"
              f" ({beyond[0]:.1f}-{beyond[-1]:.1f})")
    for bs in (1, 8, 256):
        print(f"fast_decode_plan, one draft step, {bs:3d} rows (batch x top-k): {fast_decode_plan_host(bs=bs):6.1f} us")


if __name__ == "__main__":
    main()
