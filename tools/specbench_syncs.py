"""Counts the device syncs of a Spec-Bench decoding step: runs each method's own loop (hemingkx/Spec-Bench at commit
fd2c1cd, transformers 4.37.1, through tools/specbench_runners.py) on CPU under torch 2.13.0 CPU, with every model
weight and buffer marked as a CUDA tensor. A TorchFunctionMode carries the mark: a call's outputs are on the GPU
when an input is or its `device` argument is cuda (then run on CPU), `.device` reads cuda for them, `.to`, `.cuda`
and `.cpu` move the mark; each call whose CUDA implementation waits for the GPU is recorded by kind, at the
innermost Spec-Bench / transformers line, a request of 2n tokens less one of n giving a step's. The kinds (PyTorch
2.x source, where the wait is):

    read      a device-to-host read of a CUDA tensor: .item(), bool(), int(), float(), __index__ (a tensor-valued
              slice bound, range()), .tolist(), .cpu() / .to("cpu") (aten/src/ATen/native/cuda/CUDAScalar.cpp
              _local_scalar_dense_cuda and Copy.cu copy_kernel_cuda: at::cuda::memcpy_and_sync, a
              cudaStreamSynchronize); torch.equal / allclose (a bool out); and a 0-dim CUDA integer tensor used as
              an index (aten/src/ATen/TensorIndexing.h applySlicing: applySelect(tensor.item())), or passed where an
              int goes (torch/csrc/utils/python_arg_parser.cpp: item()), seen as aten::_local_scalar_dense
    h2d       a blocking host-to-device copy: torch.tensor(data, device=cuda) (torch/csrc/utils/tensor_new.cpp
              internal_new_from_data: .to(device, non_blocking=false)), .to(cuda) / .cuda() / copy_ of a host
              tensor, a host tensor written into a CUDA one (copy_kernel_cuda: memcpy_and_sync)
    index     a Python list or a host tensor indexing a CUDA tensor, read or write (torch/csrc/autograd/
              python_variable_indexing.cpp: a sequence becomes a tensor through tensor_new.cpp
              indexing_tensor_from_data, created on the indexed tensor's device as torch.tensor(data, device) is;
              ATen's advanced index moves a host index to the device with .to(), blocking)
    size      an output whose size the host needs: nonzero, argwhere, masked_select, unique, unique_consecutive,
              repeat_interleave with a tensor and no output_size, bincount, torch.where(cond), and a boolean-mask
              index (read, or a write of anything but a host scalar: ATen's TensorAdvancedIndexing.cpp index_put_
              sends that to masked_fill_ through canDispatchToMaskedFill, no sync) (aten/src/ATen/native/cuda/
              Nonzero.cu nonzero_cuda_out: the count copied to the host and the stream synchronised; Unique.cu,
              Repeat.cu alike)

    /tmp/sbv/bin/python tools/specbench_syncs.py --specbench /tmp/specbench [--methods eagle2,medusa] [--sites]

Prints a JSON line a method: syncs a step by kind and region (forward: inside a model pass), and with --sites each
line's. Not part of the package; its counts enter engines/transformers/4.37.1.yaml with this file named.
"""
from __future__ import annotations

import argparse
import collections
import json
import linecache
import os
import sys

MARK = "_specbench_cuda"
READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__format__", "__repr__", "numpy", "cpu",
         "equal", "allclose", "__array__"}
SIZED = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount", "_unique", "_unique2"}


def on_gpu(x) -> bool:
    return bool(getattr(x, MARK, False))


def is_cuda(device) -> bool:
    return device is not None and str(device).startswith("cuda")


def index_syncs(index, tensor_type, value=None, write=False) -> list[str]:
    """The syncs of indexing a CUDA tensor with `index` (and, for a write, of storing `value`)."""
    items = index if isinstance(index, tuple) else (index,)
    kinds = []
    mask = False
    for i in items:
        if isinstance(i, (list, range)) or (isinstance(i, tensor_type) and not on_gpu(i) and i.ndim > 0):
            kinds.append("index")
        elif isinstance(i, tensor_type) and on_gpu(i):
            if i.ndim == 0 and str(i.dtype) != "torch.uint8":
                kinds.append("read")
            elif str(i.dtype) in ("torch.bool", "torch.uint8"):
                mask = True
        elif isinstance(i, slice):
            kinds += ["read" for b in (i.start, i.stop, i.step) if isinstance(b, tensor_type) and on_gpu(b)]
    if write:
        host_scalar = not isinstance(value, tensor_type) or (not on_gpu(value) and value.numel() == 1)
        if isinstance(value, tensor_type) and not on_gpu(value):
            kinds.append("h2d")
        if mask and not (host_scalar and sum(isinstance(i, tensor_type) for i in items) == 1):
            kinds.append("size")
    elif mask:
        kinds.append("size")
    return kinds


