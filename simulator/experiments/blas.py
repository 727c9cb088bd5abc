"""OpenBLAS's thread pool for a command: one thread, unless the user says otherwise.

numpy's OpenBLAS starts a worker thread per core when it loads, and each worker spins waiting for work before it
sleeps: on this project's 2-core machine ~55 ms of CPU at every start (`python -c "import numpy"` 148 -> 92 ms with
OPENBLAS_NUM_THREADS=1, medians of 9), for nothing here: the simulator's arrays are small and OpenBLAS runs such
operations on the calling thread anyway. A command therefore loads numpy with OPENBLAS_NUM_THREADS=1 where none of
OpenBLAS's thread variables is set, and takes the variable out of the environment again once numpy is loaded, so the
processes it starts (a sweep's workers, bench's timed commands) see the user's environment. The same results: the
numbers do not depend on the pool's size (every shipped scenario's output compared, docs/speed.md).
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")  # OpenBLAS reads these, in order


@contextlib.contextmanager
def one_blas_thread() -> Iterator[bool]:
    """Within: numpy, if imported here for the first time, loads OpenBLAS with one thread (unless the environment
    names a thread count). Yields whether it set the variable; the environment is as it was afterwards."""
    setting = "numpy" not in sys.modules and not any(name in os.environ for name in THREAD_VARIABLES)
    if setting:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield setting
    finally:
        if setting:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
