"""A deployment's run as one RunSummary (its instances' steps, requests and accept lengths together, over the
deployment's span), and the per-instance figures the Result reports beside the totals."""
from __future__ import annotations

import numpy as np

from ..config import Scenario
from ..serving.records import StepColumns
from .sections import PercentilesMs, Section
from .summary import RunSummary, _percentiles_ms, summarize


class InstanceFigures(Section):
    """One instance of a deployment: its GPUs and role, requests, tokens, throughput, time waiting for shared links,
    accept length and latency percentiles (TTFT None on a decode instance, TPOT None on a prefill one); a prefill
    instance's prefills per second (absent otherwise)."""

    gpus: list[str]
    role: str
    requests: int
    tokens: int
    throughput_tok_s: float
    sim_time_s: float
    link_delay_ms: float
    mean_accept_len: float
    ttft_ms: PercentilesMs | None
    tpot_ms: PercentilesMs | None
    prefills_per_s: float | None = None

    _optional = ("prefills_per_s",)


class DisaggregationFigures(Section):
    """The KV transfers from the prefill pool to the decode pool: how many, how large, how long, their mean rate."""

    prefill_instances: int
    decode_instances: int
    kv_transfers: int
    kv_MB_per_request: float
    kv_transfer_ms: PercentilesMs | None
    kv_GBps_mean: float


class ContentionFigures(Section):
    """A deployment whose instances share links, at link fidelity and at layer fidelity (nothing shared)."""

    link_tok_s: float
    layer_tok_s: float
    slowdown: float
    link_delay_ms: float


class DeploymentFigures(Section):
    """The instances behind the router, each one's figures, the totals, the links instances share, and where they
    apply, the KV transfers of disaggregation and the contention on shared links (absent otherwise)."""

    instances: int
    router: str
    tp: int
    pp: int
    gpus: int
    total_tok_s: float
    per_instance: dict[str, InstanceFigures]
    shared_links: list[str]
    disaggregation: DisaggregationFigures | None = None
    contention: ContentionFigures | None = None

    _optional = ("disaggregation", "contention")


def summarize_servers(servers: list) -> RunSummary:
    """One server: its summary. Several: the instances together, each instance's own summary in `instances`.

    Throughput is every instance's tokens over the deployment's span (first arrival to last completion); the step
    log is instance 0's steps, then instance 1's, ... (each in its own order, so that two fidelities' logs of the
    same decisions compare step by step).
    """
    if len(servers) == 1:
        return summarize(servers[0])
    steps, views = StepColumns.joined([server.log.detach() for server in servers])  # one copy, viewed per part
    parts = [summarize(server, view) for server, view in zip(servers, views)]
    # a disaggregated request is in its prefill and its decode instance's lists: once here
    requests = sorted({r.request_id: r for part in parts for r in part.requests}.values(), key=lambda r: r.request_id)
    tokens = sum(part.tokens for part in parts)
    end = max((r.completed_at or 0.0) for r in requests) if requests else 0.0
    begin = min(r.arrived_at for r in requests) if requests else 0.0
    span = float(end - begin)
    return RunSummary(tokens, span, tokens / (span / 1e6) if span > 0 else 0.0, steps,
                      np.concatenate([part.accept_lengths for part in parts]),
                      np.concatenate([part.accept_positions for part in parts]), requests,
                      max(part.kv_peak_tokens for part in parts), min(part.kv_capacity_tokens for part in parts),
                      sum(part.preemptions for part in parts), parts[0].slots, tuple(parts),
                      sum(part.link_delay_us for part in parts), sum((part.kv_transfers for part in parts), ()))


def _instance(part: RunSummary, gpus: list[str], role: str) -> InstanceFigures:
    """One instance's figures. Under disaggregation a request is in both pools' lists: a prefill instance reports
    its prefills per second and the TTFT (its tpot_ms is None), a decode instance its tokens per second and the
    TPOT (its ttft_ms is None: the first token was not its own)."""
    done = [r for r in part.requests if r.completed_at is not None and r.first_token_at is not None]
    lengths = part.accept_lengths
    seconds = part.sim_time_us / 1e6
    return InstanceFigures(
        gpus=gpus, role=role, requests=len(part.requests), tokens=part.tokens,
        throughput_tok_s=part.throughput_tok_s, sim_time_s=seconds, link_delay_ms=part.link_delay_us / 1e3,
        mean_accept_len=float(lengths.mean()) if lengths.size else 1.0,
        ttft_ms=_percentiles_ms([r.first_token_at - r.arrived_at for r in done]) if role != "decode" else None,
        tpot_ms=_percentiles_ms([(r.completed_at - r.first_token_at) / (r.generated - 1)
                                 for r in done if r.generated > 1]) if role != "prefill" else None,
        prefills_per_s=(len(part.requests) / seconds if seconds > 0 else 0.0) if role == "prefill" else None)


