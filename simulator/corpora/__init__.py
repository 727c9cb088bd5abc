"""Token streams of real text, shipped as a small derived sample (data/*.npz, built by corpora/build.py; sources and
licences in docs/corpora.md): `chat` (ShareGPT V3 conversations) and `code` (HumanEval problems with their canonical
solutions, then code-heavy ShareGPT conversations), tokenized by Mistral's Tekken tokenizer.

The token ids are read from the file's start only as far as the streams asked for reach (a prefix of the deflated
member, in doubling steps): pcie8_ngram's eight requests reach 51K of the chat sample's 1.56M tokens, and inflating
all 6.2 MB cost ~24 ms of a ~0.5 s command (issue 27)."""
from __future__ import annotations

import os
import zipfile

import numpy as np

from ..cache import current, stored

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
NAMES = ("chat", "code")
PREFIX_TOKENS = 1 << 16  # the smallest prefix read; each larger one doubles it (a bound on rereading, not a fit)


class Corpus:
    """A corpus's streams (one conversation or one problem each), as token ids."""

    def __init__(self, name: str):
        if name not in NAMES:
            raise ValueError(f"unknown corpus {name!r} (one of {', '.join(NAMES)})")
        path = os.path.join(DATA_DIR, f"{name}.npz")
        stat = os.stat(path)
        self._file = (path, stat.st_mtime_ns, stat.st_size)
        self.offsets = _offsets(*self._file)
        self.name = name
        self.value_key = (name, stat.st_mtime_ns, stat.st_size)  # what its streams are read from (as a YAML file's)

    @property
    def ids(self) -> np.ndarray:
        """Every token id of the corpus (its streams concatenated)."""
        return self._through(int(self.offsets[-1]))

    @property
    def streams(self) -> int:
        return len(self.offsets) - 1

    def stream(self, index: int) -> np.ndarray:
        index %= self.streams
        end = int(self.offsets[index + 1])
        return self._through(end)[self.offsets[index]:end]

    def _through(self, end: int) -> np.ndarray:
        """The token ids from the corpus's start to `end` at least: the shortest prefix held that reaches it, else the
        first of PREFIX_TOKENS, twice that, ... (all the tokens at most) that does, read and stored."""
        total, size, sizes = int(self.offsets[-1]), PREFIX_TOKENS, []
        while size < total:
            sizes.append(size)
            size <<= 1
        sizes = [s for s in sizes if s >= end] + [total]
        store = current()
        for size in sizes:
            held = store.peek(("corpora.prefix", *self._file, size))
            if held is not None:
                return held
        return store.get(("corpora.prefix", *self._file, sizes[0]), lambda: _prefix(self._file[0], sizes[0]))

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
def _offsets(path: str, mtime_ns: int, size: int) -> np.ndarray:
    """A corpus file's stream offsets (each stream's first token, then the total), read once per (path, modification
    time, size)."""
    with np.load(path) as data:
        return data["offsets"]


def _prefix(path: str, count: int) -> np.ndarray:
    """The first `count` token ids of a corpus file: its tokens.npy member inflated only that far (the .npy header,
    then count items)."""
    from numpy.lib import format as npy

    with zipfile.ZipFile(path) as archive, archive.open("tokens.npy") as member:
        version = npy.read_magic(member)
        shape, fortran, dtype = (npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0)(member)
        if len(shape) != 1 or fortran or dtype.hasobject or not 0 <= count <= shape[0]:
            raise ValueError(f"{path}: tokens.npy is not a flat array of at least {count} ids")
        data = member.read(count * dtype.itemsize)
    return np.frombuffer(data, dtype=dtype, count=count)
