"""The deployment frontier users read (aiconfigurator, InferenceX): output tokens/s per GPU against tokens/s per
user, over the splits of the GPUs that fit, speculation settings (off, the drafter's chain lengths, a tree) and the
number of concurrent users, with and without speculation.

Each point is one simulated run (a sweep point: experiments.sweep runs them, locally or on Dask). At a point, N
users each send one request at the same moment and are served together: every instance's batch cap
(workload.max_running_requests) is its share of the N. Per user: 1000 / mean TPOT (ms), the decode rate a user sees
once the first token is out (the clients' TPOT, docs/metrics.md). A point is on a frontier when no other point of
the same set has both figures at least as high and one higher.
"""
from __future__ import annotations

import math
from typing import Any

from ..compiled import dataclass
from ..config.errors import ConfigError

USERS = (1, 4, 16, 64)  # the default concurrency axis: small enough for a few minutes on one core
METRICS = ("planner.gpus", "planner.throughput_tok_s_per_gpu", "throughput_tok_s", "load.client.tpot_ms.mean",
           "load.ttft_ms.p90", "load.tpot_ms.p90", "planner.target_met", "mean_accept_len", "load.mean_batch")
SPECULATION_AXES = ("speculation.method", "speculation.verify", "speculation.draft_tokens", "speculation.tree")


