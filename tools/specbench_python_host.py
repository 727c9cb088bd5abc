"""Splits, on this machine's CPython, each Spec-Bench decoding loop's host time a step into time inside PyTorch calls
and Python outside them, running the methods' own code (hemingkx/Spec-Bench at commit fd2c1cd, not copies) on CPU
with tiny random-weight Vicuna-shaped models. The process is sampled from outside by py-spy (--native: nothing is
instrumented in the timed code); a sample is inside PyTorch when its deepest Python frame is in torch/ or a native
frame of libtorch / libc10 lies below it, else it is Python. A step's Python is that share of a request's thread
time, as the difference of a request of 2n and one of n tokens (the prefill and the per-request setup cancel), split
into the models' forwards (target, draft model, heads) and the method's own loop; its kernels (top-level PyTorch
calls less views and metadata reads) are counted by a TorchFunctionMode in a separate run. excess_us: the step's
Python less the plain decode's Python a kernel times the step's kernels, i.e. Python the profile's per-call rule
(eager_launch_us a counted call, its Python at a decode's density included) does not carry. PLD, whose loop and
verify are transformers' own code, is the control (its excess should be zero within the spread of runs).

    python -m venv /tmp/sbv && /tmp/sbv/bin/pip install torch==2.13.0 transformers==4.37.1 accelerate \
        fschat openai==0.28.0 anthropic==0.5.0 py-spy
    git -C <Spec-Bench mirror> archive fd2c1cd | tar -x -C /tmp/specbench
    /tmp/sbv/bin/python tools/specbench_python_host.py --specbench /tmp/specbench [--layers 2] [--repeats 7]

Defaults: 2 target layers, width 16, a 1,000-token vocabulary. The Python measured loops over tree nodes,
candidates, configuration fields and arguments, not over the vocabulary; at Vicuna's 32,000 the CPU's lm_head and
top-k work (the GPU's on the A100) is 95-99% of the samples and a run's spread grows to about +-1 ms a step.
Prints a JSON line a method (us a step on this machine). Not part of the package: its SpS figure enters
engines/transformers/4.37.1.yaml (speculative_host.draft_model.per_request_us) with this file named as its source.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

NOW = time.thread_time_ns  # the thread's CPU time: other processes on the machine's shared cores do not count
TORCH_LIBS = ("libtorch", "libc10", "libgomp", "libmkl", "libsleef", "libopenblas", "libiomp", "libshm")


# calls that launch no kernel: metadata reads and views (the calibration counts neither as a call, its host time
# a call includes them); an index with a tensor or a list gathers (a kernel), with ints and slices it is a view
NO_KERNEL = {"size", "dim", "numel", "stride", "storage_offset", "is_contiguous", "data_ptr", "element_size",
             "view", "view_as", "unsqueeze", "squeeze", "transpose", "permute", "expand", "expand_as", "narrow", "t",
             "select", "unfold", "as_strided", "split", "chunk", "unbind", "__len__", "__iter__", "__hash__",
             "__format__", "__bool__", "__index__", "__int__", "__float__", "__contains__",
             "requires_grad_", "detach", "__get__", "__set__", "__torch_function__", "_is_view", "has_names"}


def launches(func, args) -> bool:
    """Whether a top-level PyTorch call runs a kernel (the per-call rule's unit)."""
    name = getattr(func, "__name__", "")
    if name == "__getitem__":
        torch = sys.modules.get("torch")  # no tensor without it
        gathers = (list,) + ((torch.Tensor,) if torch is not None else ())
        index = args[1] if len(args) > 1 else None
        index = index if isinstance(index, tuple) else (index,)
        return any(isinstance(i, gathers) for i in index)
    return name not in NO_KERNEL


def kernel_counter(box):
    """A TorchFunctionMode counting the top-level PyTorch calls that run a kernel, by region."""
    from torch.overrides import TorchFunctionMode

    class KernelCounter(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.kernels = {"loop": 0, "forward": 0}

        def __torch_function__(self, func, types_, args=(), kwargs=None):
            if launches(func, args):
                self.kernels["forward" if box[1] else "loop"] += 1
            return func(*args, **(kwargs or {}))
    return KernelCounter()


def as_forward(module, box):
    """Marks a module's forward as a model pass (box[1]: depth of passes); the signature is kept (transformers'
    generate() inspects it). The frame name _model_forward marks its samples."""
    inner = module.forward

    @functools.wraps(inner)
    def _model_forward(*args, **kwargs):
        box[1] += 1
        try:
            return inner(*args, **kwargs)
        finally:
            box[1] -= 1
    module.forward = _model_forward


def short_request(run, n):
    return run(n)


def long_request(run, n):
    return run(n)


def worker(name: str, steps: int, repeats: int):
    """Runs one method: counts its kernels, then times `repeats` requests of n and of 2n tokens (under py-spy)."""
    import specbench_runners
    run, modules = specbench_runners.RUNNERS[name]()
    box = [None, 0]
    for m in modules:
        as_forward(m, box)
    run(steps)  # warm-up
    counts = {}
    for label, n in (("short", steps), ("long", 2 * steps)):
        counter = kernel_counter(box)
        with counter:
            counts[label] = (run(n), dict(counter.kernels))
    times = {"short": [], "long": []}
    for _ in range(repeats):
        for label, fn, n in (("short", short_request, steps), ("long", long_request, 2 * steps)):
            start = NOW()
            fn(run, n)
            times[label].append((NOW() - start) / 1e3)
    print(json.dumps({"counts": counts, "times": {k: min(v) for k, v in times.items()}}))


def classify(stack: str):
    """(request, region, inside torch) of a py-spy sample, or None outside the timed requests."""
    frames = stack.split(";")
    request = next((r for r in ("short", "long") if any(f"{r}_request " in f for f in frames)), None)
    if request is None:
        return None
    region = "forward" if any("_model_forward " in f for f in frames) else "loop"
    python = [i for i, f in enumerate(frames) if re.search(r"\.py:\d+\)", f)]
    deep = python[-1]
    inside = (re.search(r"\(torch/", frames[deep]) is not None
              or any(any(lib in f for lib in TORCH_LIBS) for f in frames[deep + 1:]))
    return request, region, inside


def measure(name: str, args) -> dict:
    """One method's row: py-spy's shares of each request's samples applied to its thread time."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw.txt")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--steps", str(args.steps),
               "--repeats", str(args.repeats), "--specbench", args.specbench, "--layers", str(args.layers),
               "--vocab", str(args.vocab), "--hidden", str(args.hidden)]
        out = subprocess.run([args.py_spy, "record", "--native", "--rate", str(args.rate), "--format", "raw",
                              "-o", raw, "--"] + cmd, capture_output=True, text=True, check=True).stdout
        result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
        if args.raw_dir:
            os.makedirs(args.raw_dir, exist_ok=True)
            shutil.copy(raw, os.path.join(args.raw_dir, f"{name}_L{args.layers}_V{args.vocab}.txt"))
        samples = {}
        for line in open(raw):
            stack, count = line.rstrip().rsplit(" ", 1)
            key = classify(stack)
            if key is not None:
                samples[key] = samples.get(key, 0) + int(count)
    (n1, k1), (n2, k2) = result["counts"]["short"], result["counts"]["long"]
    row = {"steps": n2 - n1}
    for label in ("short", "long"):
        total = sum(v for (r, _, _), v in samples.items() if r == label)
        for region in ("loop", "forward"):
            share = samples.get((label, region, False), 0) / total
            row[f"{label}_{region}"] = share * result["times"][label]
    for region in ("loop", "forward"):
        row[f"{region}_python"] = (row.pop(f"long_{region}") - row.pop(f"short_{region}")) / (n2 - n1)
        row[f"{region}_kernels"] = (k2[region] - k1[region]) / (n2 - n1)
    row["step_us"] = (result["times"]["long"] - result["times"]["short"]) / (n2 - n1)
    row["python"] = row["loop_python"] + row["forward_python"]
    row["kernels"] = row["loop_kernels"] + row["forward_kernels"]
    row["python_a_kernel"] = row["python"] / row["kernels"]
    return {k: round(v, 2) for k, v in row.items()}


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import specbench_runners
    import torch
    parser = argparse.ArgumentParser()
    specbench_runners.add_flags(parser, 30, "baseline,pld,sps,eagle2,eagle2_30,eagle,medusa")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rate", type=int, default=400, help="py-spy's samples a second")
    parser.add_argument("--layers", type=int, default=2, help="the target's layers (the draft models keep theirs)")
    parser.add_argument("--py-spy", default=os.path.join(os.path.dirname(sys.executable), "py-spy"))
    parser.add_argument("--raw-dir", help="keep py-spy's raw samples here, one file a method")
    parser.add_argument("--worker")
    args = parser.parse_args()
    specbench_runners.configure(args, args.layers)
    torch.manual_seed(0)
    if args.worker:
        return worker(args.worker, args.steps, args.repeats)
    rows = {name: measure(name, args) for name in args.methods.split(",")}
    per_kernel = rows["baseline"]["python_a_kernel"] if "baseline" in rows else 0.0
    for name, row in rows.items():
        row["excess_us"] = round(row["python"] - per_kernel * row["kernels"], 1)
        print(json.dumps({"method": name, **row}), flush=True)


if __name__ == "__main__":
    main()
