"""How much an engine's measured kernel tables differ from SGLang 0.5.14's for the decode passes a scenario runs.

For each case: the target's plain-decode pass at batch b and b x L cached tokens (L per request), its kernels with a
shape (GEMM, attention, MLA, MLA bmm, MoE) timed from the engine's tables (runtime.kernel_database, SGLang's where
they lack a shape) and from SGLang 0.5.14's alone; printed per family as the pass's summed time ratio, engine /
SGLang - 1, with the shapes the engine's own tables answered. Needs aiconfigurator-core (`.[measured]`).

    python tools/kernel_tables_diff.py            # the shipped validation cases that run vLLM / TensorRT-LLM
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

CASES = (  # (label, scenario, overrides)
    ("vLLM 0.8.5, Llama-3.1-8B, 1x H100", "scenarios/validation/cases/h100_llama8b_decode.yaml",
     ("engine.name=vllm", "engine.version=0.8.5")),
    ("vLLM 0.8.4, Llama-3.1-70B TP8, 8x H100", "scenarios/validation/cases/h100x8_llama70b_vllm_modelfree.yaml", ()),
    ("TensorRT-LLM 1.0.0, DeepSeek-R1 TP8 EP4, 8x B200", "scenarios/validation/cases/b200_deepseek_r1_mtp.yaml", ()),
    ("TensorRT-LLM 1.0.0, Llama-4-Scout TP8, 8x B200", "scenarios/validation/cases/b200_llama4_scout_ngram.yaml", ()),
)
BATCHES = (1, 4, 16, 64)
CONTEXTS = (1024, 4096, 16384, 32768)


def pass_times(machine, batch: int, context: int, sources) -> dict:
    """{family: [summed us per source, shapes the first source's own engine answered, shapes]} of one decode pass,
    each segment as often as the pass runs it (layout.order)."""
    from simulator.model.cost import PassShape

    layout = machine.layout("target", PassShape(1, batch, batch * context), machine.split)
    out = defaultdict(lambda: [0.0] * len(sources) + [0, 0])
    engine = sources[0].engine
    for segment in (layout.segments[i] for i in layout.order):  # each segment as often as the pass runs it
        for kernel in segment.kernels:
            if kernel.shape is None:
                continue
            times = [s.answer(kernel.shape) for s in sources]
            if any(t is None for t, _ in times):
                continue  # outside the data of either: the roofline times it in both
            row = out[kernel.shape.family]
            for i, (t, _) in enumerate(times):
                row[i] += t
            row[-2] += times[0][1].split()[0] == engine
            row[-1] += 1
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.parse_args(argv)
    from simulator.cache import held
    from simulator.config.loader import load_scenario
    from simulator.kernels.measured import MeasuredKernels
    from simulator.timing.machine import Machine

    with held():
        for label, path, overrides in CASES:
            scenario = load_scenario(path, overrides)
            machine = Machine(scenario)
            tables = scenario.spec.runtime.kernel_database
            system = scenario.topology.gpu.kernel_database
            sources = (MeasuredKernels(system, tables.engine, tables.version), MeasuredKernels(system))
            print(f"## {label}: {sources[0].label} against {sources[1].label}")
            rows = defaultdict(dict)
            for batch in BATCHES:
                for context in CONTEXTS:
                    for family, (own, sglang, answered, shapes) in pass_times(machine, batch, context, sources).items():
                        rows[family][batch, context] = (own / sglang - 1, answered, shapes)
            for family, cells in sorted(rows.items()):
                print(f"  {family}:")
                for (batch, context), (diff, answered, shapes) in sorted(cells.items()):
                    if family in ("gemm", "moe", "mla_bmm") and context != CONTEXTS[0]:
                        continue  # no KV dependence
                    where = "" if family in ("gemm", "moe", "mla_bmm") else f", {context:>6,} cached"
                    print(f"    batch {batch:>3}{where}: {100 * diff:+6.1f}%  ({answered} of {shapes} shapes from "
                          f"{tables.engine}'s own tables)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
