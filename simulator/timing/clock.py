"""Clocks that run ahead of SimPy's between events: where nothing else can happen before a step or a collective ends,
the engine adds the delay to its own clock instead of scheduling an event, and syncs SimPy when another process is
due. delay_to makes the two clocks agree to the bit."""
from __future__ import annotations

import math


def delay_to(now: float, at: float) -> float:
    """The delay d with now + d == at in floating point (SimPy schedules a timeout at now + delay), so that a clock
    moved on without events and the environment's agree to the bit (the rare pair with no such d gets the nearest)."""
    delay = at - now
    if now + delay != at:
        step = math.inf if now + delay < at else -math.inf
        for _ in range(4):
            delay = math.nextafter(delay, step)
            if now + delay == at:
                break
    return delay
