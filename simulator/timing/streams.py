"""Random blocks memoised per process by the state of the generator that draws them: a block of a stream depends on
nothing else, so runs that start the same stream (a sweep's points, a run and its baseline) draw it once. A hit
leaves the generator in the state the draw would have left it in."""
from __future__ import annotations

from typing import Callable

import numpy as np

_BLOCKS: dict[tuple, tuple] = {}  # (what is drawn, the generator's state) -> (the block, the state after)
_BLOCKS_SIZE = 16  # each a list of ~16K numbers (~0.5 MB); a run draws a few


def stream_key(rng: np.random.Generator) -> tuple:
    """A generator's state by value: the draws it will make."""
    state = rng.bit_generator.state
    return (state["bit_generator"], tuple(sorted(state["state"].items())), state.get("has_uint32"),
            state.get("uinteger"))


def block(rng: np.random.Generator, what: tuple, draw: Callable[[np.random.Generator], list]) -> list:
    """draw(rng) (a list, shared: only read), memoised by `what` (everything that names the draw besides the
    generator) and the generator's state."""
    key = (what, stream_key(rng))
    hit = _BLOCKS.get(key)
    if hit is None:
        if len(_BLOCKS) >= _BLOCKS_SIZE:
            _BLOCKS.pop(next(iter(_BLOCKS)))
        hit = _BLOCKS[key] = (draw(rng), rng.bit_generator.state)
    else:
        rng.bit_generator.state = hit[1]
    return hit[0]