def _halvings(n: int) -> list[int]:
    return [d for d in (n // 2 ** i for i in range(1, n.bit_length())) if d >= 1 and n % d == 0]


def splits(gpus: int, moe: bool) -> list[dict[str, Any]]:
    """Splits of `gpus` GPUs: TP over all, replicas of smaller TP groups, two pipeline stages; for a model with
    experts, EP over the TP ranks and DP-attention in 2, 4, ... groups with it (analysis.split_levers' set)."""
    out: list[dict[str, Any]] = [{"tp": gpus}]
    out += [{"tp": t, "dp": gpus // t} for t in _halvings(gpus)]
    if gpus >= 2 and gpus % 2 == 0:
        out.append({"tp": gpus // 2, "pp": 2})
    if moe:
        out.append({"tp": gpus, "ep": gpus})
        out += [{"tp": gpus, "dp": d, "ep": gpus, "dp_attention": True} for d in reversed(_halvings(gpus)) if d > 1]
        out.append({"tp": gpus, "dp": gpus, "ep": gpus, "dp_attention": True})
    return out


def split_label(split: dict[str, Any]) -> str:
    tp, dp, pp, ep = split["tp"], split.get("dp", 1), split.get("pp", 1), split.get("ep", 1)
    if split.get("dp_attention"):
        return f"TP{tp} DP-attn{dp} EP{ep}"
    text = (f"{dp}x " if dp > 1 else "") + f"TP{tp}" + (f" PP{pp}" if pp > 1 else "")
    return text + (f" EP{ep}" if ep > 1 else "")


def speculation_settings(spec) -> list[dict[str, Any]]:
    """Off; the drafter's chain of 1 and of its own length; a top-2 tree as deep as its chain (not for n-gram
    trees, which are the drafter's own shape: then its tree and a chain as deep)."""
    off = {"speculation.method": "none", "speculation.verify": "chain", "speculation.draft_tokens": 1,
           "speculation.tree": spec.tree.model_dump(mode="json")}
    if spec.method == "none":
        return [off]
    depth = spec.tree.depth if spec.verify == "tree" and getattr(spec.tree, "depth", None) else spec.draft_tokens
    chain = lambda k: {**off, "speculation.method": spec.method, "speculation.draft_tokens": k}  # noqa: E731
    out = [off, *(chain(k) for k in sorted({1, depth}))]
    tree = spec.tree.model_dump(mode="json") if spec.verify == "tree" else {"kind": "topk", "k": 2, "depth": depth}
    drafts = spec.draft_tokens if spec.verify == "tree" else 2 * depth
    out.append({**off, "speculation.method": spec.method, "speculation.verify": "tree",
                "speculation.draft_tokens": drafts, "speculation.tree": tree})
    return out


def speculation_label(values: dict[str, Any]) -> str:
    method = values["speculation.method"]
    if method == "none":
        return "off"
    if values["speculation.verify"] == "chain":
        return f"{method} chain {values['speculation.draft_tokens']}"
    return f"{method} tree {values['speculation.draft_tokens']}"


def grid(scenario, gpus: int | None, users: tuple[int, ...]) -> dict[str, list[Any]]:
    """The zipped axes of the sweep: every (split, speculation, users) combination, one list per config path."""
    gpus = gpus or scenario.spec.parallelism.num_gpus
    if gpus > scenario.topology.num_gpus:
        raise ConfigError("command line", "--gpus", f"{gpus} GPUs, but {scenario.topology.name} has "
                          f"{scenario.topology.num_gpus}", f"1 to {scenario.topology.num_gpus}")
    axes: dict[str, list[Any]] = {"parallelism": [], **{k: [] for k in SPECULATION_AXES},
                                  "workload.requests": [], "workload.max_running_requests": []}
    for split in splits(gpus, scenario.model.moe is not None):
        instances = 1 if split.get("dp_attention") else split.get("dp", 1)
        for setting in speculation_settings(scenario.spec.speculation):
            for n in users:
                axes["parallelism"].append(split)
                for key in SPECULATION_AXES:
                    axes[key].append(setting[key])
                axes["workload.requests"].append(n)
                axes["workload.max_running_requests"].append(max(1, math.ceil(n / instances)))
    return axes


@dataclass(frozen=True)
class ParetoPoint:
    point_id: str
    split: str
    speculation: str
    users: int
    tok_s_per_user: float
    tok_s_per_gpu: float
    gpus: int
    ttft_p90_ms: float
    tpot_p90_ms: float
    target_met: bool
    mean_accept_len: float

    @property
    def speculating(self) -> bool:
        return self.speculation != "off"


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def parse_rows(rows: list[dict[str, str]]) -> tuple[list[ParetoPoint], list[tuple[str, str]]]:
    """The results store's ok rows as points; the others as (point, reason)."""
    import json

    points, failed = [], []
    for row in rows:
        if row.get("status") != "ok":
            failed.append((row.get("point", row.get("point_id", "")), row.get("error", "")))
            continue
        tpot = _number(row["load.client.tpot_ms.mean"])
        values = {k: json.loads(row[k]) if k in ("parallelism", "speculation.tree") else row[k] for k in row}
        values["speculation.draft_tokens"] = int(float(row["speculation.draft_tokens"]))
        points.append(ParetoPoint(row["point_id"], split_label(values["parallelism"]), speculation_label(values),
                                  int(float(row["workload.requests"])), 1e3 / tpot if tpot > 0 else math.nan,
                                  _number(row["planner.throughput_tok_s_per_gpu"]), int(float(row["planner.gpus"])),
                                  _number(row["load.ttft_ms.p90"]), _number(row["load.tpot_ms.p90"]),
                                  row["planner.target_met"] in ("True", "true", "1"), _number(row["mean_accept_len"])))
    return points, failed


def dominates(a: ParetoPoint, b: ParetoPoint) -> bool:
    return (a.tok_s_per_user >= b.tok_s_per_user and a.tok_s_per_gpu >= b.tok_s_per_gpu
            and (a.tok_s_per_user > b.tok_s_per_user or a.tok_s_per_gpu > b.tok_s_per_gpu))


def frontier(points: list[ParetoPoint]) -> list[ParetoPoint]:
    """The points no other point dominates, by tokens/s per user (fastest last)."""
    usable = [p for p in points if math.isfinite(p.tok_s_per_user) and math.isfinite(p.tok_s_per_gpu)]
    best = sorted(usable, key=lambda p: (-p.tok_s_per_gpu, -p.tok_s_per_user))
    out, fastest = [], -math.inf
    for p in best:  # by throughput per GPU, best first: a point is kept when it is faster per user than all before
        if p.tok_s_per_user > fastest:
            out.append(p)
            fastest = p.tok_s_per_user
    return sorted(out, key=lambda p: p.tok_s_per_user)
