"""List what can be named: shipped and local topologies, model cards and scenarios (sweeps marked as such).

A name is looked up in the package's data first, then in ./topologies, ./scenarios/models (or ./models) and
./scenarios under the current directory; a path to a YAML file always works as well.
"""
from __future__ import annotations

import json

EXAMPLES = """
  specsim list scenarios                           names to give to run, plan, breakeven, compare
  specsim list topologies                          names for a scenario's topology: key or collective
  specsim list models --format json
"""


def configure(p) -> None:
    p.add_argument("what", choices=("topologies", "models", "scenarios"), help="which kind of file")
    p.add_argument("--format", choices=("table", "json"), default="table")


def main(args) -> int:
    from ..config.catalog import PLURALS, display_path, entries

    rows = entries(PLURALS[args.what])
    if args.format == "json":
        print(json.dumps([{"name": e.name, "file": display_path(e.path), "description": e.description,
                           "sweep": e.is_sweep} for e in rows], indent=2))
        return 0
    width = max([len(e.name) for e in rows] + [4])
    for e in rows:
        print(f"{e.name:<{width}}  {'(sweep) ' if e.is_sweep else ''}{e.description}")
    return 0
