"""Process memory behaviour: glibc's malloc told to keep freed memory instead of returning it to the kernel, and
Python's cycle collector kept off the objects every sweep point shares (and, in one run, off its start-up's).

A run allocates and frees the same large arrays over and over (per-shape sample tables: (samples, ranks, segments)
arrays of ~0.5 MB, and the step log's columns). By default glibc serves such blocks with fresh mmaps and trims its
heap as soon as they are freed, so every allocation page-faults again: a run of fresh per-shape tables spends a
quarter of its time in the kernel. Keeping up to MALLOC_KEEP_BYTES and serving blocks below MALLOC_MMAP_BYTES from
the heap removes that (measured: a 2K-token fast run from a fresh seed 58 -> 41 ms of CPU).

A sweep point allocates a few thousand container objects (step rows, lists of 16,384 random indices, the machine's
fabric graph, whose nodes and links refer to each other, so only the cycle collector frees them). With CPython's
default thresholds (a young collection every 700 allocations, a full one when the old generation has grown by a
quarter) the collector took 1.5 ms of a ~20 ms 2K-token point: young collections during a run walk the run's live
lists again, and a full one the ~45,000 objects of the imported modules, the base scenario and the warm caches.
`sweep_gc` moves those into the permanent generation (gc.freeze; in a forked worker no collection then writes to
the pages it shares with its parent) and collects the young generations once after each point (`after_point`),
when the run's objects are gone and only its cycles and new cache entries are left, with an automatic young
collection only every SWEEP_GC_YOUNG allocations as the bound within a long point: 1.1 ms a point, freeing the
point's cycles included, and a lower peak (162 MB against 170 MB; measured on 300 points of the 1,000-point sweep
scenarios/sweep_random_machines.yaml).
"""
from __future__ import annotations

import contextlib
import gc
from typing import Callable, Iterator

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters (malloc.h)
MALLOC_KEEP_BYTES = 256 << 20  # freed memory kept in the process before glibc returns it to the kernel
MALLOC_MMAP_BYTES = 64 << 20  # allocations below this come from the heap (reused), not fresh mmaps
SWEEP_GC_YOUNG = 100_000  # allocations between automatic young collections within a sweep point (a bound)
_sweeping = [0]  # sweep_gc contexts open in this process (a forked worker inherits its parent's)


def tune_malloc() -> bool:
    """Keep freed memory in the process (glibc; elsewhere nothing happens). True if glibc took the settings."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: libc, without searching for it
    except (ImportError, OSError, AttributeError, TypeError):
        return False
    return all([mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_BYTES) == 1, mallopt(M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES) == 1,
                mallopt(M_TOP_PAD, MALLOC_MMAP_BYTES) == 1])


@contextlib.contextmanager
def sweep_gc() -> Iterator[None]:
    """While a sweep runs (in this process and the workers forked inside): what is alive now is frozen out of the
    cycle collector's walks, and the young generations are collected after each point (`after_point`) and every
    SWEEP_GC_YOUNG allocations within one; all undone after, but a freeze the caller already held stays."""
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.collect()  # garbage is not frozen: the start-up's cycles are freed first
    gc.freeze()
    gc.set_threshold(SWEEP_GC_YOUNG, *threshold[1:])
    _sweeping[0] += 1
    try:
        yield
    finally:
        _sweeping[0] -= 1
        gc.set_threshold(*threshold)
        if not frozen:  # a caller's own freeze stays
            gc.unfreeze()


def after_point() -> None:
    """A sweep point has ended: collect the young generations if `sweep_gc` holds (elsewhere the thresholds do)."""
    if _sweeping[0]:
        gc.collect(1)


@contextlib.contextmanager
def startup_gc() -> Iterator[Callable[[], None]]:
    """While a command imports its modules and loads its scenario, the cycle collector is off: nearly everything
    made then (modules, classes, functions, the configuration) lives as long as the process, so young collections
    only walk survivors again (~115 collections, ~45 ms of CPU on pcie8_ngram). Calling the yielded `started()`
    when the work begins freezes what is alive then (~47,000 objects; the few hundred in garbage cycles are kept
    until the end) and turns the collector back on, so the run's collections do not walk them again (~45 -> ~8 ms),
    with a young collection every SWEEP_GC_YOUNG allocations as a sweep point has (the bound on a run's cycles left
    for the collector; pcie8_ngram's 19 young collections -> none: 53 of its 1,644 million instructions).
    On exit the collector and its thresholds are as they were and the freeze undone, but a caller's freeze stays."""
    enabled, frozen, threshold = gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()
    gc.disable()

    def started() -> None:
        gc.freeze()
        gc.set_threshold(max(SWEEP_GC_YOUNG, threshold[0]), *threshold[1:])
        if enabled:
            gc.enable()

    try:
        yield started
    finally:
        gc.set_threshold(*threshold)
        if enabled:
            gc.enable()
        if not frozen:
            gc.unfreeze()
