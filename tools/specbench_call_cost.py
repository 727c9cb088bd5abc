"""Host time inside PyTorch a counted call, by method, on this machine's CPU: each Spec-Bench loop (hemingkx/Spec-Bench
fd2c1cd through tools/specbench_runners.py, transformers 4.37.1) and gpt-fast's eager decode (commit 3bcaaaf, the
calibration's run) with every top-level PyTorch call timed where the code makes it (a TorchFunctionMode entered
innermost: the thread's CPU time of the call, what PyTorch's own Python and C++ do inside it included) and counted by
tools/specbench_calls.py's rule (a call that writes memory; views and metadata reads are timed, not counted, as the
calibration's rule folds their time into a counted call's). If the per-call rule (eager_launch_us, one host cost a
counted call, fitted on gpt-fast) holds across the methods, inside_us_a_call is alike in every row; a method whose
calls are heavier on the host (advanced indexing, top-k, cat of lists, tensors from lists) shows it, by name.

On CPU every kernel also runs on the calling thread: the tiny models (width 16, a --vocab of 1,000) keep that part
small, and a CUDA launch's own driver cost (a few us) is not in these figures. A step is a request of 2n tokens less
one of n (prefill and setup cancel); the least of --repeats such pairs, by name.

    /tmp/sbv/bin/python tools/specbench_call_cost.py --specbench /tmp/specbench --gptfast /tmp/gptfast --methods NAME \
        --accept --repeats 7 --steps 20 --vocab 64 --hidden 8 --dtype float32

One method a process (gpt-fast's `model` module shadows Spec-Bench's `model` package). Prints a JSON line. Not part
of the package: its figures (the line above, two runs a method) are quoted in docs/validation.md's Spec-Bench item.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

NOW = time.thread_time_ns


def timer(counted):
    """A TorchFunctionMode timing each top-level call (us of thread CPU time) and counting those `counted` passes."""
    from torch.overrides import TorchFunctionMode

    class Timer(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.us = collections.Counter()
            self.calls = collections.Counter()

        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            start = NOW()
            out = func(*args, **kwargs)
            took = (NOW() - start) / 1e3
            name = getattr(func, "__name__", "?")
            key = name if counted(func, name, out, args, kwargs) else f"({name})"
            self.us[key] += took
            self.calls[key] += 1
            return out
    return Timer()


def step_of(request, steps: int, repeats: int) -> dict:
    """{name: (us, calls) a step}: the least over `repeats` of request(2n) - request(n), by name."""
    from specbench_calls import counted
    best, totals = {}, []
    for _ in range(repeats):
        rows = {}
        for n in (steps, 2 * steps):
            t = timer(counted)
            done = request(n, t)
            rows[n] = (done, t.us, t.calls)
        (n1, u1, c1), (n2, u2, c2) = rows[steps], rows[2 * steps]
        totals.append((sum(u2.values()) - sum(u1.values())) / (n2 - n1))
        for key in set(u1) | set(u2):
            us, calls = (u2[key] - u1[key]) / (n2 - n1), (c2[key] - c1[key]) / (n2 - n1)
            if key not in best or us < best[key][0]:
                best[key] = (us, calls)
    best["(total)"] = (min(totals), 0.0)
    return best


def gptfast_request(path: str, layers: int):
    """gpt-fast's decode_n_tokens (tiny bf16 model, top_k 200, temperature 0.8): request(n, mode) -> n."""
    import torch
    from specbench_calls import gptfast_model
    generate, m, prompt = gptfast_model(path, layers)

    def request(n, mode=None):
        with torch.no_grad():
            tok = generate.prefill(m, prompt.view(1, -1), torch.arange(0, 5), temperature=0.8, top_k=200)
            pos = torch.tensor([5], dtype=torch.int)
            if mode is None:
                generate.decode_n_tokens(m, tok.view(1, -1), pos, n, temperature=0.8, top_k=200)
            else:
                with mode:
                    generate.decode_n_tokens(m, tok.view(1, -1), pos, n, temperature=0.8, top_k=200)
        return n
    return request


def method_request(name: str, accept: bool, dtype: str):
    """One Spec-Bench method (--dtype, every draft accepted with --accept): request(n, mode) -> its steps."""
    import torch
    import specbench_runners
    import specbench_syncs
    run, modules = specbench_runners.RUNNERS[name]()
    for m in modules:
        m.to(getattr(torch, dtype))
    if accept:
        specbench_syncs.accept_all(modules, specbench_runners.VOCAB)

    def request(n, mode=None):
        with torch.no_grad():
            if mode is None:
                return run(n)
            with mode:
                return run(n)
    return request


def summary(rows: dict) -> dict:
    us = rows["(total)"][0]
    calls = sum(c for k, (_, c) in rows.items() if not k.startswith("("))
    return {"inside_us": round(us, 1), "calls": round(calls, 2), "inside_us_a_call": round(us / calls, 2)}


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import specbench_runners
    from specbench_calls import add_flags, at_depths
    parser = argparse.ArgumentParser()
    add_flags(parser, 20, "eagle2", "2,6")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--accept", action="store_true", help="every draft accepted (else random weights: none)")
    parser.add_argument("--dtype", default="float16", help="the Spec-Bench models' dtype")
    parser.add_argument("--top", type=int, default=12, help="names listed, by host time a step")
    args = parser.parse_args()
    specbench_runners.configure(args)
    name = args.methods

    def measure(layers):
        request = (gptfast_request(args.gptfast, layers) if name == "gptfast"
                   else method_request(name, args.accept, args.dtype))
        request(args.steps)  # warm-up
        return step_of(request, args.steps, args.repeats)
    la, lb, at = at_depths(args, measure)
    low, high = summary(at[la]), summary(at[lb])
    layer_us = (high["inside_us"] - low["inside_us"]) / (lb - la)
    layer_calls = (high["calls"] - low["calls"]) / (lb - la)
    rest_us, rest_calls = low["inside_us"] - la * layer_us, low["calls"] - la * layer_calls
    top = sorted(((k, v) for k, v in at[lb].items() if k != "(total)"), key=lambda kv: -kv[1][0])[:args.top]
    print(json.dumps({
        "method": name, "accept": args.accept, "at": {la: low, lb: high},
        "layer": {"calls": round(layer_calls, 2), "us": round(layer_us, 1),
                  "us_a_call": round(layer_us / layer_calls, 2) if layer_calls else None},
        "rest": {"calls": round(rest_calls, 2), "us": round(rest_us, 1),
                 "us_a_call": round(rest_us / rest_calls, 2) if rest_calls else None},
        "top_at_%d" % lb: {k: [round(u, 1), round(c, 2), round(u / c, 2) if c else None] for k, (u, c) in top}}))


if __name__ == "__main__":
    main()
