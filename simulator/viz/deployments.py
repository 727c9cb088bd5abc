"""The README's deployment questions (issue 14): each runs a shipped scenario under a list of deployments (labelled
override sets) at a few loads, and reports, per deployment and load, output tokens/s per GPU, goodput per GPU at the
workload's latency target and, where the topology names a price, dollars per million output tokens.

A deployment this version cannot simulate (a split the serving loop refuses, a model that does not fit) is a row
with the one-line reason instead of figures, so a question says plainly what is missing; when the split becomes
simulable, the same recipe fills it in. `quick` shortens the requests (for tests).
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import field
from typing import Any

from ..compiled import dataclass
from ..config.errors import ConfigError

Overrides = dict[str, Any]  # keyword overrides of simulator.run ("__" for ".")

@dataclass(frozen=True)
class Question:
    """A question: a base scenario, the deployments to compare and the loads to compare them at."""

    name: str  # the figure's and the table's file stem
    title: str
    scenario: str  # a shipped scenario's name
    deployments: dict[str, Overrides]
    loads: dict[str, Overrides]  # label -> workload overrides (concurrency and requests)
    common: Overrides = field(default_factory=dict)
    note: str = ""


def _load(users: int) -> Overrides:
    """`users` requests sent at the same moment, all served at once: the TTFT is the burst's prefill, not a queue."""
    return {"workload__max_running_requests": users, "workload__requests": users}


SPEC_OFF = {"speculation__method": "none"}
EAGER, GRAPH = {"runtime__cuda_graph_verify": False}, {"runtime__cuda_graph_verify": True}
DP_ATTN_EP8 = {"tp": 8, "dp": 8, "ep": 8, "dp_attention": True}
KIMI_SPLITS = {"TP8": {"parallelism": {"tp": 8}}, "2 x TP4": {"parallelism": {"tp": 4, "dp": 2}},
               # 8 attention groups of one rank do not fit Kimi-K2.5 here (88.3 GB of weights per GPU): 4 groups of 2
               "DP-attn (4 x 2) + EP8": {"parallelism": {**DP_ATTN_EP8, "dp": 4}}}
SPEC_MODES = {"no spec": SPEC_OFF, "EAGLE-3 eager": EAGER, "EAGLE-3 graph": GRAPH}
USERS = {"1 user": _load(1), "16 users": _load(16), "64 users": _load(64)}
PD = {"deployment": {"prefill_instances": 1}}  # instance 0 only prefills, instance 1 only decodes

QUESTIONS = [
    Question("deploy_reference_kimi", "Kimi-K2.5 on the reference machine (8x RTX PRO 6000, PCIe)", "pcie8_eagle3",
             {f"{split}, {mode}": {**s, **m} for split, s in KIMI_SPLITS.items() for mode, m in SPEC_MODES.items()},
             USERS, {"workload__output_tokens": 256}),
    Question("deploy_dsv3_h200", "DeepSeek-V3 with MTP (chain of 3) on 8x H200: TP8 vs DP-attention + EP8",
             "h200_dsv3_dpattn_ep8",
             {"TP8": {"parallelism": {"tp": 8}}, "DP-attn + EP8": {"parallelism": DP_ATTN_EP8}},
             {"batch 1 per rank": {"per_rank": 1}, "batch 32 per rank": {"per_rank": 32}},
             {"workload__output_tokens": 256},
             note="batch per rank: TP8 serves the batch on every rank; DP-attention gives each of its 8 attention "
                  "ranks its own batch, 8 times as many requests in all"),
    Question("deploy_llama70b_2node", "Llama-3.1-70B on two H100 nodes (8 x 400G InfiniBand)", "h100x2_llama70b_tp16",
             {"TP16": {"parallelism": {"tp": 16}}, "TP8 x PP2": {"parallelism": {"tp": 8, "pp": 2}},
              "2 x TP8": {"parallelism": {"tp": 8, "dp": 2}}},
             USERS, {"workload__output_tokens": 256}),
    Question("deploy_pd_reference", "Kimi-K2.5 on two reference machines: co-located replicas or prefill/decode "
             "disaggregation",
             "pcie8_eagle3",
             {"2 x TP8 co-located, no spec": {"parallelism": {"tp": 8, "dp": 2}, **SPEC_OFF},
              "2 x TP8 co-located, EAGLE-3 graph": {"parallelism": {"tp": 8, "dp": 2}, **GRAPH},
              "TP8 prefill + TP8 decode, no spec": {"parallelism": {"tp": 8, "dp": 2}, **PD, **SPEC_OFF},
              "TP8 prefill + TP8 decode, EAGLE-3 graph": {"parallelism": {"tp": 8, "dp": 2}, **PD, **GRAPH}},
             {"2 users": _load(2), "32 users": _load(32), "128 users": _load(128)},
             {"topology": "two_node_pcie8_rtx_pro_6000", "workload__output_tokens": 256},
             note="disaggregated: instance 0 (node 0) only prefills, instance 1 (node 1) only decodes"),
]