def deployment_report(scenario: Scenario, main: RunSummary, gpus: list[list[str]], shared: list[str] = (),
                      layer: RunSummary | None = None) -> DeploymentFigures:
    """The instances behind the router and each one's throughput, latency percentiles and requests, with the
    totals (the Result's own throughput and load figures are the deployment's).

    shared: the links two instances' routes both cross. At link fidelity with such links, `layer` is the same
    deployment at layer fidelity, where nothing is shared: `contention` reports both throughputs and the slowdown.
    """
    par = scenario.spec.parallelism
    parts = main.instances or (main,)
    pool = scenario.spec.deployment.prefill_instances
    roles = ["prefill and decode" if not pool else "prefill" if i < pool else "decode" for i in range(len(parts))]
    contention = None if layer is None else ContentionFigures(
        main.throughput_tok_s, layer.throughput_tok_s, 1.0 - main.throughput_tok_s / layer.throughput_tok_s,
        main.link_delay_us / 1e3)
    return DeploymentFigures(
        instances=len(parts), router=scenario.spec.deployment.router, tp=par.tp, pp=par.pp,
        gpus=sum(len(g) for g in gpus), total_tok_s=main.throughput_tok_s,
        per_instance={str(i): _instance(part, g, role) for i, (part, g, role) in enumerate(zip(parts, gpus, roles))},
        shared_links=list(shared),
        disaggregation=_disaggregation(main, pool, par.ranks_per_instance) if pool else None, contention=contention)


def _disaggregation(main: RunSummary, pool: int, ranks: int) -> DisaggregationFigures:
    """The KV transfers from the prefill pool to the decode pool: how many, how large, how long, and the bandwidth
    they used on average over the run (every rank's shard: tp x pp ranks per instance, each stage its own layers')."""
    transfers = main.kv_transfers
    nbytes = [b for b, _ in transfers]
    seconds = main.sim_time_us / 1e6
    return DisaggregationFigures(
        prefill_instances=pool, decode_instances=len(main.instances) - pool, kv_transfers=len(transfers),
        kv_MB_per_request=ranks * sum(nbytes) / len(nbytes) / 1e6 if nbytes else 0.0,
        kv_transfer_ms=_percentiles_ms([us for _, us in transfers]),
        kv_GBps_mean=ranks * sum(nbytes) / seconds / 1e9 if seconds > 0 else 0.0)


def deployment_lines(result) -> list[str]:
    """Each instance of a deployment of several: its GPUs, requests, throughput and latency percentiles."""
    dep = result.deployment
    if not dep or dep.get("instances", 1) < 2:
        return []
    split = f"TP{dep['tp']}" + (f" x PP{dep['pp']}" if dep.get("pp", 1) > 1 else "")
    lines = [f"  deployment          {dep['instances']} instances of {split} on {dep['gpus']} GPUs, "
             f"{dep['router'].replace('_', '-')} router: {dep['total_tok_s']:.1f} tok/s in all"]
    for index, inst in dep["per_instance"].items():
        def pct(name):
            v = inst.get(name)
            return f"p50 {v['p50']:,.1f} / p99 {v['p99']:,.1f} ms" if v else "-"
        gpus = ",".join(inst["gpus"])
        role = inst.get("role", "prefill and decode")
        if role == "prefill":
            lines.append(f"    instance {index} prefill ({gpus})  {inst['requests']} requests, "
                         f"{inst['prefills_per_s']:.2f} prefills/s; TTFT {pct('ttft_ms')}")
        else:
            lines.append(f"    instance {index}{'' if role != 'decode' else ' decode'} ({gpus})  {inst['requests']} "
                         f"requests, {inst['throughput_tok_s']:.1f} tok/s" +
                         (f"; TTFT {pct('ttft_ms')}" if role != "decode" else "") + f"; TPOT {pct('tpot_ms')}")
    pd = dep.get("disaggregation")
    if pd and pd["kv_transfer_ms"]:
        t = pd["kv_transfer_ms"]
        lines.append(f"    KV transfers      {pd['kv_transfers']} of {pd['kv_MB_per_request']:,.1f} MB per request, "
                     f"p50 {t['p50']:,.2f} / p99 {t['p99']:,.2f} ms; {pd['kv_GBps_mean']:,.2f} GB/s on average")
    if dep.get("shared_links"):
        lines.append(f"    shared links      {', '.join(dep['shared_links'])}: the instances' collectives can slow "
                     "each other there")
    contention = dep.get("contention")
    if contention:
        lines.append(f"    contention        {contention['link_tok_s']:.1f} tok/s with the links shared (link fidelity), "
                     f"{contention['layer_tok_s']:.1f} without (layer): {contention['slowdown']:.1%} slower; "
                     f"collectives waited {contention['link_delay_ms']:,.1f} ms for bandwidth")
    return lines
