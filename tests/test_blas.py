"""experiments.blas.one_blas_thread: a command's numpy loads OpenBLAS with one thread unless the user names a count,
and the environment is as it was afterwards (the processes a command starts see the user's)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from simulator.experiments.blas import THREAD_VARIABLES, one_blas_thread

from conftest import ROOT

# a fresh Python: numpy imported inside the context; then its threads (Linux lists them) and the environment
PROBE = ("import os, sys\n"
         "from simulator.experiments.blas import one_blas_thread\n"
         "with one_blas_thread() as setting:\n"
         "    inside = os.environ.get('OPENBLAS_NUM_THREADS')\n"
         "    import numpy\n"
         "print(setting, inside, os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))\n")


def _probe(**env) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**clean, "PYTHONPATH": ROOT, **env},
                         capture_output=True, text=True, check=True).stdout
    return out.split()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads through Linux's /proc; one core makes no pool to leave out")
def test_numpy_loads_without_the_pool_and_the_environment_is_restored():
    setting, inside, after, threads = _probe()
    assert (setting, inside, after) == ("True", "1", "None")
    assert threads == "1"  # the main thread alone
    pooled = _probe(OPENBLAS_NUM_THREADS="2")  # the user's count stands
    assert pooled[:3] == ["False", "2", "2"] and int(pooled[3]) >= 2


@pytest.mark.parametrize("name", THREAD_VARIABLES)
def test_a_thread_count_the_user_set_is_left_alone(name, monkeypatch):
    monkeypatch.setenv(name, "3")
    with one_blas_thread() as setting:
        assert not setting and os.environ[name] == "3"
    assert os.environ[name] == "3"


def test_nothing_is_set_once_numpy_is_loaded(monkeypatch):
    import numpy  # noqa: F401  (loaded in this process: its pool is what it is)

    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with one_blas_thread() as setting:
        assert not setting and "OPENBLAS_NUM_THREADS" not in os.environ
