"""The planner's deployment lever: the same GPUs split another way (issue 14).

Candidates keep the GPUs the scenario holds: smaller tensor-parallel groups as replicas (tp / 2, tp / 4, ... with dp
making up the GPUs), and for a model with experts, expert parallelism over the tp ranks and DP-attention in 2, 4, ...
attention groups with it. A candidate the model or the simulator refuses (weights that do not fit, a split not
simulated yet) is rejected with its one-line reason, as every lever's candidates are; `plan --rank-by` picks the best
by throughput per GPU, goodput or cost.
"""
from __future__ import annotations


def _halvings(n: int) -> list[int]:
    out, d = [], n // 2
    while d >= 1:
        if n % d == 0:
            out.append(d)
        d //= 2
    return out


def lever_split(scenario, path: str):
    """Other splits of the scenario's GPUs: replicas of smaller TP groups; EP and DP-attention for an MoE model."""
    par = scenario.spec.parallelism
    if par.pp > 1 or par.gpus is not None:
        return "a pipeline split or an explicit placement is not varied"
    gpus, tp = par.num_gpus, par.tp * par.instances  # one instance of tp ranks on every GPU, or replicas
    candidates = [{"tp": t, "dp": gpus // t} if t < gpus else {"tp": t} for t in [gpus, *_halvings(gpus)]]
    if scenario.model.moe is not None:
        candidates.append({"tp": tp, "ep": tp})
        candidates += [{"tp": tp, "dp": d, "ep": tp, "dp_attention": True} for d in reversed(_halvings(tp)) if d > 1]
        candidates.append({"tp": tp, "dp": tp, "ep": tp, "dp_attention": True})
    today = _canonical(par.model_dump())
    out = [{"parallelism": c} for c in candidates if _canonical(c) != today]
    return out or "no other split of these GPUs"


def _canonical(split: dict) -> tuple:
    """The split's degrees, defaults filled in, so that {tp: 8} and {tp: 8, dp: 1} are the same split."""
    return (split["tp"], split.get("dp") or 1, split.get("ep") or 1, split.get("pp") or 1,
            bool(split.get("dp_attention")))
