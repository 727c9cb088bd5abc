"""Counts the eager PyTorch calls of a decode step by running the code, by one rule for the calibration and for
every Spec-Bench method: a call is a top-level PyTorch call from Python (a TorchFunctionMode sees it; calls that
PyTorch's own Python makes inside it are not seen) that writes memory: not a metadata read nor a named view
(tools/specbench_python_host.py launches(): its NO_KERNEL names; an index with ints and slices is a view, with a
tensor or a list a gather), and, unless in place (a trailing _, __i*__, __setitem__, out=), not one whose every
output aliases an input's storage (a reshape or flatten that is a view, a .to / .float / .contiguous that is a
no-op). Module calls are not calls, the PyTorch calls in their forwards are. The calibration's hand rule ("views,
reshapes and module calls are part of each call's host time"). The models run in float16 (Spec-Bench's dtype;
gpt-fast's run is bf16) so the casts a GPU run makes are made here.

  gptfast   pytorch-labs/gpt-fast (commit 3bcaaaf) generate.py decode_n_tokens with model.py's Transformer (tiny
            random weights, top_k 200, temperature 0.8): 1,561 a token (34 + 14 a layer, 25), the calibration run's
            count (its hand count was 1,593: 35 + 14, the no-op contiguous a layer counted)
  methods   Spec-Bench's loops (hemingkx/Spec-Bench fd2c1cd, transformers 4.37.1) through tools/specbench_runners.py,
            weights marked CUDA by tools/specbench_syncs.py's mode (so `device.type == "cuda"` paths are taken),
            every draft accepted (--accept) or none

Each count is a request of 2n tokens less one of n over the steps between them (prefill and setup cancel), at two
target depths (--layers a,b): the difference is a layer's calls, the rest the pass's and the loop's.

    /tmp/sbv/bin/python tools/specbench_calls.py --gptfast /tmp/gptfast --specbench /tmp/specbench [--names]

Prints a JSON line a method. Not part of the package: its counts enter engines/transformers/4.37.1.yaml and
scenarios/measured/runs/gpt_fast_eager_a100.yaml with this file named.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys


def counted(func, name: str, out, args, kwargs) -> bool:
    """The rule above: a top-level call that launches (not a metadata read nor a named view) and, unless in place,
    has an output that does not alias an input's storage."""
    from specbench_python_host import launches
    return launches(func, args) and (in_place(name, kwargs) or not aliases(out, args, kwargs))


def call_counter(box):
    """A TorchFunctionMode counting calls by the rule above, by region (forward: inside a marked model pass) and
    name. Entered innermost, it sees the code's own calls before any other mode."""
    from torch.overrides import TorchFunctionMode

    class Calls(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.counts = collections.Counter()

        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = getattr(func, "__name__", "?")
            if counted(func, name, out, args, kwargs):
                region = "forward" if box[1] else "loop"
                self.counts[region] += 1
                self.counts[f"{region}:{name}"] += 1
            return out
    return Calls()


def in_place(name: str, kwargs) -> bool:
    return (name.endswith("_") and not name.startswith("__")) or name.startswith("__i") or \
        name == "__setitem__" or kwargs.get("out") is not None


def _tensors(x):
    import torch
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def aliases(out, args, kwargs) -> bool:
    """Whether every tensor output shares storage with an input (a view or the input itself: no kernel)."""
    outs = list(_tensors(out))
    if not outs:
        return False
    storages = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs)) if t.numel()}
    return all(t.numel() and t.untyped_storage().data_ptr() in storages for t in outs)


def per_step(short: dict, long: dict, steps: int) -> dict:
    return {k: round((long.get(k, 0) - short.get(k, 0)) / steps, 2) for k in sorted(set(short) | set(long))
            if long.get(k, 0) != short.get(k, 0)}


GPTFAST_MODULES = ("model", "generate", "tp")  # gpt-fast's top-level modules generate.py imports


def gptfast_modules(path: str):
    """gpt-fast's generate and model modules, imported from `path` without leaving them in sys.modules: its model.py
    and Spec-Bench's model/ package share the top-level name `model`, so a method run after gpt-fast (or before it)
    imports its own."""
    import importlib
    saved = {name: sys.modules.pop(name) for name in GPTFAST_MODULES if name in sys.modules}
    sys.path.insert(0, path)
    try:
        return importlib.import_module("generate"), importlib.import_module("model")
    finally:
        sys.path.remove(path)
        for name in GPTFAST_MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def gptfast_model(path: str, layers: int):
    """(generate module, tiny bf16 Llama-shaped Transformer of `layers` with its caches set up, a 5-token prompt)."""
    import torch
    generate, gf = gptfast_modules(path)
    torch.manual_seed(0)
    args = gf.ModelArgs(block_size=512, n_layer=layers, n_head=4, dim=64, intermediate_size=128, vocab_size=1000)
    m = gf.Transformer(args).eval()
    with torch.device("cpu"):
        m.setup_caches(max_batch_size=1, max_seq_length=512)
    for c in m.modules():  # the calibration's run is bf16 (the KV caches already are)
        c.to(torch.bfloat16)
    return generate, m, torch.randint(0, 1000, (5,))


