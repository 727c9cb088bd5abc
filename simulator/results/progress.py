"""Progress of a long run on stderr: a tqdm bar (tokens generated, rate, time left) polled from a thread.

serving.simulate hands every server it builds to the hooks in `ON_START`; while `shown()` is active, a thread
reads the generated-token counts of those servers twice a second. Nothing is added to the event loop, so a run
with and without the bar gives the same result. The bar appears only for runs estimated to take longer than
limits.PROGRESS_AFTER_S and only on a terminal; elsewhere one line gives the estimate.
"""
from __future__ import annotations

import contextlib
import shutil
import sys
import threading
from typing import Iterator

from ..serving.simulate import ON_START
from ..config import Scenario
from ..config.typical import mean_length
from .limits import PROGRESS_AFTER_S, estimate_work, estimated_seconds

POLL_S = 0.5


@contextlib.contextmanager
def shown(scenario: Scenario, runs: int = 2, enabled: bool | None = None) -> Iterator[None]:
    """Show the progress of the `runs` simulations made inside the block when they are expected to be long.

    Nothing is printed before the first server starts: a run refused at its start (a request larger than the KV
    cache) says one line, the refusal, with no estimate before it."""
    seconds = estimated_seconds(estimate_work(scenario, runs))
    if enabled is False or (enabled is None and seconds < PROGRESS_AFTER_S):
        yield
        return
    workload = scenario.spec.workload
    total = runs * workload.requests * mean_length(workload.output_tokens)
    servers: list = []
    if not sys.stderr.isatty():
        def say(server) -> None:
            if not servers:
                print(f"{scenario.name}: about {total:,.0f} tokens to simulate, roughly {seconds:.0f} s",
                      file=sys.stderr)
            servers.append(server)

        ON_START.append(say)
        try:
            yield
        finally:
            ON_START.remove(say)
        return
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # the polling thread below is the only extra thread
    width = shutil.get_terminal_size((100, 20)).columns or 100
    bars: list = []  # the bar, made when the first server starts
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            if bars:
                bars[0].n = min(int(total), sum(sum(r.generated for r in s.requests) for s in list(servers)))
                bars[0].refresh()

    def hook(server) -> None:
        if not bars:
            bars.append(tqdm(total=int(total), desc=scenario.name, unit="tok", file=sys.stderr,
                             ncols=min(width, 120)))
        servers.append(server)

    thread = threading.Thread(target=poll, daemon=True)
    ON_START.append(hook)
    thread.start()
    try:
        yield
        if bars:
            bars[0].n = int(total)  # finished: the last poll may have been up to POLL_S ago
    finally:
        stop.set()
        thread.join()
        ON_START.remove(hook)
        if bars:
            bars[0].close()
