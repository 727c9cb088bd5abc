"""The acceptance library: published acceptance of trained drafters (scenarios/acceptance/library.yaml), by name.

A scenario selects an entry with `speculation.acceptance: {library: <name>}`; it becomes the positional model the
simulator runs. An entry publishes mean accept lengths (bonus token included) for chains of k drafts (or trees of
depth k). Under the positional model a chain of k keeps 1 + P1 + ... + Pk tokens, Pd the product of the first d
per-depth probabilities, so the lengths published for k_1 < k_2 < ... fix the sum of Pd over each range of depths
(k_i, k_i+1]. *Assumption*: inside a range of several depths (the first range from depth 1 included) the per-depth
probability is one constant, solved for; a range of one depth is exact (P_k / P_k-1). A tree's published length is
carried by its accepted path: siblings are never accepted (sibling_decay 0), so a tree of that depth expects the
published length too. Depths beyond the deepest published one get probability 0 (nothing is known of them).
"""

import os
from typing import Any

from pydantic import Field, PositiveInt

from .base import Strict
from .errors import ConfigError


class LibraryEntry(Strict):
    drafter: str
    target: str
    dataset: str
    source: str = Field(description="Where the figures are printed (docs/sources.md has the full reference)")
    accept_lengths: dict[PositiveInt, float] = Field(min_length=1, description="Draft positions -> published mean "
                                                     "accept length (bonus token included)")
    note: str = ""


def library_file() -> str:
    from .catalog import data_dir

    return os.path.join(data_dir("scenario"), "acceptance", "library.yaml")


def entries() -> dict[str, LibraryEntry]:
    """Every entry of the shipped library, validated."""
    from .base import validate
    from .yaml_files import read_yaml

    path = library_file()
    return {name: validate(LibraryEntry, data, path, name) for name, data in (read_yaml(path) or {}).items()}


def _constant(share: float, depths: int) -> float:
    """p in [0, 1] with p + p^2 + ... + p^depths = share (monotone in p: bisection to double precision)."""
    low, high = 0.0, 1.0
    for _ in range(200):
        mid = (low + high) / 2
        if sum(mid ** d for d in range(1, depths + 1)) < share:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def positional_probs(accept_lengths: dict[int, float], where: str = "acceptance library") -> list[float]:
    """Per-depth probabilities whose chain of each published length k expects the published accept length."""
    probs: list[float] = []
    reached, prefix, length = 0, 1.0, 1.0
    for depth, published in sorted(accept_lengths.items()):
        span, gain = depth - reached, published - length
        if not 0.0 < gain <= span * prefix:
            raise ConfigError(where, f"accept_lengths.{depth}", f"{published} cannot follow {length} at depth "
                              f"{reached} (a depth adds between 0 and the previous depth's share)",
                              "accept lengths that rise with the depth, by at most one token a depth")
        p = gain / prefix if span == 1 else _constant(gain / prefix, span)
        probs += [p] * span
        prefix *= p ** span
        reached, length = depth, published
    return probs


def resolve(value: Any, where: str = "speculation.acceptance") -> Any:
    """A `{library: name}` mapping as the positional acceptance it stands for; anything else unchanged."""
    if not (isinstance(value, dict) and "library" in value):
        return value
    if set(value) != {"library"}:
        raise ValueError(f"a library acceptance takes only the key library, got {', '.join(sorted(value))}")
    library = entries()
    entry = library.get(value["library"])
    if entry is None:
        raise ValueError(f"unknown acceptance library entry {value['library']!r}; allowed: {', '.join(library)}")
    return {"kind": "positional", "probs": positional_probs(entry.accept_lengths, f"library {value['library']}"),
            "sibling_decay": 0.0}
