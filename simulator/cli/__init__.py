"""Command line: `python -m simulator SCENARIO.yaml` runs a scenario; other verbs are subcommands.

Exit status: 0 success, 2 configuration error (one line on stderr), 1 internal error.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from ..config.errors import ConfigError

COMMANDS = {
    "run": ("run", "simulate one scenario and its no-speculation baseline"),
    "collective": ("collective", "predicted time of one collective on a topology"),
    "calibrate": ("calibrate", "fit named parameters to measured figures"),
    "validate": ("validate", "published measurements against the simulator, with the error of each"),
    "bench": ("bench", "simulated tokens per wall-second of each fidelity"),
    "tree": ("tree", "the best token tree for a positional acceptance vector"),
    "sweep": ("sweep", "run a scenario over a grid, zip or random sample of config values"),
    "plots": ("plots", "regenerate the figures in plots/"),
    "breakeven": ("breakeven", "the accept length speculation needs, per chain / tree and verify mode"),
    "compare": ("compare", "scenarios (or variants of one) side by side, with common random numbers"),
    "plan": ("plan", "one lever at a time: what each change does to throughput, ranked"),
    "kernels": ("kernels", "shape-aware roofline vs the measured kernel database: error per GPU and kernel family"),
}


def _usage() -> str:
    lines = ["usage: python -m simulator SCENARIO.yaml [options]", "       python -m simulator COMMAND [options]", "",
             "commands:"]
    lines += [f"  {name:<11} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines.append("\n'python -m simulator COMMAND --help' for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    command = argv[0]
    if command not in COMMANDS:
        if command.endswith((".yaml", ".yml")) or os.path.exists(command):
            command, argv = "run", argv
        else:
            print(f"specsim: unknown command {command!r} (allowed: {', '.join(COMMANDS)}, or a scenario .yaml)",
                  file=sys.stderr)
            return 2
    else:
        argv = argv[1:]
    module_name = COMMANDS[command][0]
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    try:
        module = __import__(f"{__name__}.{module_name}", fromlist=["main"])
        return int(module.main(argv) or 0)
    except ConfigError as exc:
        print(exc.line(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # an internal error: say so in one line, the traceback on request
        if debug:
            traceback.print_exc()
        print(f"specsim: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return 1


def scenario_options(p: "ArgumentParser", formats=("table", "json"), fidelity: bool = True) -> None:
    """The options every scenario command shares: the file, --format, --set, --seed (and --fidelity)."""
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--format", choices=formats, default=formats[0])
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value",
                   help="override any scenario, topology (topology.*) or model (model.*) field; repeatable")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    if fidelity:
        p.add_argument("--fidelity", choices=("fast", "layer", "link"), help="override the scenario's fidelity")
    limit_options(p)


def limit_options(p: "ArgumentParser") -> None:
    """--max-work: the bound on a run's estimated work (see simulator.results.limits)."""
    p.add_argument("--max-work", type=float, metavar="N", help="refuse runs estimated above N weighted steps "
                   "(default 2e7, a few minutes; requests x (output tokens + prefill chunks) x fidelity weight)")


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage mistakes as configuration errors (exit 2, one line)."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError("command line", self.prog, message)
