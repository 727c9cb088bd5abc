"""Token streams of real text, shipped as a small derived sample (data/*.npz, built by corpora/build.py; sources and
licences in docs/corpora.md): `chat` (ShareGPT V3 conversations) and `code` (HumanEval problems with their canonical
solutions, then code-heavy ShareGPT conversations), tokenized by Mistral's Tekken tokenizer."""
from __future__ import annotations

import os

import numpy as np

from ..cache import stored

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
NAMES = ("chat", "code")


class Corpus:
    """A corpus's streams (one conversation or one problem each), as token ids."""

    def __init__(self, name: str):
        if name not in NAMES:
            raise ValueError(f"unknown corpus {name!r} (one of {', '.join(NAMES)})")
        path = os.path.join(DATA_DIR, f"{name}.npz")
        stat = os.stat(path)
        self.ids, self.offsets = _loaded(path, stat.st_mtime_ns, stat.st_size)
        self.name = name
        self.value_key = (name, stat.st_mtime_ns, stat.st_size)  # what its streams are read from (as a YAML file's)

    @property
    def streams(self) -> int:
        return len(self.offsets) - 1

    def stream(self, index: int) -> np.ndarray:
        index %= self.streams
        return self.ids[self.offsets[index]:self.offsets[index + 1]]

    def tokens(self, index: int, count: int) -> list[int]:
        """`count` tokens for request slot `index`: the index-th stream (in the sample's order, wrapping round) of those
        that hold `count` tokens; where none does, stream `index` continued into the next ones (the conversations of
        one corpus concatenated in the sample's order)."""
        lengths = np.diff(self.offsets)
        long_enough = np.flatnonzero(lengths >= count)
        if len(long_enough):
            return self.stream(int(long_enough[index % len(long_enough)]))[:count].astype(np.int64).tolist()
        parts, total = [], 0
        while total < count:
            part = self.stream(index)[:count - total]
            parts.append(part)
            total += len(part)
            index += 1
        return np.concatenate(parts).astype(np.int64).tolist()


@stored
def _loaded(path: str, mtime_ns: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A corpus file's (token ids, stream offsets), read once per (path, modification time, size)."""
    with np.load(path) as data:
        return data["tokens"], data["offsets"]
