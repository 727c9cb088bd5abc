"""Command line: `specsim COMMAND [options]` (or `python -m simulator ...`); `specsim SCENARIO [options]` means `run`.

argparse subparsers, one module per command; each module has `configure(parser)`, `main(args)` and `EXAMPLES`.
Results go to stdout; progress and notes go through the `specsim` logger to stderr (-q: warnings only, -v: debug).
Exit status: 0 success, 2 a user's mistake (one line on stderr), 1 an internal error (--debug for the traceback),
130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback

from ..config.errors import ConfigError
from ..config.version import __version__
from ..experiments.memory import tune_malloc

log = logging.getLogger("specsim")

# name -> (module, one-line help), in the order `specsim --help` lists them
COMMANDS = {
    "run": ("run", "simulate one scenario and its no-speculation baseline"),
    "compare": ("compare", "scenarios (or variants of one) side by side, with common random numbers"),
    "breakeven": ("breakeven", "the accept length speculation needs, per chain / tree and verify mode"),
    "plan": ("plan", "one lever at a time: what each change does to throughput, ranked"),
    "sweep": ("sweep", "run a scenario over a grid, zip or random sample of config values"),
    "pareto": ("pareto", "the frontier of output tok/s per GPU against tok/s per user, with and without speculation"),
    "collective": ("collective", "predicted time of one collective on a topology"),
    "tree": ("tree", "the best token tree for a positional acceptance vector"),
    "calibrate": ("calibrate", "fit named parameters to measured figures"),
    "validate": ("validate", "published measurements against the simulator, with the error of each"),
    "bench": ("bench", "simulated tokens per wall-second of each fidelity"),
    "plots": ("plots", "regenerate the README's figures (into ./plots by default)"),
    "import": ("imports", "a model card from config.json, a topology from nvidia-smi, a scenario from a launch command"),
    "list": ("listing", "the shipped and local topologies, models or scenarios, by name"),
    "schema": ("schema", "the configuration reference: every key, type, unit, default and allowed values"),
    "kernels": ("kernels", "shape-aware roofline vs the measured kernel database: error per GPU and kernel family"),
}

EXAMPLES = """examples:
  specsim run pcie8_ngram                       a shipped scenario by name (or a path to a YAML file)
  specsim pcie8_eagle3 --set runtime.cuda_graph_verify=true --format json
  specsim list scenarios                        what can be named
  specsim plan pcie8_eagle3                     what would make speculation pay
  specsim COMMAND --help                        a command's options and examples
