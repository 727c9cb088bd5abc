"""`python -m simulator collective TOPOLOGY.yaml --op allreduce --bytes N`: one collective's predicted cost."""
from __future__ import annotations

import json

from . import ArgumentParser


def main(argv: list[str]) -> int:
    p = ArgumentParser(prog="python -m simulator collective", description="Predicted time of one collective.")
    p.add_argument("topology", help="topology YAML file")
    p.add_argument("--op", choices=("allreduce", "allgather"), default="allreduce")
    p.add_argument("--bytes", type=int, required=True, help="message size in bytes (per rank)")
    p.add_argument("--ranks", type=int, help="ranks taking part (default: every GPU)")
    p.add_argument("--algorithm", default="auto", help="auto, nccl, nccl_ring, nccl_tree, nvls, one_shot, two_shot")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value")
    args = p.parse_args(argv)

    from ..config.base import validate
    from ..config.loader import parse_override, read_yaml, set_path
    from ..config.scenario import ALLREDUCE_CHOICES
    from ..config.topology import Topology
    from ..config.errors import ConfigError
    from ..hardware.collectives import AllReduce, NotPermitted
    from ..hardware.interconnect import Fabric

    data = read_yaml(args.topology)
    if not isinstance(data, dict):
        raise ConfigError(args.topology, "<root>", "expected a mapping for the topology")
    for text in args.overrides:
        path, value = parse_override(text)
        set_path(data, path, value, args.topology)
    topology = validate(Topology, data, args.topology)
    ranks = topology.num_gpus if args.ranks is None else args.ranks
    if not 1 <= ranks <= topology.num_gpus:
        raise ConfigError("command line", "--ranks", f"{ranks} ranks on a {topology.num_gpus}-GPU topology",
                          f"1..{topology.num_gpus}")
    if args.bytes < 0:
        raise ConfigError("command line", "--bytes", "negative message size", ">= 0")
    if args.algorithm not in ALLREDUCE_CHOICES:
        raise ConfigError("command line", "--algorithm", f"unknown algorithm {args.algorithm!r}", ", ".join(ALLREDUCE_CHOICES))
    try:
        collective = AllReduce(Fabric(topology), ranks, args.algorithm, topology.gpu.kernel_floor_us)
        if args.op == "allreduce":
            cost = collective.cost(args.bytes)
            out = {"op": "allreduce", "bytes": args.bytes, "ranks": ranks, **cost.as_dict()}
        else:
            out = {"op": "allgather", "bytes": args.bytes, "ranks": ranks, "algorithm": "nccl_ring",
                   "time_us": collective.allgather_us(args.bytes)}
    except NotPermitted as exc:
        raise ConfigError("command line", "--algorithm", str(exc), "auto, nccl, nccl_ring, nccl_tree") from None
    except ValueError as exc:  # the fabric's own check (a GPU pair without a route): the file's mistake
        raise ConfigError(args.topology, "fabric", str(exc)) from None
    if args.format == "json":
        print(json.dumps(out, indent=2, default=float))
    else:
        print(f"{out['op']} of {args.bytes:,} B over {ranks} ranks of {topology.name}: {out['time_us']:.2f} us")
        if "protocol" in out:
            print(f"  algorithm {out['algorithm']} / {out['protocol']}, latency {out['latency_us']:.2f} us, "
                  f"algorithm bandwidth {out['algbw_GBps']:.1f} GB/s, bus bandwidth {out['busbw_GBps']:.1f} GB/s")
    return 0