def _per_rank(overrides: Overrides, deployment: Overrides) -> Overrides:
    """'per_rank: n' becomes the concurrency of the whole deployment: n per attention group."""
    if "per_rank" not in overrides:
        return overrides
    par = deployment.get("parallelism", {})
    groups = par.get("dp", 1) if par.get("dp_attention") else 1
    return _load(overrides["per_rank"] * groups)


def figures_of(result) -> dict[str, Any]:
    """A row's figures from the run's planner, latency target check (results.sections) and kernel source."""
    p, target = result.planner, result.load.target
    return {"gpus": p.gpus, "tok_s": result.throughput_tok_s, "tok_s_per_gpu": p.throughput_tok_s_per_gpu,
            "goodput_tok_s_per_gpu": p.goodput_tok_s_per_gpu, "usd_per_mtok": p.usd_per_mtok,
            "target_met": p.target_met, "ttft_ms_p": target.ttft_ms_at_percentile,
            "tpot_ms_p": target.tpot_ms_at_percentile, "error": "", "kernel_source": result.provenance.kernel_source,
            "target": f"p{target.percentile:g} TTFT <= {target.ttft_ms:g} ms, TPOT <= {target.tpot_ms:g} ms"}


def run_question(question: Question, quick: bool = False) -> list[dict[str, Any]]:
    """One row per (deployment, load): the figures, or the reason the deployment cannot be simulated."""
    from ..api.run import resolve, run
    from .recipes import scenario

    short = {"workload__output_tokens": 32} if quick else {}
    rows = []
    for label, deployment in question.deployments.items():
        for load, overrides in question.loads.items():
            row = {"deployment": label, "load": load}
            try:
                resolved = resolve(scenario(question.scenario), {**question.common, **deployment,
                                                                 **_per_rank(overrides, deployment), **short})
                result = run(resolved)
                row.update(figures_of(result), **kv_transfer(resolved, result))
            except ConfigError as exc:
                row["error"] = exc.problem
            rows.append(row)
    return rows


def kv_transfer(scenario, result) -> dict[str, float]:
    """What moving prefill to other GPUs would have to carry: the KV cache a request's prompt leaves on all the
    ranks of its instance (MB), and that cache's rate (GB/s) at the prefill speed this run reached (prompt tokens
    over the time its prefill steps took, per instance). Every attention rank receives what it holds: MLA's latent
    cache is replicated on each, GQA's heads are split (a head shared by ranks is sent to each)."""
    from ..config.typical import mean_length
    from ..model.cards import kv_bytes_per_token_layer

    card, par = scenario.model, scenario.spec.parallelism
    per_token = kv_bytes_per_token_layer(card, par.attention_tp) * card.num_layers * par.attention_tp
    steps = result.run.steps
    prefill = steps["kind"] == 0
    seconds = float(steps["duration_us"][prefill].sum()) / 1e6 / par.instances
    rate = float(steps["verify_tokens"][prefill].sum()) / par.instances / seconds if seconds > 0 else 0.0
    return {"kv_MB_per_request": per_token * mean_length(scenario.spec.workload.prompt_tokens) / 1e6,
            "kv_GBps_at_prefill_rate": per_token * rate / 1e9}


COLUMNS = ("deployment", "load", "gpus", "tok_s", "tok_s_per_gpu", "goodput_tok_s_per_gpu", "usd_per_mtok",
           "target_met", "ttft_ms_p", "tpot_ms_p", "kv_MB_per_request", "kv_GBps_at_prefill_rate", "target", "kernel_source", "error")