"""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage mistakes as configuration errors (exit 2, one line)."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError("command line", self.prog, message)


def _common() -> ArgumentParser:
    """-v / -q / --debug, accepted before or after the command (SUPPRESS: a subcommand does not reset them)."""
    p = ArgumentParser(add_help=False)
    p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more detail on stderr")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="only warnings and errors on stderr (no progress)")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="print the traceback of an internal error")
    return p


def build_parser(only: str | None = None) -> ArgumentParser:
    """The whole command line; with `only` a command's name, only that command's options are built (the other
    commands are listed, their modules not imported: a run imports what it runs)."""
    common = _common()
    p = ArgumentParser(prog="specsim", parents=[common], epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Discrete-event simulator of multi-GPU LLM inference with speculative decoding.")
    p.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    for name, (module_name, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(f"{__name__}.{module_name}")
        doc = (module.__doc__ or help_text).strip().split("\n\n")[0]
        sp = sub.add_parser(name, parents=[common], help=help_text, description=doc,
                            epilog="examples:\n" + module.EXAMPLES.strip("\n"),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(sp)
        sp.set_defaults(handler=module.main)
    return p


def _with_command(argv: list[str]) -> list[str]:
    """`specsim SCENARIO ...` -> `specsim run SCENARIO ...` (the historical form); a near-miss command is an error."""
    for i, token in enumerate(argv):
        if token.startswith("-"):
            continue
        if token in COMMANDS:
            return argv
        looks_like_file = token.endswith((".yaml", ".yml")) or os.sep in token or os.path.exists(token)
        if not looks_like_file:
            from ..config.catalog import names

            scenarios = names("scenario")
            if token not in scenarios:
                import difflib  # here: only a mistyped command needs it

                close = difflib.get_close_matches(token, [*COMMANDS, *scenarios], n=1, cutoff=0.6)
                raise ConfigError("command line", token, "unknown command, and no scenario has this name" +
                                  (f"; did you mean {close[0]!r}?" if close else ""),
                                  ", ".join(COMMANDS) + ", or a scenario file or name (specsim list scenarios)")
        return argv[:i] + ["run"] + argv[i:]
    return argv


def _command_of(argv: list[str]) -> str | None:
    """The command argv names (its first word that is not an option), or None (then every command is built)."""
    first = next((token for token in argv if not token.startswith("-")), None)
    return first if first in COMMANDS else None


def _setup_logging(args) -> None:
    level = logging.WARNING if getattr(args, "quiet", False) else \
        logging.DEBUG if getattr(args, "verbose", 0) else logging.INFO
    log.handlers[:] = []
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


def show_progress() -> bool:
    """Whether progress bars are wanted: not with -q (tqdm itself stays quiet where stderr is not a terminal)."""
    return log.getEffectiveLevel() <= logging.INFO


def progress(iterable=None, **kwargs):
    """A tqdm progress bar on stderr that -q silences and a pipe does not garble (no bar where not a terminal)."""
    from tqdm import tqdm

    disable = None if show_progress() else True
    return tqdm(iterable, file=sys.stderr, disable=disable, leave=False, dynamic_ncols=True, **kwargs)


def note(bar, text: str) -> None:
    """Say what a progress bar is working on: in the bar on a terminal; where there is no bar (a pipe, a file, -q)
    a line per item is noise in a log, so it is a debug line (shown with -v)."""
    if getattr(bar, "disable", True):
        log.debug("%s", text)
    else:
        bar.set_postfix_str(text)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if not argv:
            build_parser().print_help(sys.stderr)
            return 2
        argv = _with_command(argv)
        args = build_parser(_command_of(argv)).parse_args(argv)
        _setup_logging(args)
        tune_malloc()  # every command allocates the same large arrays over and over (experiments.memory)
        if not getattr(args, "command", None):
            build_parser().print_help(sys.stderr)
            return 2
        from ..experiments.blas import one_blas_thread

        with one_blas_thread():  # numpy's OpenBLAS without its spinning thread pool (experiments.blas)
            from ..cache import held  # here: --help and --version import no numerics

        with held():  # the command's store (simulator.cache): what its runs share (bench's repetitions, a compare)
            return int(args.handler(args) or 0)
    except ConfigError as exc:
        print(exc.line(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in DEPENDENCIES:  # an installation's gap, not a bug
            print(f"specsim: the dependency {exc.name.split('.')[0]!r} is not installed for {sys.executable} "
                  f"(install specsim in this Python: pip install -e . from the checkout, or pip install specsim)",
                  file=sys.stderr)
            return 1
        return _internal(exc, debug)
    except Exception as exc:  # an internal error: say so in one line, the traceback on request
        if isinstance(exc, OSError) and exc.filename and exc.strerror:  # the system refused a file: not a bug
            kept = " (the previous file is unchanged)" if type(exc).__name__ == "OutputError" else ""
            print(f"specsim: cannot write {exc.filename}: {exc.strerror}{kept}" if kept else
                  f"specsim: {exc.filename}: {exc.strerror}", file=sys.stderr)
            return 1
        return _internal(exc, debug)



# the packages specsim's main path imports (pyproject.toml's dependencies, by import name)
DEPENDENCIES = frozenset({"simpy", "numpy", "scipy", "matplotlib", "yaml", "pydantic", "pydantic_core", "tqdm"})


def _internal(exc: BaseException, debug: bool) -> int:
    """An internal error: one line, the traceback with --debug; exit 1."""
    if debug:
        traceback.print_exc()
    print(f"specsim: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
          file=sys.stderr)
    return 1

def scenario_options(p: ArgumentParser, formats=("table", "json"), fidelity: bool = True) -> None:
    """The options every scenario command shares: the scenario, --format, --set, --seed (and --fidelity)."""
    p.add_argument("scenario", help="scenario: a YAML file, or the name of a shipped one (specsim list scenarios)")
    p.add_argument("--format", choices=formats, default=formats[0])
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="dotted.path=value",
                   help="override any scenario, topology (topology.*) or model (model.*) field; repeatable")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    if fidelity:
        p.add_argument("--fidelity", choices=("fast", "layer", "link", "event"), help="override the scenario's fidelity")
    limit_options(p, memory=True)


def limit_options(p: "ArgumentParser", memory: bool = False) -> None:
    """--max-work: the bound on a run's estimated work; with `memory`, --max-memory-GB: the bound on its estimated
    peak memory (see simulator.results.limits). Both refuse nan, inf, 0 and negative values at once."""
    from ..results.limits import MAX_MEMORY_GB, MAX_WORK, MEMORY_FLAG, limit_value

    p.add_argument("--max-work", type=limit_value("--max-work", MAX_WORK), metavar="N",
                   help=f"refuse runs estimated above N weighted steps (default {MAX_WORK:g}, a few minutes; requests x "
                   "(output tokens + prefill chunks + 4) x fidelity weight)")
    if memory:
        p.add_argument(MEMORY_FLAG, dest="max_memory_GB", type=limit_value(MEMORY_FLAG, MAX_MEMORY_GB), metavar="GB",
                       help=f"refuse runs whose estimated peak memory is above GB (default {MAX_MEMORY_GB:g})")


def overrides_of(args) -> list[str]:
    """--set overrides plus --seed and --fidelity as overrides, in that order."""
    out = list(getattr(args, "overrides", []) or [])
    if getattr(args, "seed", None) is not None:
        out.append(f"seed={args.seed}")
    if getattr(args, "fidelity", None):
        out.append(f"fidelity={args.fidelity}")
    return out
