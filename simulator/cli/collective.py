"""Predicted time of a collective on a topology, one size or an nccl-tests-style sweep (NCCL's cost model, or the
engine's custom all-reduce, labelled as such)."""
from __future__ import annotations

import json
import math
import re

EXAMPLES = """
  python -m simulator collective topologies/pcie8_rtx_pro_6000.yaml --bytes 14KB   a decode all-reduce, reference machine
  python -m simulator collective topologies/nvlink8_h100.yaml -b 8 -e 1G -f 4 --algorithm nccl   like all_reduce_perf
  python -m simulator collective topologies/nvlink8_h200.yaml --bytes 1048576 --format json
"""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str, option: str = "--bytes") -> int:
    """A byte count as nccl-tests reads it: 8, 14K, 14KB, 1M, 1G (K/M/G are powers of 1024)."""
    from ..config.errors import ConfigError

    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError("command line", option, f"cannot read {text!r} as a size", "e.g. 8, 14336, 14KB, 1M, 1G")
    return int(float(m.group(1)) * _UNIT[m.group(2).lower()])


def configure(p) -> None:
    p.add_argument("topology", help="topology YAML file, or the name of a shipped one (specsim list topologies)")
    p.add_argument("--op", choices=("allreduce", "allgather"), default="allreduce")
    p.add_argument("--bytes", help="one message size in bytes per rank (8, 14336, 14KB, 1G)")
    p.add_argument("-b", "--minbytes", help="sweep: smallest size (nccl-tests -b)")
    p.add_argument("-e", "--maxbytes", help="sweep: largest size (nccl-tests -e)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, help="sweep: size multiplier (nccl-tests -f)")
    p.add_argument("--ranks", type=int, help="ranks taking part (default: every GPU)")
    p.add_argument("--launch", choices=("graph", "eager"), default="graph",
                   help="graph: what a pass's collective pays (NCCL's figures); eager: launched as nccl-tests does, "
                        "at least the topology's calibrated eager floor (fabric.nccl_eager_*)")
    p.add_argument("--algorithm", default="auto",
                   help="auto (the engine's choice: NCCL or its custom all-reduce), nccl (NCCL's own choice), "
                        "nccl_ring, nccl_tree, nvls, one_shot, two_shot")
    p.add_argument("--engine", default=None, metavar="NAME:VERSION",
                   help="the engine whose measured custom all-reduce is shown beside the model's figure (default: "
                        "SGLang 0.5.9, the default engine profile)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value")
    from ..results.limits import limit_value

    p.add_argument("--max-sizes", type=limit_value("--max-sizes", MAX_SIZES), metavar="N",
                   help=f"refuse a sweep of more than N sizes (default {MAX_SIZES:,})")


MAX_SIZES = 10_000  # sizes in one sweep: nccl-tests' -b 8 -e 8G -f 2 is 31; each size is a cost-model call


def sizes(args) -> list[int]:
    """The message sizes: --bytes alone, or -b / -e / -f as nccl-tests steps them, counted before any is costed."""
    from ..config.errors import ConfigError

    if args.minbytes is None and args.maxbytes is None:
        if args.bytes is None:
            raise ConfigError("command line", "--bytes", "no message size given", "--bytes N, or -b MIN -e MAX [-f F]")
        return [parse_size(args.bytes)]
    if args.bytes is not None:
        raise ConfigError("command line", "--bytes", "given with -b / -e: one size or a sweep, not both",
                          "--bytes N, or -b MIN -e MAX [-f F]")
    low = parse_size(args.minbytes if args.minbytes is not None else args.maxbytes, "-b")
    high = parse_size(args.maxbytes if args.maxbytes is not None else args.minbytes, "-e")
    if low > high:
        raise ConfigError("command line", "-b", f"smallest size {low} above largest {high}", "-b <= -e")
    if not args.stepfactor > 1.0 or not math.isfinite(args.stepfactor):
        raise ConfigError("command line", "-f", f"step factor {args.stepfactor}", "a finite factor above 1")
    limit = getattr(args, "max_sizes", None) or MAX_SIZES
    out, size = [], low
    while size <= high:
        if len(out) >= limit:  # counted as they are made: the loop stops at the limit, whatever -f is
            count = _count_sizes(low, high, args.stepfactor)
            raise ConfigError("command line", "-f", f"-b {low} -e {high} -f {args.stepfactor!r} makes about {count:,} "
                              f"sizes, more than the limit of {int(limit):,}", "a larger -f, or raise the limit with "
                              f"--max-sizes {int(count * 1.2) + 1}")
        out.append(size)
        size = max(size + 1, int(size * args.stepfactor))
    if out[-1] != high:
        out.append(high)  # unlike nccl-tests, the largest size is always shown
    return out


def _count_sizes(low: int, high: int, factor: float) -> int:
    """About how many sizes -b low -e high -f factor makes, without making them: steps of +1 while the factor adds
    less than a byte, then geometric steps (the sizes are rounded down, so a few more in truth: within ~15%)."""
    if factor * max(low, 1) - max(low, 1) >= 1:
        return 1 + math.ceil(math.log(high / max(low, 1)) / math.log(factor))
    ones_until = math.ceil(1 / (factor - 1))  # from this size on a step multiplies by at least +1 byte
    if high <= ones_until:
        return high - low + 1
    return (ones_until - low) + 1 + math.ceil(math.log(high / ones_until) / math.log(factor))


def _load(args):
    from ..config.base import validate
    from ..config.errors import ConfigError
    from ..config.catalog import read_kind
    from ..config.paths import set_path
    from ..config.yaml_files import parse_override
    from ..config.topology import Topology

    args.topology, data = read_kind(args.topology, "topology")  # a name or a path; a scenario is named as such
    if not isinstance(data, dict):
        raise ConfigError(args.topology, "<root>", "expected a mapping for the topology")
    for text in args.overrides:
        path, value = parse_override(text)
        set_path(data, path, value, args.topology)
    return validate(Topology, data, args.topology)


def rows(topology, ranks: int, op: str, algorithm: str, message_sizes: list[int], launch: str = "graph",
         custom_rule=None) -> list[dict]:
    """One dict per size: nccl-tests' columns (size, time, algbw, busbw) and which algorithm produced it;
    custom_rule: the engine's custom all-reduce rule (its profile's custom_allreduce; None: NCCL under auto)."""
    from ..hardware.collectives import AllReduce, IMPLEMENTATION_NCCL, allreduce_bus_factor
    from ..hardware.interconnect import Fabric

    collective = AllReduce(Fabric(topology), ranks, algorithm, topology.gpu.kernel_floor_us, launch=launch,
                           custom_rule=custom_rule)
    out = []
    for nbytes in message_sizes:
        if op == "allreduce":
            cost = collective.cost(nbytes).as_dict()
            # nccl-tests' columns: algbw = size / time, busbw = algbw x 2 (n - 1) / n
            algbw = nbytes / (1000.0 * cost["time_us"]) if cost["time_us"] > 0 else 0.0
            cost.update(model_algbw_GBps=cost["algbw_GBps"], algbw_GBps=algbw,
                        busbw_GBps=algbw * allreduce_bus_factor(ranks))
            out.append({"op": op, "bytes": nbytes, "ranks": ranks, **cost})
        else:
            time = collective.allgather_us(nbytes // ranks if ranks else nbytes)
            algbw = nbytes / (1000.0 * time) if time > 0 else 0.0
            out.append({"op": op, "bytes": nbytes, "ranks": ranks, "algorithm": "nccl_ring", "protocol": "best",
                        "time_us": time, "algbw_GBps": algbw, "busbw_GBps": algbw * (ranks - 1) / ranks,
                        "implementation": IMPLEMENTATION_NCCL})
    return out


def _table(out: list[dict], topology, ranks: int, engine: tuple[str, str] | None = None) -> None:
    """nccl-tests' columns; with the engine's measured custom all-reduce, its model's CUDA-graph and eager times."""
    first = out[0]
    own = [row.get("engine_custom_allreduce") for row in out]
    extra = all(own) and bool(own)
    head = f" {'engine graph':>12} {'eager':>8}" if extra else ""
    print(f"# {first['op']} over {ranks} ranks of {topology.name}; sizes are the whole buffer, as in nccl-tests")
    print(f"# {'size':>12} {'count':>12} {'type':>6} {'time':>10} {'algbw':>7} {'busbw':>7}  {'algorithm':<14}{head}")
    print(f"# {'(B)':>12} {'(elements)':>12} {'':>6} {'(us)':>10} {'(GB/s)':>7} {'(GB/s)':>7}  {'':<14}"
          + (f" {'(us)':>12} {'(us)':>8}" if extra else ""))
    for row, mine in zip(out, own):
        tail = f" {mine['model_graph_us']:12.2f} {mine['model_eager_us']:8.2f}" if extra else ""
        print(f"  {row['bytes']:12d} {row['bytes'] // 2:12d} {'bf16':>6} {row['time_us']:10.2f} "
              f"{row['algbw_GBps']:7.2f} {row['busbw_GBps']:7.2f}  {row['algorithm'] + '/' + row['protocol']:<14}{tail}")
    for implementation in sorted({row["implementation"] for row in out}):
        print(f"# figures from: {implementation}")
    if extra:
        mine = own[-1]
        print(f"# engine graph / eager: {engine[0]} {engine[1]}'s custom all-reduce, aiconfigurator-core "
              f"{mine['model_basis']}: the one-shot fit below the kernel's bound, the table's rows from it to 8 MiB "
              f"(the profile: {mine['rule']})")


def main(args) -> int:
    if isinstance(args, list):  # called with argv by the dispatcher
        from . import ArgumentParser

        p = ArgumentParser(prog="python -m simulator collective", description=__doc__)
        configure(p)
        args = p.parse_args(args)
    from ..config.errors import ConfigError
    from ..config.scenario import ALLREDUCE_CHOICES
    from ..hardware.collectives import NotPermitted
    from .collective_engine import engine_rule, measured, measured_line, parse_engine

    topology = _load(args)
    ranks = topology.num_gpus if args.ranks is None else args.ranks
    if not 1 <= ranks <= topology.num_gpus:
        raise ConfigError("command line", "--ranks", f"{ranks} ranks on a {topology.num_gpus}-GPU topology",
                          f"1..{topology.num_gpus}")
    if args.algorithm not in ALLREDUCE_CHOICES:
        raise ConfigError("command line", "--algorithm", f"unknown algorithm {args.algorithm!r}", ", ".join(ALLREDUCE_CHOICES))
    engine = parse_engine(args.engine)
    try:
        out = rows(topology, ranks, args.op, args.algorithm, sizes(args), args.launch, engine_rule(engine)[0])
    except NotPermitted as exc:
        raise ConfigError("command line", "--algorithm", str(exc), "auto, nccl, nccl_ring, nccl_tree") from None
    except ValueError as exc:  # the fabric's own check (a GPU pair without a route): the file's mistake
        raise ConfigError(args.topology, "fabric", str(exc)) from None
    if args.op == "allreduce" and args.algorithm in ("auto", "one_shot", "two_shot"):
        for row in out:
            row["engine_custom_allreduce"] = measured(topology, ranks, engine, row["bytes"])
    if args.format == "json":
        print(json.dumps(out[0] if len(out) == 1 and args.bytes is not None else out, indent=2, default=float))
    elif len(out) == 1 and args.bytes is not None:
        row = out[0]
        print(f"{row['op']} of {row['bytes']:,} B over {ranks} ranks of {topology.name}: {row['time_us']:.2f} us")
        print(f"  algorithm {row['algorithm']} / {row['protocol']}, latency {row.get('latency_us', 0.0):.2f} us, "
              f"algorithm bandwidth {row['algbw_GBps']:.1f} GB/s, bus bandwidth {row['busbw_GBps']:.1f} GB/s")
        print(f"  figures from: {row['implementation']}")
        if "engine_custom_allreduce" in row:
            print(measured_line(row["engine_custom_allreduce"], engine))
    else:
        _table(out, topology, ranks, engine)
    return 0
