"""python -m simulator (and the specsim script): see simulator.cli."""
import gc
import sys

from .cli import main as _command


def main(argv: list[str] | None = None) -> int:
    """The command, as the process's last work: what it made is then frozen and the cycle collector turned off, so
    Python's exit does not walk every object left (its full collection at exit, and finalize_modules' three: ~5% of
    pcie8_ngram's instructions, ~0.1 s of its CPU). Atexit handlers and the flush of stdout/stderr run as before;
    only garbage cycles left at exit are not collected (every file the commands write is closed explicitly)."""
    code = _command(argv)
    gc.freeze()
    gc.disable()
    return code


if __name__ == "__main__":
    sys.exit(main())
