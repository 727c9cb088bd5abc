"""Token streams of real text, shipped as a small derived sample (data/*.npz, built by corpora/build.py; sources and
licences in docs/corpora.md): `chat` (ShareGPT V3 conversations) and `code` (HumanEval problems with their canonical
solutions, then code-heavy ShareGPT conversations), tokenized by Mistral's Tekken tokenizer."""
from __future__ import annotations

import os

import numpy as np

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
NAMES = ("chat", "code")


class Corpus:
    """A corpus's streams (one conversation or one problem each), as token ids."""

    def __init__(self, name: str):
        if name not in NAMES:
            raise ValueError(f"unknown corpus {name!r} (one of {', '.join(NAMES)})")
        with np.load(os.path.join(DATA_DIR, f"{name}.npz")) as data:
            self.ids, self.offsets = data["tokens"], data["offsets"]
        self.name = name

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
