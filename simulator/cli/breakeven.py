"""Break-even accept lengths for chains of 1..8 drafts and token trees, eager and CUDA-graph verify, from the
machine's pass costs at the workload's typical context.
"""
from __future__ import annotations

import json
import logging

from ..config.errors import ConfigError
from . import overrides_of, scenario_options

log = logging.getLogger("specsim")

EXAMPLES = """
  specsim breakeven pcie8_eagle3                   chains and trees, eager and CUDA-graph verify
  specsim breakeven pcie8_eagle3 --check           and the full simulation of the scenario's own set-up
  specsim breakeven pcie8_ngram --trees 8,16 --plot map.png
"""


def configure(p) -> None:
    scenario_options(p, fidelity=False)
    p.add_argument("--trees", default="4,8,16,32", metavar="N,N,...",
                   help="tree sizes in draft tokens (the root adds one verified token); default 4,8,16,32")
    p.add_argument("--max-chain", type=int, default=8, metavar="K", help="chains of 1..K drafts (default 8)")
    p.add_argument("--check", action="store_true",
                   help="also run the full simulation of the scenario's own configuration and compare")
    p.add_argument("--plot", metavar="OUT.png", help="map of throughput over accept length and verify cost")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError("command line", "--trees", f"not a list of integers: {text!r}", "e.g. 4,8,16,32") from None
    if not sizes or any(not 1 <= n <= 64 for n in sizes):
        raise ConfigError("command line", "--trees", f"sizes {text!r}", "draft tokens between 1 and 64")
    return sizes


def main(args) -> int:
    if not 1 <= args.max_chain <= 16:
        raise ConfigError("command line", "--max-chain", f"{args.max_chain}", "1..16")
    trees = _sizes(args.trees)
    from ..api.run import resolve, run
    from ..analysis.breakeven import breakeven_table

    scenario = resolve(args.scenario, None, overrides_of(args))
    from ..results.files import check_outputs
    from ..results.limits import check_run

    check_outputs(args)
    check_run(scenario, args.max_work, memory_GB=args.max_memory_GB)  # a KV cache `run` refuses: the same line
    table = breakeven_table(scenario, tuple(range(1, args.max_chain + 1)), trees)
    check = None
    if args.check and table.own is not None:
        log.info("breakeven: full simulation of the scenario's own configuration")
        result = run(scenario)
        check = {"full_run": result.breakeven_accept_len, "table": table.with_drafting(table.own_cost()),
                 "mean_accept_len": result.mean_accept_len, "speedup": result.speedup}
    if args.format == "json":
        print(json.dumps(to_dict(table, check), indent=2))
    else:
        print(to_table(table, check))
    if args.plot:
        plot(table, args.plot)
    return 0


def _cost(table, cost) -> dict:
    return {"verify_ms": cost.verify_ms, "draft_ms": cost.draft_ms, "other_ms": cost.other_ms, "step_ms": cost.step_ms,
            "verify_only": table.verify_only(cost), "with_drafting": table.with_drafting(cost)}


def to_dict(table, check=None) -> dict:
    out = {"scenario": table.scenario, "drafter": table.method, "batch": table.batch, "context": table.context,
           "decode_step_ms": table.decode_step_ms, "decode_tok_s": table.decode_tok_s,
           "own_verify": "graph" if table.own_graph_verify else "eager",
           "rows": [{"shape": r.label, "drafts": r.tree.num_drafts, "verify_tokens": r.tree.size, "depth": r.tree.depth,
                     "parents": list(r.tree.parents), "expected_accept_len": r.expected_accept_len, "own": r.is_own,
                     "eager": _cost(table, r.eager), "graph": _cost(table, r.graph)} for r in table.rows]}
    if table.note:
        out["note"] = table.note
    if check:
        out["check"] = check
    return out


def to_table(table, check=None) -> str:
    f2 = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    lines = [f"break-even accept length: {table.scenario} ({table.method} drafting, batch {table.batch}, "
             f"mean context {table.context:,} tokens)",
             f"plain decode step {table.decode_step_ms:.2f} ms ({table.decode_tok_s:.1f} tok/s while decoding; a run's "
             "baseline throughput also counts prefill). Speculation pays "
             "when the accept length (bonus token included) exceeds the break-even.",
             "  verify-only   = verify pass / plain decode step (docs/reference.md's rule)",
             "  with drafting = (verify pass + drafting + per-step host work) / plain decode step",
             ""]
    if table.note:
        lines.insert(1, f"note: {table.note}")
    lines.append(f"  {'':10} {'tokens':>8} {'expected':>8}  | {'eager verify':^33} | {'CUDA-graph verify':^33}")
    head = f"{'verify ms':>9} {'draft ms':>8} {'only':>5} {'w/ draft':>8}"
    lines.append(f"  {'shape':10} {'verified':>8} {'accept':>8}  | {head} | {head}")
    for r in table.rows:
        cells = [f"{c.verify_ms:9.2f} {c.draft_ms:8.2f} {table.verify_only(c):5.2f} {table.with_drafting(c):8.2f}"
                 for c in (r.eager, r.graph)]
        lines.append(f"{'*' if r.is_own else ' '} {r.label:10} {r.tree.size:8d} {f2(r.expected_accept_len):>8}  | "
                     f"{cells[0]} | {cells[1]}")
    own = table.own
    lines.append("")
    if own is not None:
        mode = "CUDA-graph" if table.own_graph_verify else "eager"
        be = table.with_drafting(table.own_cost())
        text = f"* this scenario ({mode} verify): break-even {be:.2f} with drafting, " \
               f"{table.verify_only(table.own_cost()):.2f} verify-only"
        if own.expected_accept_len is not None:
            acc = own.expected_accept_len
            text += f"; its drafter's expected accept length {acc:.2f} -> speculation " \
                    f"{'PAYS' if acc > be else 'LOSES'} ({acc / be:.2f}x the baseline)"
        lines.append(text + ".")
    if check:
        diff = check["table"] / check["full_run"] - 1 if check["full_run"] else float("nan")
        lines.append(f"full simulation: break-even {check['full_run']:.3f} (table {check['table']:.3f}, "
                     f"{diff:+.1%}); accept length {check['mean_accept_len']:.2f}, {check['speedup']:.2f}x the baseline.")
    return "\n".join(lines)


def plot(table, path: str) -> None:
    import numpy as np

    try:
        from ..viz.figures import breakeven_map
    except ImportError as exc:
        raise ConfigError("command line", "--plot", f"plotting is unavailable: {exc}", "install matplotlib") from None
    from ..analysis.breakeven import throughput_map

    own = table.own
    verifies = [c.verify_ms for r in table.rows for c in (r.eager, r.graph)]
    accept_lens = np.linspace(1.0, max(4.0, *(r.expected_accept_len or 1.0 for r in table.rows)) + 0.5, 121)
    verify_ms = np.linspace(0.8 * min(verifies), 1.1 * max(verifies), 121)  # no verify is cheaper than a decode
    point = None
    if own is not None and own.expected_accept_len is not None:
        point = (own.expected_accept_len, table.own_cost().verify_ms)
    breakeven_map(accept_lens, verify_ms, throughput_map(table, accept_lens, verify_ms), table.decode_tok_s,
                  point=point, title=f"{table.scenario}: throughput (tok/s) vs accept length and verify cost", path=path)
    log.info("plot: %s", path)