def call_syncs(name: str, args, kwargs, tensor_type, gpu_in: bool) -> list[str]:
    """The syncs of one top-level PyTorch call (before it runs; the .to / factory cases are the mode's)."""
    self_ = args[0] if args else None
    if name == "__getitem__" and on_gpu(self_):
        return index_syncs(args[1], tensor_type)
    if name == "__setitem__" and on_gpu(self_):
        return index_syncs(args[1], tensor_type, args[2], write=True)
    if not gpu_in:
        return []
    if name in READS:
        return ["read"]
    if name in SIZED or (name == "where" and len(args) + len(kwargs) == 1):
        return ["size"]
    if name == "repeat_interleave" and "output_size" not in kwargs:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        # torch.repeat_interleave(repeats) alone, or a tensor of repeats: the output's size is their sum
        return ["size"] if isinstance(repeats, tensor_type) or repeats is None else []
    if name in ("diagonal_scatter", "slice_scatter", "select_scatter") and len(args) > 1 and on_gpu(self_) and \
            isinstance(args[1], tensor_type) and not on_gpu(args[1]):
        return ["h2d"]  # a clone of self, then the view's copy_ from the host source: a blocking copy
    if name == "copy_" and len(args) > 1 and isinstance(args[1], tensor_type) and on_gpu(args[1]) != on_gpu(self_):
        return [] if kwargs.get("non_blocking") or (len(args) > 2 and args[2]) else ["h2d"]
    return []


def site(roots) -> str:
    """The innermost frame in Spec-Bench's or transformers' code: file:function:line and the line."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        for root, label in roots:
            if path.startswith(root):
                line = linecache.getline(path, frame.f_lineno).strip()
                return f"{label}{os.path.relpath(path, root)}:{frame.f_code.co_name}:{frame.f_lineno}  {line[:90]}"
        frame = frame.f_back
    return "?"


def per_step(short: dict, long: dict, steps: int) -> dict:
    """A step's counts: the long request's less the short one's, over the steps between them (setup cancels)."""
    return {k: round((long.get(k, 0) - short.get(k, 0)) / steps, 2) for k in sorted(set(short) | set(long))
            if long.get(k, 0) != short.get(k, 0)}


