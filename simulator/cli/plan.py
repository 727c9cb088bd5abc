"""Simulate the scenario with one change at a time (NVLink, CUDA-graph verify, all-reduce options, memory
bandwidth, a better drafter, chain/tree, draft length) and rank the changes by throughput.

The levers are declared in one list, `simulator.analysis.planning.LEVERS`.
"""
from __future__ import annotations

import json
import logging

from ..config.errors import ConfigError
from . import overrides_of, scenario_options

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim plan pcie8_eagle3                        every lever, ranked
  specsim plan pcie8_ngram --format json
  specsim plan pcie8_eagle3 --plot tornado.png
  specsim plan pcie8_eagle3 --rank-by cost         cheapest per million output tokens first
"""


def configure(p) -> None:
    scenario_options(p, fidelity=True)
    p.add_argument("--plot", metavar="OUT.png", help="tornado chart of the levers' throughput")
    from .compare import rank_option

    rank_option(p)


def main(args) -> int:
    from ..analysis.planning import plan_levers
    from ..results.files import check_outputs
    from ..results.limits import check_run
    from ..api.run import resolve

    check_outputs(args)
    check_run(resolve(args.scenario, None, overrides_of(args)), args.max_work, memory_GB=args.max_memory_GB)
    from . import note, progress

    with progress(desc="plan", unit="run") as bar:
        def said(text: str) -> None:
            bar.update(1)
            note(bar, text)

        plan = plan_levers(args.scenario, overrides_of(args), progress=said, rank_by=args.rank_by or "throughput")
    if args.format == "json":
        print(json.dumps(to_dict(plan), indent=2, default=str))
    else:
        print(to_table(plan))
    if args.plot:
        plot(plan, args.plot)
    return 0


def to_dict(plan) -> dict:
    return {"scenario": plan.scenario, "today": plan.today.to_dict(),
            "levers": [o.to_dict(plan.today) for o in plan.ranked],
            "skipped": [{"lever": o.name, "why": o.note} for o in plan.skipped], "conclusion": plan.conclusion()}


def to_table(plan) -> str:
    from ..analysis.planning import describe_overrides
    from ..results.planner import RANKINGS, lookup

    today = plan.today
    if plan.speculating:
        state = (f"plain decode {today.baseline_tok_s:.1f} tok/s, speedup {today.speedup:.2f}x, accept length "
                 f"{today.mean_accept_len:.2f}: speculation {'PAYS' if today.pays else 'LOSES'}")
    else:
        state = "speculation off (levers about drafting do not apply)"
    ranking = RANKINGS[plan.rank_by]
    extra = plan.rank_by not in ("throughput", "speedup")  # those two have their own columns
    figure = lambda o: lookup(o.figures, ranking.path)  # noqa: E731
    shown = lambda o: f" {'-' if figure(o) is None else f'{figure(o):,.2f}':>{len(ranking.label)}}"  # noqa: E731
    lines = [f"plan: {plan.scenario}, one change at a time (same seed for every run), ranked by {ranking.label} "
             f"({'higher' if ranking.higher_is_better else 'lower'} is better)",
             f"today: {today.throughput_tok_s:.1f} tok/s" + (f", {ranking.label} {shown(today).strip()}" if extra
                                                             else "") + f", {state}", "",
             f"  {'#':>2}  {'lever':28} {'tok/s':>7} {'vs today':>8} {'baseline':>8} {'speedup':>7} {'accept':>6} "
             f"{'verify ms':>9}" + (f" {ranking.label}" if extra else "") + "  pays  change"]
    for rank, o in enumerate(plan.ranked, start=1):
        verify = "-" if o.verify_ms is None else f"{o.verify_ms:.1f}"
        lines.append(f"  {rank:>2}  {o.name:28} {o.throughput_tok_s:7.1f} "
                     f"{o.throughput_tok_s / today.throughput_tok_s - 1:+8.0%} {o.baseline_tok_s:8.1f} "
                     f"{o.speedup:6.2f}x {o.mean_accept_len:6.2f} {verify:>9}{shown(o) if extra else ''}  "
                     f"{'yes ' if o.pays else 'no  '}  "
                     f"{describe_overrides(o.overrides)}")
    lines += ["", "speedup: against plain decode on the same (changed) machine; baseline: that plain decode's tok/s."]
    for o in plan.ranked:
        note = f"  {o.name}: {o.description}" + (f" ({o.note})" if o.note else "")
        lines.append(note)
    for o in plan.skipped:
        lines.append(f"  skipped {o.name}: {o.note}")
    lines += ["", plan.conclusion()]
    return "\n".join(lines)


def plot(plan, path: str) -> None:
    try:
        from ..viz.figures import tornado
    except ImportError as exc:
        raise ConfigError("command line", "--plot", f"plotting is unavailable: {exc}", "install matplotlib") from None
    tornado([(o.name, o.throughput_tok_s, o.pays) for o in plan.ranked], baseline_value=plan.today.baseline_tok_s,
            current_value=plan.today.throughput_tok_s, xlabel="speculative throughput (tok/s)",
            title=f"{plan.scenario}: one change at a time", path=path)
    log.info("plot: %s", path)