def gptfast_counts(path: str, layers: int, steps: int) -> dict:
    """A decode token's calls in gpt-fast's eager loop (decode_n_tokens), tiny Llama-shaped model of `layers`."""
    import torch
    generate, m, prompt = gptfast_model(path, layers)
    box = [None, 0]
    out = {}
    with torch.no_grad():
        for n in (steps, 2 * steps):
            pos = torch.arange(0, 5)
            tok = generate.prefill(m, prompt.view(1, -1), pos, temperature=0.8, top_k=200)
            pos = torch.tensor([5], dtype=torch.int)
            counter = call_counter(box)
            with counter:
                generate.decode_n_tokens(m, tok.view(1, -1), pos, n, temperature=0.8, top_k=200)
            out[n] = dict(counter.counts)
    return per_step(out[steps], out[2 * steps], steps)


def method_counts(name: str, steps: int, accept: bool) -> dict:
    """A step's calls in one Spec-Bench method's loop (tools/specbench_runners.py), weights marked CUDA."""
    import specbench_runners
    import specbench_syncs
    from specbench_python_host import as_forward
    prompt = specbench_runners.prompt
    specbench_runners.prompt = lambda *a, **k: specbench_syncs.mark_tensor(prompt(*a, **k))
    try:
        run, modules = specbench_runners.RUNNERS[name]()
    finally:
        specbench_runners.prompt = prompt
    box = [None, 0]
    for m in modules:
        as_forward(m, box)
    import torch
    for m in modules:
        m.to(torch.float16)
    specbench_syncs.mark_modules([sub for m in modules for sub in m.modules()])
    if accept:
        specbench_syncs.accept_all(modules, specbench_runners.VOCAB)
    marks, reads, _ = specbench_syncs.counters(box, [])
    with marks:
        run(steps)
    out = {}
    for n in (steps, 2 * steps):
        counter = call_counter(box)
        with marks, counter:
            done = run(n)
        out[n] = (done, dict(counter.counts))
    (n1, c1), (n2, c2) = out[steps], out[2 * steps]
    return {"steps": n2 - n1, "tokens_a_step": round(steps / (n2 - n1), 2), **per_step(c1, c2, n2 - n1)}


def split(low: dict, high: dict, la: int, lb: int, names: bool) -> dict:
    """Calls a step as pass-and-loop + a layer's, from the counts at two depths."""
    row = {}
    for region in ("loop", "forward"):
        a, b = low.get(region, 0), high.get(region, 0)
        per_layer = (b - a) / (lb - la)
        row[f"{region}_per_layer"] = round(per_layer, 2)
        row[f"{region}_fixed"] = round(a - per_layer * la, 2)
    row["total_at"] = {la: round(low.get("loop", 0) + low.get("forward", 0), 2),
                       lb: round(high.get("loop", 0) + high.get("forward", 0), 2)}
    if names:
        row["names_at"] = {la: {k: v for k, v in low.items() if ":" in k},
                           lb: {k: v for k, v in high.items() if ":" in k}}
    return row


def add_flags(parser, steps: int, methods: str, layers: str) -> None:
    """The flags both tools (this and tools/specbench_call_cost.py) take: tools/specbench_runners.py's, gpt-fast's
    folder, the two target depths."""
    import specbench_runners
    specbench_runners.add_flags(parser, steps, methods)
    parser.add_argument("--gptfast", default="/tmp/gptfast")
    parser.add_argument("--layers", default=layers, help="two target depths")


def at_depths(args, measure) -> tuple[int, int, dict]:
    """(a, b, {depth: measure(depth)}) at the two --layers depths, each from seed 0 with the runners' target that deep."""
    import specbench_runners
    import torch
    la, lb = (int(x) for x in args.layers.split(","))
    at = {}
    for layers in (la, lb):
        torch.manual_seed(0)
        specbench_runners.LAYERS = layers
        at[layers] = measure(layers)
    return la, lb, at


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import specbench_runners
    parser = argparse.ArgumentParser()
    add_flags(parser, 10, "gptfast,baseline,pld,sps,eagle2,eagle3,eagle,medusa,hydra,lookahead", "1,2")
    parser.add_argument("--accept", action="store_true", help="every draft accepted (else random weights: none)")
    parser.add_argument("--names", action="store_true", help="the counts by call name")
    args = parser.parse_args()
    specbench_runners.configure(args)
    for name in args.methods.split(","):
        la, lb, counts = at_depths(args, lambda layers: gptfast_counts(args.gptfast, layers, args.steps)
                                   if name == "gptfast" else method_counts(name, args.steps, args.accept))
        meta = {k: v for k, v in counts[lb].items() if k in ("steps", "tokens_a_step")}
        print(json.dumps({"method": name, "accept": args.accept, **meta,
                          **split(counts[la], counts[lb], la, lb, args.names)}), flush=True)


if __name__ == "__main__":
    main()
