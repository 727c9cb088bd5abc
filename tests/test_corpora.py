"""The shipped token streams (simulator/corpora): what Corpus reads against the whole sample read by numpy's own
np.load, and a short request reading only the start of the file (issue 27's start-up)."""
import numpy as np
import pytest

from simulator.cache import Store, held
from simulator.corpora import DATA_DIR, PREFIX_TOKENS, Corpus


def _whole(name):
    with np.load(f"{DATA_DIR}/{name}.npz") as data:
        return data["tokens"], data["offsets"]


def _expected(ids, offsets, index, count):
    """Corpus.tokens' rule written out over the whole arrays: the index-th stream long enough, else stream `index`
    continued into the next ones."""
    lengths = np.diff(offsets)
    long_enough = np.flatnonzero(lengths >= count)
    if len(long_enough):
        k = long_enough[index % len(long_enough)]
        return ids[offsets[k]:offsets[k + 1]][:count].tolist()
    out = []
    while len(out) < count:
        k = index % (len(offsets) - 1)
        out += ids[offsets[k]:offsets[k + 1]][:count - len(out)].tolist()
        index += 1
    return out


@pytest.mark.parametrize("name", ["chat", "code"])
def test_streams_read_from_the_file_start_are_the_whole_samples(name):
    ids, offsets = _whole(name)
    longest = int(np.diff(offsets).max())
    with held(Store()):
        corpus = Corpus(name)
        assert corpus.offsets.tolist() == offsets.tolist()
        # the first streams, one past the prefix's first doubling, the last one, a count no stream holds (joined)
        for index, count in [(0, 3048), (7, 3048), (3, 9192), (corpus.streams - 1, 1), (2, longest), (1, longest + 1),
                             (corpus.streams + 4, 500)]:
            assert corpus.tokens(index, count) == _expected(ids, offsets, index, count), (index, count)
        assert corpus.ids.tolist() == ids.tolist()


def test_a_short_request_inflates_only_the_start_of_the_sample():
    """pcie8_ngram's requests (1K prompt + 2K output, the first eight streams) reach 51K of the chat sample's 1.56M
    tokens: one prefix of PREFIX_TOKENS is read, and asked again it is not read twice."""
    store = Store()
    with held(store):
        corpus = Corpus("chat")
        for index in range(8):
            corpus.tokens(index, 3048)
    assert store.computed["corpora.prefix"] == 1
    assert store.nbytes_of("corpora.prefix") == PREFIX_TOKENS * 4 < corpus.offsets[-1] * 4
