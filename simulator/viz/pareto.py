"""The deployment frontier as a table, a CSV and a figure: every simulated point, the frontier with speculation
allowed and the one without, the points that meet the latency target filled."""
from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import asdict

COLUMNS = ("point_id", "split", "speculation", "users", "gpus", "tok_s_per_user", "tok_s_per_gpu", "ttft_p90_ms",
           "tpot_p90_ms", "target_met", "mean_accept_len", "frontier")


def write_frontiers(points, fronts: dict, path: str) -> str:
    """Every point, one row each; `frontier` names the frontiers it is on (all; no speculation)."""
    from ..results.files import atomic_write

    on = {name: {p.point_id for p in front} for name, front in fronts.items()}
    with atomic_write(path, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        for p in sorted(points, key=lambda p: (p.split, p.speculation, p.users)):
            writer.writerow({**{k: v for k, v in asdict(p).items() if k in COLUMNS},
                             "frontier": "; ".join(name for name, ids in on.items() if p.point_id in ids)})
    return path


def _target(scenario) -> str:
    t = scenario.spec.workload.target
    return f"p{t.percentile:g} TTFT <= {t.ttft_ms:g} ms and TPOT <= {t.tpot_ms:g} ms"


def frontier_table(points, fronts: dict, failed: list, scenario) -> str:
    """The frontiers, fastest per user last; a point meeting the latency target is marked *."""
    lines = [f"pareto: {scenario.model.name} on {scenario.topology.name}, {len(points)} points simulated "
             f"({len(failed)} could not run); * meets {_target(scenario)}"]
    for name, front in fronts.items():
        lines += ["", f"frontier ({name}): output tok/s per GPU against tok/s per user",
                  f"  {'deployment':<22} {'speculation':<16} {'users':>5} {'tok/s/user':>10} {'tok/s/GPU':>10} "
                  f"{'p90 TTFT ms':>11} {'p90 TPOT ms':>11} {'accept':>6}"]
        for p in front:
            lines.append(f"{'*' if p.target_met else ' '} {p.split:<22} {p.speculation:<16} {p.users:>5} "
                         f"{p.tok_s_per_user:>10.1f} {p.tok_s_per_gpu:>10.1f} {p.ttft_p90_ms:>11,.0f} "
                         f"{p.tpot_p90_ms:>11.1f} {p.mean_accept_len:>6.2f}")
        met = [p for p in front if p.target_met]
        if met:
            best = max(met, key=lambda p: p.tok_s_per_gpu)
            lines.append(f"  best meeting the target: {best.split}, {best.speculation}, {best.users} users: "
                         f"{best.tok_s_per_gpu:.1f} tok/s per GPU at {best.tok_s_per_user:.1f} tok/s per user")
        else:
            lines.append("  no point on this frontier meets the target")
    reasons = Counter(reason for _, reason in failed)
    lines += [f"not simulated ({n} points): {reason}" for reason, n in reasons.most_common()]
    return "\n".join(lines)


def pareto_figure(points, fronts: dict, scenario, path: str) -> str:
    """Every point (filled: meets the target), and the two frontiers as steps."""
    from .style import _pyplot, _save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.2), layout="constrained")
    for speculating, color, label in ((False, "tab:blue", "no speculation"), (True, "tab:orange", "speculation")):
        group = [p for p in points if p.speculating == speculating and math.isfinite(p.tok_s_per_user)]
        for met in (True, False):
            chosen = [p for p in group if p.target_met == met]
            ax.scatter([p.tok_s_per_user for p in chosen], [p.tok_s_per_gpu for p in chosen], s=22, color=color,
                       facecolors=color if met else "none", alpha=0.8,
                       label=f"{label}, {'meets' if met else 'misses'} the target" if chosen else None)
    for (name, front), style in zip(fronts.items(), ("-", "--")):
        ax.plot([p.tok_s_per_user for p in front], [p.tok_s_per_gpu for p in front], style, color="black",
                drawstyle="steps-pre", linewidth=1.2, label=f"frontier ({name})")
    ax.set_xlabel("tokens/s per user (1000 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"{scenario.model.name} on {scenario.topology.name}: deployments, speculation and users\n"
                 f"target: {_target(scenario)}", fontsize=9)
    return _save(fig, path)