def counters(box, roots):
    """(TorchFunctionMode, TorchDispatchMode): the first marks CUDA tensors and records the calls' syncs; the second
    the C++ item() reads of a CUDA 0-dim tensor passed where an int goes, outside a call already recorded."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    tensor = torch.Tensor
    state = {"counted": 0, "counts": collections.Counter(), "sites": collections.Counter(),
             "mixed": collections.Counter()}

    def record(kind):
        region = "forward" if box[1] else "loop"
        state["counts"][f"{region}.{kind}"] += 1
        state["sites"][f"{region}.{kind}  {site(roots)}"] += 1

    def tensors(x):
        if isinstance(x, tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            for y in x:
                yield from tensors(y)
        elif isinstance(x, dict):
            for y in x.values():
                yield from tensors(y)

    def mark(out, gpu, inputs):
        for t in tensors(out):
            if not any(t is i for i in inputs):
                setattr(t, MARK, gpu)

    class Marks(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name == "__get__":
                prop = func.__self__.__name__
                if prop in ("device", "is_cuda", "is_cpu") and on_gpu(args[0]):
                    return {"device": torch.device("cuda", 0), "is_cuda": True, "is_cpu": False}[prop]
                return func(*args, **kwargs)
            inputs = list(tensors((args, kwargs)))
            gpu_in = any(on_gpu(t) for t in inputs)
            if name in ("to", "cuda", "cpu"):
                return self.move(func, name, args, kwargs, gpu_in)
            gpu = gpu_in
            if is_cuda(kwargs.get("device")):
                kwargs["device"], gpu = "cpu", True
                if name in ("tensor", "as_tensor") and not isinstance(args[0], tensor):
                    record("h2d")
            elif "device" in kwargs and kwargs["device"] is not None:
                gpu = False
            kinds = call_syncs(name, args, kwargs, tensor, gpu_in)
            if name in ("tensor", "as_tensor") and args and not isinstance(args[0], tensor):
                # a list of CUDA tensors: each element read to the host (tensor_new.cpp recursive_store)
                kinds = kinds + ["read" for t in tensors(args[0]) if on_gpu(t)]
            for kind in kinds:
                record(kind)
            if gpu_in and not kinds and name not in ("__getitem__", "__setitem__", "copy_") and \
                    any(not on_gpu(t) and t.ndim > 0 for t in inputs):
                state["mixed"][f"{name}  {site(roots)}"] += 1
            state["counted"] += bool(kinds)
            try:
                out = func(*args, **kwargs)
            finally:
                state["counted"] -= bool(kinds)
            mark(out, gpu, inputs)
            return out

        def move(self, func, name, args, kwargs, gpu_in):
            src = args[0]
            if name == "cuda":
                device, dtype, blocking = "cuda", None, not kwargs.get("non_blocking", False)
            elif name == "cpu":
                device, dtype, blocking = "cpu", None, True
            else:
                device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
                if len(args) > 1 and isinstance(args[1], tensor):
                    device = "cuda" if on_gpu(args[1]) else "cpu"
                blocking = not non_blocking
            dst = on_gpu(src) if device is None else is_cuda(device)
            out = src.to(dtype) if dtype is not None else src
            if dst != on_gpu(src):
                record("read" if on_gpu(src) else "h2d") if blocking else None
                out = out.clone()
            setattr(out, MARK, dst) if out is not src else None
            return out

    class Reads(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default and not state["counted"] and on_gpu(args[0]):
                record("read")
            return func(*args, **(kwargs or {}))
    return Marks(), Reads(), state


def mark_tensor(t, mark=True):
    setattr(t, MARK, mark)
    return t


def mark_modules(modules, mark=True):
    """Marks every weight and buffer of the models as a CUDA tensor (Spec-Bench loads them with device_map auto)."""
    for m in modules:
        for t in list(m.parameters()) + list(m.buffers()):
            setattr(t, MARK, mark)
        stack = list(vars(m).values())  # tensors the modules keep as plain attributes (EAGLE's tree buffers)
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                stack += list(v.values())
            elif isinstance(v, (list, tuple)):
                stack += list(v)
            elif hasattr(v, "ndim") and not hasattr(v, MARK):
                setattr(v, MARK, mark)


def accept_all(modules, vocab):
    """Every drafted token accepted: each vocabulary projection (the target's lm_head, the heads', the assistant's,
    EAGLE-3's draft vocabulary) gives the same logits, -id, whatever its input: every model's argmax is token 0 and
    its top-k the k lowest ids, so the tree's first path is the target's own next tokens."""
    import torch
    with torch.no_grad():
        for m in modules:
            for sub in m.modules():
                if isinstance(sub, torch.nn.Linear) and sub.out_features >= vocab // 2:
                    sub.weight.zero_()
                    sub.bias = torch.nn.Parameter(-torch.arange(sub.out_features, dtype=sub.weight.dtype))
                    setattr(sub.bias, MARK, True)


def worker(name: str, steps: int, roots, with_sites: bool, accept: bool) -> dict:
    import specbench_runners
    from specbench_python_host import as_forward
    prompt = specbench_runners.prompt
    # evaluation/inference_*.py: the prompt's ids go to the GPU (torch.as_tensor(input_ids).cuda())
    specbench_runners.prompt = lambda *a, **k: mark_tensor(prompt(*a, **k))
    run, modules = specbench_runners.RUNNERS[name]()
    box = [None, 0]
    for m in modules:
        as_forward(m, box)
    every = [sub for m in modules for sub in m.modules()] if modules else []
    mark_modules(every)
    if accept:
        accept_all(modules, specbench_runners.VOCAB)
    marks, reads, state = counters(box, roots)
    with marks, reads:
        run(steps)  # warm-up: caches a model allocates once per process
    results = {}
    for label, n in (("short", steps), ("long", 2 * steps)):
        state["counts"].clear(), state["sites"].clear()
        with marks, reads:
            done = run(n)
        results[label] = (done, dict(state["counts"]), dict(state["sites"]))
    (n1, c1, s1), (n2, c2, s2) = results["short"], results["long"]
    row = {"method": name, "accept": accept, "steps": n2 - n1, "tokens_a_step": round(steps / (n2 - n1), 2),
           "syncs": per_step(c1, c2, n2 - n1)}
    row["total"] = round(sum(row["syncs"].values()), 2)
    if with_sites:
        row["sites"] = per_step(s1, s2, n2 - n1)
    if state["mixed"]:
        row["mixed_device_calls"] = dict(state["mixed"])
    return row


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import specbench_runners
    import torch
    import transformers
    parser = argparse.ArgumentParser()
    specbench_runners.add_flags(parser, 20, "baseline,pld,sps,eagle2,eagle2_30,eagle3,eagle,medusa,hydra,lookahead")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--sites", action="store_true", help="each line's syncs a step")
    parser.add_argument("--accept", action="store_true", help="every draft accepted (else random weights: none)")
    args = parser.parse_args()
    specbench_runners.configure(args, args.layers)
    roots = [(os.path.abspath(args.specbench) + os.sep, "Spec-Bench/"),
             (os.path.dirname(os.path.abspath(transformers.__file__)) + os.sep, "transformers/")]
    for name in args.methods.split(","):
        torch.manual_seed(0)
        print(json.dumps(worker(name, args.steps, roots, args.sites, args.accept)), flush=True)


if __name__ == "__main__":
    main()
