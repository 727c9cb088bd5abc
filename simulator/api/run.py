"""The Python API: simulator.run(scenario_or_path, **overrides) -> Result (the run and its no-speculation baseline);
run_figures(scenario, names): a few of its figures, computing only those (a sweep point keeps a handful)."""
from __future__ import annotations

import time
from dataclasses import replace
from functools import cached_property
from typing import Any, Callable, Iterable

from ..cache import holding
from ..config import Scenario, load_scenario
from ..config.errors import ConfigError
from ..timing.machine import Machine
from ..serving.deployment import instance_gpus, instance_machines, shared_links, simulate_deployment
from ..results.deployment import deployment_report, summarize_servers
from ..results.derived import allreduce_choice, breakeven_accept_len, collectives_per_pass, expected_accept_len, policy_summary, what_if
from ..results.sections import AllreduceMs, KernelSources, LoadFigures, SpeculationFigures, StepTimesMs, json_of
from ..results.summary import Result, accept_histogram, accept_windows, load_metrics, breakdown_per_token, _stats_ms
from ..model.cost import PassShape
from ..results.planner import planner_figures
from ..results.provenance import describe, provenance
from ..config.typical import mean_length


def resolve(scenario_or_path: Scenario | str, overrides: dict[str, Any] | None = None,
            set_args: list[str] | str | None = None) -> Scenario:
    """A Scenario from a path or object, with dotted overrides (kwargs use '__' for '.'); set_args: --set texts,
    one string being one override."""
    pairs = [(_dotted(k), v) for k, v in (overrides or {}).items()]
    if isinstance(set_args, str):
        set_args = [set_args]
    elif set_args is not None and (not isinstance(set_args, (list, tuple)) or
                                   not all(isinstance(s, str) for s in set_args)):
        raise ConfigError("simulator.run", "set_args", f"{set_args!r} is not a list of 'dotted.path=value' texts",
                          "a list of strings such as ['seed=1'], or one such string")
    if isinstance(scenario_or_path, Scenario):
        scenario = scenario_or_path
        if set_args:
            from ..config import parse_override
            pairs = [parse_override(s) for s in set_args] + pairs
        return scenario.with_overrides(dict(pairs)) if pairs else scenario
    return load_scenario(str(scenario_or_path), list(set_args or []) + pairs)


def _dotted(key: str) -> str:
    """A keyword's dotted path (workload__requests -> workload.requests); an empty part (seed__, a____b) is refused."""
    path = key.replace("__", ".")
    if any(not part for part in path.split(".")):
        raise ConfigError("simulator.run", key, "an override keyword with an empty part",
                          "names joined by '__', e.g. workload__requests=4 or seed=1")
    return path


@holding  # the run's store, unless its caller holds one (a sweep worker, bench)
def run(scenario_or_path: Scenario | str, *, set_args: list[str] | str | None = None, baseline: bool = True,
        max_work: float | None = None, max_memory_GB: float | None = None, steps_log: str | None = None,
        **overrides: Any) -> Result:
    """Simulate a scenario and, unless told not to, the same machine with speculation off (same seed).
    steps_log: a CSV path, written as the speculative run goes (results.stepslog: every step, one row each).

    Refused before any simulation, as on the command line: an estimated work above max_work (default
    limits.MAX_WORK) or peak memory above max_memory_GB (default limits.MAX_MEMORY_GB)."""
    from ..results.limits import check_work

    started = time.perf_counter()
    scenario = resolve(scenario_or_path, overrides, set_args)
    check_work(scenario, max_work, runs=runs_kept(scenario, baseline), flag="max_work", memory_GB=max_memory_GB,
               where="simulator.run", memory_flag="max_memory_GB")
    parts = Parts(scenario, baseline, started, steps_log)
    values = {name: figure(parts) for name, figure in FIGURES.items()}
    return Result(**values, run=parts.main, baseline=parts.base)


def runs_kept(scenario: Scenario, baseline: bool = True) -> int:
    """Simulations a run holds at once: the run, and its baseline unless there is none (or speculation is off: the
    run is its own baseline)."""
    return 2 if baseline and scenario.spec.speculation.method != "none" else 1


