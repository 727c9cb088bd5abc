"""One decode pass op by op: the simulator's kernels of a scenario's plain decode pass, and aiconfigurator-core's
static generation estimate of the same deployment, so the two can be read side by side (docs/validation.md, the
DeepSeek-R1 on 8 x B200 item, quotes both).

    python tools/step_ops.py specsim SCENARIO [--context 2048] [--set dotted.path=value ...]
    python tools/step_ops.py aiconfigurator [--model deepseek-ai/DeepSeek-R1] [--tp 8 --moe-tp 2 --moe-ep 4]
                                            [--isl 1024 --osl 2048] [--distribution power_law]

specsim: per segment (each as often as the pass runs it), each heavy kernel's time on rank 0 in a CUDA graph and
whether a measured table timed it, then the segment's element-wise launches; the sum is kernel time only (no graph
node gaps, no collectives). aiconfigurator: its generation ops (bf16 GEMMs and KV cache, NVFP4 MoE, TensorRT-LLM
1.3.0rc20's B200 tables as the defaults say), each leaf inside its overlap / fallback groups queried alone at batch 1
and the cache length isl + osl / 2, per layer (its scale factor), then its whole static step per token. Needs
aiconfigurator-core (`.[measured]`). Not part of the package.
"""
from __future__ import annotations

import argparse
import sys


def specsim_ops(scenario: str, context: int, overrides: list[str]) -> None:
    from simulator.config.loader import load_scenario
    from simulator.timing.machine import Machine
    from simulator.timing.stepspec import PassShape

    machine = Machine(load_scenario(scenario, [*overrides, "speculation.method=none"]))
    layout = machine.layout("target", PassShape(1, 1, context), machine.split)
    total = 0.0
    for i, segment in enumerate(layout.segments):
        times = machine.kernels.segment(segment, graph=True)
        runs = sum(1 for j in layout.order if j == i)
        print(f"segment {i} x{runs}: {times.compute_us + times.memory_us:.2f} us "
              f"({segment.small_kernels} element-wise at {times.small_us:.2f} us)")
        for kernel, t in zip(segment.kernels, times.kernel_us):
            measured = kernel.shape is not None and machine.kernels._covered(kernel.shape)
            print(f"    {kernel.name:28s} {t:8.2f} us  {'measured' if measured else 'roofline'}  {kernel.shape}")
        total += runs * (times.compute_us + times.memory_us)
    print(f"kernel time a pass: {total / 1e3:.3f} ms (no node gaps, no collectives)")


def _leaves(op, depth=0):
    """(depth, op) for the op and every op inside its overlap / fallback groups."""
    yield depth, op
    for attr in ("_group_a", "_group_b", "_primary", "_fallback"):
        children = getattr(op, attr, None)
        for child in (children if isinstance(children, (list, tuple)) else [children] if children else []):
            yield from _leaves(child, depth + 1)


def aiconfigurator_ops(args) -> None:
    from aiconfigurator_core.sdk import common, config
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.engine import _evaluate_single_op
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.perf_database import get_database

    model_config = config.ModelConfig(
        tp_size=args.tp, moe_tp_size=args.moe_tp, moe_ep_size=args.moe_ep,
        gemm_quant_mode=common.GEMMQuantMode.bfloat16, moe_quant_mode=common.MoEQuantMode.nvfp4,
        kvcache_quant_mode=common.KVCacheQuantMode.bfloat16, fmha_quant_mode=common.FMHAQuantMode.bfloat16,
        nextn=0, workload_distribution=args.distribution)
    model = get_model(args.model, model_config, "trtllm")
    database = get_database(args.system, "trtllm", args.version)
    s = args.isl + args.osl // 2
    for op in model.generation_ops:
        for depth, leaf in _leaves(op):
            try:
                t = _evaluate_single_op(database, leaf, is_context=False, batch_size=1, s=s, prefix=0, x=1,
                                        imbalance_correction_scale=1.0)
                t = float(getattr(t, "latency", t)) * 1e3
                n = leaf._scale_factor if hasattr(leaf, "_scale_factor") else 1.0
                shown = f"{t / n:8.2f} us x {n:g}" if n else f"{t:8.2f} us"
            except (TypeError, ValueError, AttributeError) as error:  # a group: its leaves follow
                shown = f"(group: {str(error)[:40]})"
            print(f"{'    ' * depth}{getattr(leaf, '_name', type(leaf).__name__):40s} {shown}")
    runtime = config.RuntimeConfig(batch_size=1, isl=args.isl, osl=args.osl)
    generation = get_backend("trtllm")._run_static_breakdown(model, database, runtime, "static_gen", stride=32)[2]
    print(f"static generation step: {sum(generation.values()) / (args.osl - 1):.3f} ms a token")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="which", required=True)
    a = sub.add_parser("specsim")
    a.add_argument("scenario")
    a.add_argument("--context", type=int, default=2048)
    a.add_argument("--set", action="append", default=[])
    b = sub.add_parser("aiconfigurator")
    b.add_argument("--model", default="deepseek-ai/DeepSeek-R1")
    b.add_argument("--system", default="b200_sxm")
    b.add_argument("--version", default="1.3.0rc20")
    b.add_argument("--tp", type=int, default=8)
    b.add_argument("--moe-tp", type=int, default=2)
    b.add_argument("--moe-ep", type=int, default=4)
    b.add_argument("--isl", type=int, default=1024)
    b.add_argument("--osl", type=int, default=2048)
    b.add_argument("--distribution", default="power_law")
    args = p.parse_args(argv)
    if args.which == "specsim":
        specsim_ops(args.scenario, args.context, args.set)
    else:
        aiconfigurator_ops(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
