"""Process memory behaviour: glibc's malloc told to keep freed memory instead of returning it to the kernel.

A run allocates and frees the same large arrays over and over (per-shape sample tables: (samples, ranks, segments)
arrays of ~0.5 MB, and the step log's columns). By default glibc serves such blocks with fresh mmaps and trims its
heap as soon as they are freed, so every allocation page-faults again: a run of fresh per-shape tables spends a
quarter of its time in the kernel. Keeping up to MALLOC_KEEP_BYTES and serving blocks below MALLOC_MMAP_BYTES from
the heap removes that (measured: a 2K-token fast run from a fresh seed 58 -> 41 ms of CPU).
"""
from __future__ import annotations

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters (malloc.h)
MALLOC_KEEP_BYTES = 256 << 20  # freed memory kept in the process before glibc returns it to the kernel
MALLOC_MMAP_BYTES = 64 << 20  # allocations below this come from the heap (reused), not fresh mmaps


def tune_malloc() -> bool:
    """Keep freed memory in the process (glibc; elsewhere nothing happens). True if glibc took the settings."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: libc, without searching for it
    except (ImportError, OSError, AttributeError, TypeError):
        return False
    return all([mallopt(M_MMAP_THRESHOLD, MALLOC_MMAP_BYTES) == 1, mallopt(M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES) == 1,
                mallopt(M_TOP_PAD, MALLOC_MMAP_BYTES) == 1])