@holding
def run_figures(scenario: Scenario, names: Iterable[str]) -> dict[str, Any]:
    """The named top-level figures of run(scenario).to_dict() (the same values), computing only those: the
    simulation evaluates its breakdown only where a figure reads it. Unknown names are left out."""
    parts = Parts(scenario, True, time.perf_counter())
    return {name: json_of(FIGURES[name](parts)) for name in dict.fromkeys(names) if name in FIGURES}


# Prefill families' Latin hypercubes (timing.sampling) kept past a run up to this many bytes: a bound, not a fitted
# figure. A deployment draws its own per instance seed and prompt length (128 TP1 replicas at 100K requests: ~150 MB)
# and no figure reads them after the runs; a single run's few stay for the next run of a sweep or bench.
HYPERCUBE_KEEP_BYTES = 32 << 20


def forget_hypercubes() -> None:
    """Once a run and its baseline are done: forget the stored hypercubes above HYPERCUBE_KEEP_BYTES and return
    their pages (a figure that draws again recomputes the same values: each is seeded by its family alone)."""
    from ..cache import current

    current().forget_above("sampling.hypercube", HYPERCUBE_KEEP_BYTES)


class Parts:
    """A run's simulations (the run, its baseline) and the intermediate figures several results share, each
    computed when first asked for."""

    def __init__(self, scenario: Scenario, baseline: bool, started: float, steps_log: str | None = None):
        self.started = started
        self.scenario, self.spec = scenario, scenario.spec
        self.machines = instance_machines(scenario)
        self.machine = self.machines[0]
        fidelity = self.spec.fidelity
        writer = None
        if steps_log is not None:
            from ..results.stepslog import StepsLogWriter
            writer = StepsLogWriter(steps_log, scenario)
        try:
            servers = simulate_deployment(scenario, self.machines, fidelity=fidelity, speculate=True,
                                          sinks=writer.sink if writer else None)
            for server in servers:
                server.log.flush()  # the last steps to the sink
        except BaseException as error:
            if writer:
                writer.close(error)
            raise
        if writer:
            writer.close()
        self.main = summarize_servers(servers)
        del servers
        self.base = summarize_servers(simulate_deployment(scenario, self.machines, fidelity=fidelity,
                                                          speculate=False)) \
            if (baseline and self.spec.speculation.method != "none") else self.main
        forget_hypercubes()

    @cached_property
    def load(self) -> LoadFigures:
        return load_metrics(self.main, self.spec.workload.target, self.spec.workload.max_concurrency)

    @cached_property
    def baseline_load(self) -> LoadFigures:
        return self.load if self.base is self.main else load_metrics(self.base, self.spec.workload.target, self.spec.workload.max_concurrency)

    def deployment(self) -> dict:
        """The instances and their figures; where instances share links, the link fidelity's figure has contention
        in it: layer fidelity gives the one without."""
        shared = shared_links(self.machines)
        layer = summarize_servers(simulate_deployment(self.scenario, self.machines, fidelity="layer")) \
            if shared and self.spec.fidelity == "link" else None
        return deployment_report(self.scenario, self.main, instance_gpus(self.scenario), shared, layer)


def _step_ms(main, base) -> StepTimesMs:
    steps, spec_mask, decode_mask = main.steps, main.spec_steps, main.decode_steps
    return StepTimesMs(decode=_stats_ms(steps.at("duration_us", decode_mask)),
                       verify=_stats_ms(steps.at("pass_us", spec_mask)),
                       draft=_stats_ms(steps.at("draft_us", spec_mask)),
                       step=_stats_ms(steps.at("duration_us", spec_mask)),
                       baseline_decode=_stats_ms(base.steps.at("duration_us", base.decode_steps)))


