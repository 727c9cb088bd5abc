"""Progress of a long run on stderr: a tqdm bar (tokens generated, rate, time left) polled from a thread.

The engine hands every server it builds to the hooks in `engine.ON_START`; while `shown()` is active, a thread
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

from .. import engine
from ..config import Scenario
from ..config.typical import mean_length
from .limits import PROGRESS_AFTER_S, estimate_work, estimated_seconds

POLL_S = 0.5


@contextlib.contextmanager
def shown(scenario: Scenario, runs: int = 2, enabled: bool | None = None) -> Iterator[None]:
    """Show the progress of the `runs` simulations made inside the block when they are expected to be long."""
    seconds = estimated_seconds(estimate_work(scenario, runs))
    if enabled is False or (enabled is None and seconds < PROGRESS_AFTER_S):
        yield
        return
    workload = scenario.spec.workload
    total = runs * workload.requests * mean_length(workload.output_tokens)
    if not sys.stderr.isatty():
        print(f"{scenario.name}: about {total:,.0f} tokens to simulate, roughly {seconds:.0f} s", file=sys.stderr)
        yield
        return
    from tqdm import tqdm

    tqdm.monitor_interval = 0  # the polling thread below is the only extra thread
    width = shutil.get_terminal_size((100, 20)).columns or 100
    bar = tqdm(total=int(total), desc=scenario.name, unit="tok", file=sys.stderr, ncols=min(width, 120))
    servers: list = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            bar.n = min(int(total), sum(sum(r.generated for r in s.requests) for s in list(servers)))
            bar.refresh()

    thread = threading.Thread(target=poll, daemon=True)
    hook = servers.append
    engine.ON_START.append(hook)
    thread.start()
    try:
        yield
        bar.n = int(total)  # finished: the last poll may have been up to POLL_S ago
    finally:
        stop.set()
        thread.join()
        engine.ON_START.remove(hook)
        bar.close()
