"""The Python API: simulator.run(scenario_or_path, **overrides) -> Result (the run and its no-speculation baseline)."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from ..config import Scenario, load_scenario
from ..engine import Machine, simulate
from .summary import (Result, accept_histogram, accept_windows, load_metrics, breakdown_per_token, mean_step_us, summarize,
                      _stats_ms)
from ..model.cost import PassShape
from ..config.typical import mean_length


def resolve(scenario_or_path: Scenario | str, overrides: dict[str, Any] | None = None,
            set_args: list[str] | None = None) -> Scenario:
    """A Scenario from a path or object, with dotted overrides (kwargs use '__' for '.')."""
    pairs = [(k.replace("__", "."), v) for k, v in (overrides or {}).items()]
    if isinstance(scenario_or_path, Scenario):
        scenario = scenario_or_path
        if set_args:
            from ..config import parse_override
            pairs = [parse_override(s) for s in set_args] + pairs
        return scenario.with_overrides(dict(pairs)) if pairs else scenario
    return load_scenario(str(scenario_or_path), list(set_args or []) + pairs)


def run(scenario_or_path: Scenario | str, *, set_args: list[str] | None = None, baseline: bool = True,
        **overrides: Any) -> Result:
    """Simulate a scenario and, unless told not to, the same machine with speculation off (same seed)."""
    started = time.perf_counter()
    scenario = resolve(scenario_or_path, overrides, set_args)
    machine = Machine(scenario)
    fidelity = scenario.spec.fidelity
    speculating = scenario.spec.speculation.method != "none"
    main = summarize(simulate(scenario, machine, fidelity=fidelity, speculate=True))
    base = summarize(simulate(scenario, machine, fidelity=fidelity, speculate=False)) if (baseline and speculating) else main
    return build_result(scenario, machine, main, base, time.perf_counter() - started)


def build_result(scenario: Scenario, machine: Machine, main, base, wall_s: float) -> Result:
    spec = scenario.spec
    steps = main.steps
    spec_mask, decode_mask = main.spec_steps, main.decode_steps
    step_ms = {
        "decode": _stats_ms(steps["duration_us"][decode_mask]),
        "verify": _stats_ms(steps["pass_us"][spec_mask]),
        "draft": _stats_ms(steps["draft_us"][spec_mask]),
        "step": _stats_ms(steps["duration_us"][spec_mask]),
        "baseline_decode": _stats_ms(base.steps["duration_us"][base.decode_steps]),
    }
    ar = {}
    for name, mask in (("verify", spec_mask), ("decode", decode_mask)):
        if mask.any():
            ar[name] = {"rank_mean": float(steps["allreduce_only"][mask].mean()) / 1e3,
                        "profiled_rank": float(steps["allreduce_profile"][mask].mean()) / 1e3}
    breakeven = breakeven_accept_len(machine, scenario, main)
    lengths = main.accept_lengths
    load = load_metrics(main, spec.workload.target)
    target_plan = machine.plan("target", PassShape(1, 1, int(mean_length(spec.workload.prompt_tokens))),
                               spec.runtime.cuda_graph_decode)
    choice = allreduce_choice(scenario, machine)
    return Result(
        scenario=spec.name,
        fidelity=spec.fidelity,
        seed=spec.seed,
        throughput_tok_s=main.throughput_tok_s,
        baseline_tok_s=base.throughput_tok_s,
        speedup=main.throughput_tok_s / base.throughput_tok_s if base.throughput_tok_s else float("nan"),
        mean_accept_len=float(lengths.mean()) if lengths.size else 1.0,
        accept_len_hist=accept_histogram(lengths),
        step_ms=step_ms,
        breakdown_ms_per_token=breakdown_per_token(main),
        allreduce_per_pass=target_plan.num_allreduces,
        allreduce_ms_per_pass=ar,
        breakeven_accept_len=breakeven,
        tokens=main.tokens,
        sim_time_s=main.sim_time_us / 1e6,
        wall_time_s=wall_s,
        tpot_ms=(load["tpot_ms"] or {}).get("mean", 0.0),
        ttft_ms=(load["ttft_ms"] or {}).get("mean", 0.0),
        allreduce_choice=choice,
        speculation={"method": spec.speculation.method, "draft_tokens": spec.speculation.draft_tokens,
                     "verify": spec.speculation.verify,
                     "expected_accept_len": _expected(scenario)},
        extra={"description": spec.description, "graph_verify": spec.runtime.cuda_graph_verify,
               "eager_verify": not spec.runtime.cuda_graph_verify,
               "accept_len_windows": accept_windows(main.accept_lengths, main.accept_positions),
               "policy": policy_summary(spec, main),
               "what_if": what_if(scenario, machine, main, base),
               "load": load,
               "baseline_load": load_metrics(base, spec.workload.target)},
        run=main,
        baseline=base,
    )


def allreduce_choice(scenario: Scenario, machine: Machine) -> dict:
    """The all-reduce a layer runs at a plain decode's message size, and at the scenario's verify size."""
    from ..engine.costs import verify_pass
    from ..model.cost import pass_layout
    from ..speculation.setup import build_speculation

    shapes = {"decode": PassShape(1, 1)}
    setup = build_speculation(scenario)
    if setup.slots:
        shapes["verify"] = verify_pass(setup.slots[0].tree, 1, False).shape
    out = {}
    for name, shape in shapes.items():
        layout = pass_layout(scenario.model, machine.tp, shape, scenario.spec.runtime.fuse_allreduce_rmsnorm)
        nbytes = layout.segments[1].collective_bytes  # an attention block's all-reduce
        out[name] = {"bytes": nbytes, **machine.allreduce.cost(nbytes).as_dict()}
    return out


def breakeven_accept_len(machine: Machine, scenario: Scenario, main) -> float | None:
    """Accept length at which speculation matches plain decode: its step time over a plain decode step's at the
    same batch and context (docs/reference.md's accept_len > step_time x baseline_rate, batch by batch).

    Plain-decode step times come from the cost model's memoised samples for each speculative step's batch and
    context, so a batched run compares like with like.
    """
    from ..engine.costs import FastStepCosts, PassSpec, StepSpec, step_overhead_us

    steps = main.steps
    mask = main.spec_steps
    if not mask.any():
        return None
    host = scenario.topology.host
    other = step_overhead_us(host, scenario.spec.runtime, speculating=False)
    planner = FastStepCosts(machine, scenario.spec.seed, np.random.default_rng(0))
    batches = steps["batch"][mask].astype(int)
    contexts = steps["context"][mask].astype(int)
    plain = 0.0
    for batch in np.unique(batches):  # per batch size: the plain step's mean cost, blended over contexts
        spec = StepSpec(PassSpec("target", PassShape(1, int(batch)), scenario.spec.runtime.cuda_graph_decode),
                        other_us=other)
        distinct, counts = np.unique(contexts[batches == batch], return_counts=True)
        for value in (counts * planner.mean_step_us_many(spec, distinct)).tolist():
            plain += value  # in the order of the contexts, as a running sum (the same float every time)
    return float(steps["duration_us"][mask].sum()) / plain


def what_if(scenario: Scenario, machine: Machine, main, base) -> dict:
    """Quick levers for the report: the same step with the verify pass captured in a CUDA graph.

    Uses the layer model's memoised pass samples at the run's mean context; `python -m simulator plan` runs the
    full what-if simulations for every lever.
    """
    from ..engine.costs import step_overhead_us, verify_pass
    from ..speculation.setup import build_speculation

    spec_mask = main.spec_steps
    base_step = mean_step_us(base, base.decode_steps)
    if not spec_mask.any() or not base_step:
        return {}
    slot = build_speculation(scenario).slots[0]
    tree = slot.tree
    work = scenario.spec.workload
    context = int(mean_length(work.prompt_tokens) + mean_length(work.output_tokens) / 2)
    shape = replace(verify_pass(tree, 1, True).shape, context=context)
    out = {}
    if not scenario.spec.runtime.cuda_graph_verify:
        samples = machine.samples("target", shape, True, scenario.spec.seed)
        step = float(samples[:, 0].mean()) + float(main.steps["draft_us"][spec_mask].mean()) + \
            step_overhead_us(scenario.topology.host, scenario.spec.runtime, speculating=True)
        breakeven = step / base_step
        lengths = main.accept_lengths
        accept = float(lengths.mean()) if lengths.size else 1.0
        out["cuda_graph_verify"] = {"verify_ms": float(samples[:, 0].mean()) / 1e3, "breakeven_accept_len": breakeven,
                                    "speedup_at_this_accept_len": accept / breakeven}
    return out


def policy_summary(spec, run) -> dict:
    """How often the policy speculated, and with which drafter."""
    steps = run.steps
    decode_or_spec = steps["kind"] > 0
    n = int(decode_or_spec.sum())
    drafters = steps["drafter"][decode_or_spec]
    names = [spec.speculation.method] + ([spec.policy.fallback.method] if spec.policy.kind == "multi_drafter" else [])
    out = {"kind": spec.policy.kind, "steps": n,
           "speculative_share": float((drafters >= 0).mean()) if n else 0.0}
    if len(names) > 1:
        out["drafter_share"] = {name: float((drafters == i).mean()) for i, name in enumerate(names)}
    return out


def _expected(scenario: Scenario) -> float | None:
    """The acceptance model's analytic tokens per verify for the scenario's own drafter and tree."""
    from ..speculation.setup import build_speculation
    setup = build_speculation(scenario)
    if not setup.slots:
        return None
    slot = setup.slots[0]
    if scenario.spec.speculation.acceptance.kind == "ngram_context":
        return None  # its hit rate depends on the history: no single expectation
    return slot.acceptance.expected_tokens(slot.tree)