def _allreduce_ms(main) -> dict[str, AllreduceMs]:
    out = {}
    for name, mask in (("verify", main.spec_steps), ("decode", main.decode_steps)):
        if mask.any():
            out[name] = AllreduceMs(rank_mean=float(main.steps.at("allreduce_only", mask).mean()) / 1e3,
                                    profiled_rank=float(main.steps.at("allreduce_profile", mask).mean()) / 1e3,
                                    transfer=float(main.steps.at("allreduce_transfer", mask).mean()) / 1e3,
                                    wait=float(main.steps.at("allreduce_wait", mask).mean()) / 1e3)
    return out


def _allreduce_per_pass(p: Parts) -> int:
    prompt = int(mean_length(p.spec.workload.prompt_tokens))
    return p.machine.plan("target", PassShape(1, 1, prompt), p.spec.runtime.cuda_graph_decode).num_allreduces


def _speedup(p: Parts) -> float:
    base = p.base.throughput_tok_s
    return p.main.throughput_tok_s / base if base else float("nan")


# Result's figures in its field order, each from the run's Parts (run and run_figures share them: the same values)
FIGURES: dict[str, Callable[[Parts], Any]] = {
    "scenario": lambda p: p.spec.name,
    "fidelity": lambda p: p.spec.fidelity,
    "seed": lambda p: p.spec.seed,
    "throughput_tok_s": lambda p: p.main.throughput_tok_s,
    "baseline_tok_s": lambda p: p.base.throughput_tok_s,
    "speedup": _speedup,
    "tpot_ms": lambda p: p.load.tpot_ms.mean if p.load.tpot_ms else 0.0,
    "ttft_ms": lambda p: p.load.ttft_ms.mean if p.load.ttft_ms else 0.0,
    "mean_accept_len": lambda p: float(p.main.accept_lengths.mean()) if p.main.accept_lengths.size else 1.0,
    "accept_len_hist": lambda p: accept_histogram(p.main.accept_lengths),
    "step_ms": lambda p: _step_ms(p.main, p.base),
    "breakdown_ms_per_token": lambda p: breakdown_per_token(p.main),
    "allreduce_per_pass": _allreduce_per_pass,
    "allreduce_ms_per_pass": lambda p: _allreduce_ms(p.main),
    "breakeven_accept_len": lambda p: breakeven_accept_len(p.machine, p.scenario, p.main),
    "sim_time_s": lambda p: p.main.sim_time_us / 1e6,
    "wall_time_s": lambda p: time.perf_counter() - p.started,
    "tokens": lambda p: p.main.tokens,
    "allreduce_choice": lambda p: allreduce_choice(p.scenario, p.machine, p.main.slots),
    "speculation": lambda p: SpeculationFigures(p.spec.speculation.method, p.spec.speculation.draft_tokens,
                                                p.spec.speculation.verify, expected_accept_len(p.scenario, p.main.slots)),
    "description": lambda p: describe(p.scenario),
    "graph_verify": lambda p: p.spec.runtime.cuda_graph_verify,
    "eager_verify": lambda p: not p.spec.runtime.cuda_graph_verify,
    "accept_len_windows": lambda p: accept_windows(p.main.accept_lengths, p.main.accept_positions),
    "policy": lambda p: policy_summary(p.spec, p.main),
    "what_if": lambda p: what_if(p.scenario, p.machine, p.main, p.base, p.main.slots),
    "load": lambda p: p.load,
    "baseline_load": lambda p: p.baseline_load,
    "planner": lambda p: planner_figures(p.scenario, p.main.throughput_tok_s, p.base.throughput_tok_s, p.load,
                                         p.baseline_load),
    "kernels": lambda p: kernel_report(p.scenario, p.machine, p.main.slots),
    "provenance": lambda p: provenance(p.scenario),
    "collectives": lambda p: collectives_per_pass(p.scenario, p.machine),
    "deployment": Parts.deployment,
}


def kernel_report(scenario: Scenario, machine: Machine, slots) -> KernelSources:
    """Which source times each kernel family, over the decode and verify passes (and the drafters' passes) at the
    scenario's prompt length."""
    from ..timing.stepspec import verify_pass

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
    return KernelSources(**machine.kernels.report(kernels))