def write_rows(rows: list[dict[str, Any]], path: str) -> str:
    from ..results.files import atomic_write

    with atomic_write(path, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows([{k: row.get(k, "") for k in COLUMNS} for row in rows])
    return path


def _cell(value, digits: int = 1) -> str:
    if value is None or value == "" or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def markdown_table(rows: list[dict[str, Any]], target: str, kv: bool = False) -> str:
    """The README's table: per deployment and load, tok/s per GPU, goodput per GPU at the target (with the
    percentile TTFT and TPOT it was judged on), $ per M output tokens (and with `kv`, the KV cache a request leaves
    and its rate at the run's prefill speed); or why the deployment has no figures."""
    extra = " KV per request (MB) | KV at prefill rate (GB/s) |" if kv else ""
    lines = [f"| deployment | load | GPUs | tok/s per GPU | goodput tok/s per GPU | {target}: TTFT / TPOT (ms) | "
             "$ per M output tokens |" + extra, "| --- " * (9 if kv else 7) + "|"]
    failed: dict[str, list[str]] = {}  # one line per reason: the deployments it stops, at every load
    for r in rows:
        if r.get("error"):
            failed.setdefault(r["error"], [])
            if r["deployment"] not in failed[r["error"]]:
                failed[r["error"]].append(r["deployment"])
            continue
        lines.append(f"| {r['deployment']} | {r['load']} | {r['gpus']} | {_cell(r['tok_s_per_gpu'])} | "
                     f"{_cell(r['goodput_tok_s_per_gpu'])} | {_cell(r['ttft_ms_p'], 0)} / {_cell(r['tpot_ms_p'])} | "
                     f"{_cell(r['usd_per_mtok'], 2)} |"
                     + (f" {_cell(r['kv_MB_per_request'], 0)} | {_cell(r['kv_GBps_at_prefill_rate'], 2)} |" if kv else ""))
    lines += [f"| {'; '.join(names)} | any | | n/a: {reason} | | | |" + (" | |" if kv else "")
              for reason, names in failed.items()]
    return "\n".join(lines)


def deployment_bars(question: Question, rows: list[dict[str, Any]], path: str) -> str:
    """Two panels, tok/s per GPU and goodput per GPU: a group of bars per load, one bar per simulable deployment."""
    from .style import _pyplot, _save

    plt = _pyplot()
    loads = list(question.loads)
    labels = [d for d in question.deployments if any(r["deployment"] == d and not r["error"] for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), layout="constrained")
    width = 0.8 / max(1, len(labels))
    target = next((r["target"] for r in rows if not r["error"]), "the latency target")
    for ax, key, name in zip(axes, ("tok_s_per_gpu", "goodput_tok_s_per_gpu"),
                             ("output tok/s per GPU", f"goodput tok/s per GPU\n({target})")):
        for i, label in enumerate(labels):
            values = [next((r[key] for r in rows if r["deployment"] == label and r["load"] == load and not r["error"]),
                           0.0) for load in loads]
            ax.bar([j + (i - (len(labels) - 1) / 2) * width for j in range(len(loads))], values, width, label=label)
        ax.set_xticks(range(len(loads)), loads)
        ax.set_ylabel(name)
        ax.grid(axis="y", alpha=0.3)
    missing = [d for d in question.deployments if d not in labels]
    axes[0].legend(fontsize=7, loc="best")
    sources = sorted({r["kernel_source"] for r in rows if r.get("kernel_source")})
    fig.suptitle(question.title + (f"\nnot simulated: {', '.join(missing)}" if missing else "")
                 + (f"\nkernel times: {', '.join(sources)}" if sources else ""), fontsize=10)
    return _save(fig, path)


def answer(question: Question, out: str, quick: bool = False) -> str:
    """Run a question, write its rows (CSV) beside its figure (PNG); returns the figure's path."""
    rows = run_question(question, quick)
    write_rows(rows, os.path.join(out, f"{question.name}.csv"))
    return deployment_bars(question, rows, os.path.join(out, f"{question.name}.png"))
