"""Optimal token tree (Sequoia's dynamic program) for a positional acceptance vector."""
from __future__ import annotations

import json
import math

EXAMPLES = """
  specsim tree --accept 0.6,0.2,0.1 --size 9              the best 9-node tree (root included)
  specsim tree --accept 0.75,0.33 --size 16 --max-depth 4 --format json
"""


def configure(p) -> None:
    p.add_argument("--accept", required=True,
                   help="P1,P2,...: P_k is the chance that the k-th ranked child of an accepted node is accepted")
    p.add_argument("--size", type=int, required=True, help="tokens in the verify pass, the root included")
    p.add_argument("--max-depth", type=int, help="deepest draft allowed")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--max-size", type=int, default=256, metavar="N",
                   help="refuse sizes above N (default 256: the program costs ~ depth x size^2 x the number of "
                        "probabilities, 256 runs in well under a second)")


def main(args) -> int:
    from ..analysis.analytic import chain_expected_tokens, optimal_tree
    from ..config.errors import ConfigError

    try:
        probs = [float(x) for x in args.accept.split(",") if x.strip()]
        if not all(math.isfinite(x) for x in probs):
            raise ValueError
    except ValueError:
        raise ConfigError("command line", "--accept", f"not a list of numbers: {args.accept!r}",
                          "comma-separated probabilities, e.g. 0.6,0.2,0.1") from None
    if not probs:
        raise ConfigError("command line", "--accept", "no probabilities given", "e.g. 0.6,0.2,0.1")
    for k, value in enumerate(probs, start=1):
        if not 0.0 <= value <= 1.0:
            raise ConfigError("command line", f"--accept P{k}", f"probability {value} is outside [0, 1]", "0 <= P_k <= 1")
    if sum(probs) > 1.0 + 1e-9:
        raise ConfigError("command line", "--accept", f"the ranked children's probabilities sum to {sum(probs):.3f} > 1",
                          "P_k are exclusive outcomes at one node: sum <= 1")
    if args.size < 1:
        raise ConfigError("command line", "--size", f"size {args.size} < 1", ">= 1 (the root counts)")
    if args.size > args.max_size:
        raise ConfigError("command line", "--size", f"size {args.size} is above the limit of {args.max_size}",
                          f"<= {args.max_size}, or raise the limit with --max-size {args.size} (time grows as size^3)")
    if args.max_depth is not None and (args.max_depth < 0 or (args.max_depth == 0 and args.size > 1)):
        raise ConfigError("command line", "--max-depth", f"{args.size} nodes do not fit within depth {args.max_depth}",
                          ">= 1")
    tree, expected = optimal_tree(probs, args.size, args.max_depth)
    chain = chain_expected_tokens([probs[0]] * (args.size - 1))
    out = {"accept": probs, "size": tree.size, "parents": list(tree.parents), "expected_tokens": expected,
           "depth": tree.depth, "chain_expected_tokens": chain}
    if args.format == "json":
        print(json.dumps(out, indent=2))
    else:
        print(f"optimal tree of {tree.size} nodes (root included) for P = {probs}")
        print(f"  parents         {list(tree.parents)}")
        print(f"  depth           {tree.depth}")
        print(f"  expected tokens {expected:.4f} per verify (bonus included); a chain of the same size: {chain:.4f}")
    return 0
