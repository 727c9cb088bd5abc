"""The Python API: simulator.run(scenario_or_path, **overrides) -> Result (the run and its no-speculation baseline)."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from ..config import Scenario, load_scenario
from ..engine import Machine
from ..engine.deployment import instance_gpus, instance_machines, shared_links, simulate_deployment
from .deployment import deployment_report, summarize_servers
from .derived import allreduce_choice, breakeven_accept_len, collectives_per_pass, expected_accept_len, policy_summary, what_if
from .summary import Result, accept_histogram, accept_windows, load_metrics, breakdown_per_token, _stats_ms
from ..model.cost import PassShape
from .planner import planner_figures
from .provenance import describe, provenance
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
    machines = instance_machines(scenario)
    fidelity = scenario.spec.fidelity
    speculating = scenario.spec.speculation.method != "none"
    main = summarize_servers(simulate_deployment(scenario, machines, fidelity=fidelity, speculate=True))
    base = summarize_servers(simulate_deployment(scenario, machines, fidelity=fidelity, speculate=False)) \
        if (baseline and speculating) else main
    shared = shared_links(machines)
    # where instances share links, the link fidelity's figure has contention in it: layer fidelity gives the one without
    layer = summarize_servers(simulate_deployment(scenario, machines, fidelity="layer")) \
        if shared and fidelity == "link" else None
    result = build_result(scenario, machines[0], main, base, time.perf_counter() - started)
    return replace(result, deployment=deployment_report(scenario, main, instance_gpus(scenario), shared, layer))


def _step_ms(main, base) -> dict:
    steps, spec_mask, decode_mask = main.steps, main.spec_steps, main.decode_steps
    return {
        "decode": _stats_ms(steps["duration_us"][decode_mask]),
        "verify": _stats_ms(steps["pass_us"][spec_mask]),
        "draft": _stats_ms(steps["draft_us"][spec_mask]),
        "step": _stats_ms(steps["duration_us"][spec_mask]),
        "baseline_decode": _stats_ms(base.steps["duration_us"][base.decode_steps]),
    }


def _allreduce_ms(main) -> dict:
    out = {}
    for name, mask in (("verify", main.spec_steps), ("decode", main.decode_steps)):
        if mask.any():
            out[name] = {"rank_mean": float(main.steps["allreduce_only"][mask].mean()) / 1e3,
                         "profiled_rank": float(main.steps["allreduce_profile"][mask].mean()) / 1e3,
                         "transfer": float(main.steps["allreduce_transfer"][mask].mean()) / 1e3,
                         "wait": float(main.steps["allreduce_wait"][mask].mean()) / 1e3}
    return out


def build_result(scenario: Scenario, machine: Machine, main, base, wall_s: float) -> Result:
    """The Result of a run and its baseline (the run's drafters come with it: main.slots)."""
    spec = scenario.spec
    lengths = main.accept_lengths
    load = load_metrics(main, spec.workload.target)
    baseline_load = load if base is main else load_metrics(base, spec.workload.target)
    target_plan = machine.plan("target", PassShape(1, 1, int(mean_length(spec.workload.prompt_tokens))),
                               spec.runtime.cuda_graph_decode)
    return Result(
        scenario=spec.name, fidelity=spec.fidelity, seed=spec.seed,
        throughput_tok_s=main.throughput_tok_s, baseline_tok_s=base.throughput_tok_s,
        speedup=main.throughput_tok_s / base.throughput_tok_s if base.throughput_tok_s else float("nan"),
        mean_accept_len=float(lengths.mean()) if lengths.size else 1.0,
        accept_len_hist=accept_histogram(lengths),
        step_ms=_step_ms(main, base),
        breakdown_ms_per_token=breakdown_per_token(main),
        allreduce_per_pass=target_plan.num_allreduces,
        allreduce_ms_per_pass=_allreduce_ms(main),
        breakeven_accept_len=breakeven_accept_len(machine, scenario, main),
        tokens=main.tokens, sim_time_s=main.sim_time_us / 1e6, wall_time_s=wall_s,
        tpot_ms=(load["tpot_ms"] or {}).get("mean", 0.0),
        ttft_ms=(load["ttft_ms"] or {}).get("mean", 0.0),
        allreduce_choice=allreduce_choice(scenario, machine, main.slots),
        speculation={"method": spec.speculation.method, "draft_tokens": spec.speculation.draft_tokens,
                     "verify": spec.speculation.verify,
                     "expected_accept_len": expected_accept_len(scenario, main.slots)},
        description=describe(scenario),
        graph_verify=spec.runtime.cuda_graph_verify,
        eager_verify=not spec.runtime.cuda_graph_verify,
        accept_len_windows=accept_windows(main.accept_lengths, main.accept_positions),
        policy=policy_summary(spec, main),
        what_if=what_if(scenario, machine, main, base, main.slots),
        load=load,
        baseline_load=baseline_load,
        planner=planner_figures(scenario, main.throughput_tok_s, base.throughput_tok_s, load, baseline_load),
        kernels=kernel_report(scenario, machine, main.slots),
        provenance=provenance(scenario),
        collectives=collectives_per_pass(scenario, machine),
        run=main,
        baseline=base,
    )


def kernel_report(scenario: Scenario, machine: Machine, slots) -> dict:
    """Which source times each kernel family, over the decode and verify passes (and the drafters' passes) at the
    scenario's prompt length."""
    from dataclasses import replace

    from ..engine.stepspec import verify_pass

    context = int(mean_length(scenario.spec.workload.prompt_tokens))
    shapes = [PassShape(1, 1, context)]
    if slots:
        shapes.append(replace(verify_pass(slots[0].tree, 1, False).shape, context=context))
    kernels = []
    for part in machine.cards:
        split = machine.split if part == "target" else replace(machine.split, pp=1)
        for shape in shapes:
            layout = machine.layout(part, shape, split)  # pass_layout of the part's card, memoised
            kernels += [k for segment in layout.segments for k in segment.kernels]
    return machine.kernels.report(kernels)
