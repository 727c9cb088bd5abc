"""Times, on this machine's CPython, the host work of TensorRT-LLM 1.0's n-gram drafter per request and step: the
pool algorithm of tensorrt_llm/_torch/speculative/ngram.py (NGramPoolManager.get_draft_tokens, called by
NGramDrafter.prepare_draft_tokens for every generation request, on the host, before the step's forward), written
here from its description, not copied:

- the request's whole token list is copied (`list(request.get_tokens(0))`);
- the pool (one dict for all requests: is_public_pool) is updated from the tokens since the last update: for every
  n-gram size from max_matching_ngram_size (k) down to 1 and every start position, the pattern (a tuple of the n
  tokens) maps to the tokens after it (a tuple of at most max_draft_len, v), kept in an insertion-ordered set where
  a longer match replaces the shorter ones (is_keep_all);
- the lookup tries the last k, k-1, ... 1 tokens as patterns and returns the oldest match (is_use_oldest);
- the next update starts v + k - 1 tokens before the end.

The first call of a request scans its whole prompt. Requests are chat-corpus streams (simulator/corpora/data/
chat.npz) of PROMPT prompt tokens generating OUTPUT tokens; the request advances by the accept length a step (the
blog's 1.66, as alternating 1 and 2 tokens and a third of 2s more). Stand-ins: the token list is a Python list
(TensorRT-LLM converts a C++ vector through pybind11, slower per element) and the ordered set a dict (the
`ordered-set` package is pure Python, slower); both make the figure a lower bound.

    python tools/trtllm_ngram_pool.py      # per-request host time a step, the first (prompt-scan) step apart

Not part of the package: its figure is written into engines/trtllm/1.0.0.yaml with this file named as its source.
"""
from __future__ import annotations

import os
import time

import numpy as np

PROMPT, OUTPUT, K, V, REQUESTS = 1024, 512, 3, 5, 20


class Pool:
    """The public pool: pattern tuple -> {match tuple: None} in insertion order (oldest first)."""

    def __init__(self, k: int, v: int):
        self.k, self.v, self.pool, self.start = k, v, {}, {}

    def draft(self, prefix: list, rid: int) -> list:
        n = len(prefix)
        start = self.start.setdefault(rid, 0)
        seq = prefix[start:]
        pool, v = self.pool, self.v
        for size in range(min(self.k, n - 1), 0, -1):
            for left in range(len(seq) - size):
                pattern = tuple(seq[left:left + size])
                match = tuple(seq[left + size:min(left + size + v, len(seq))])
                held = pool.get(pattern)
                if held is None:
                    pool[pattern] = {match: None}
                elif match not in held:
                    for old in [m for m in held if len(m) < len(match)]:
                        del held[old]
                    held[match] = None
        proposal = []
        for size in range(min(self.k, n - 1), 0, -1):
            held = pool.get(tuple(prefix[-size:]))
            if held is not None:
                proposal = list(next(iter(held)))[:v]
                break
        self.start[rid] = max(0, n - (v + self.k - 1))
        return proposal


def streams(count: int) -> list[list[int]]:
    here = os.path.dirname(os.path.abspath(__file__))
    data = np.load(os.path.join(here, "..", "simulator", "corpora", "data", "chat.npz"))
    tokens, offsets = data["tokens"], data["offsets"]
    out = []
    for i in range(len(offsets) - 1):
        if offsets[i + 1] - offsets[i] >= PROMPT + OUTPUT:
            out.append(tokens[offsets[i]:offsets[i] + PROMPT + OUTPUT].tolist())
        if len(out) == count:
            break
    return out


def run(texts) -> tuple[float, float, int]:
    """(CPU seconds of the first calls, of the later calls, number of later calls), one request at a time."""
    pool = Pool(K, V)
    first = later = 0.0
    calls = 0
    for rid, text in enumerate(texts):
        held, step = PROMPT, 0
        while held < PROMPT + OUTPUT:
            t0 = time.process_time()
            pool.draft(list(text[:held]), rid)  # the copy of the request's tokens, then the pool's work
            dt = time.process_time() - t0
            if step == 0:
                first += dt
            else:
                later += dt
                calls += 1
            held += 2 if step % 3 != 0 else 1  # 1.67 tokens a step
            step += 1
    return first, later, calls


def main() -> None:
    texts = streams(REQUESTS)
    best = None
    for _ in range(5):
        first, later, calls = run(texts)
        if best is None or later < best[1]:
            best = (first, later, calls)
    first, later, calls = best
    steps = calls + len(texts)
    print(f"{len(texts)} requests of {PROMPT} + {OUTPUT} tokens, k {K}, v {V}: "
          f"first call {1e6 * first / len(texts):.0f} us, later calls {1e6 * later / calls:.1f} us, "
          f"per step over the request's life {1e6 * (first + later) / steps:.1f} us")


if __name__ == "__main__":
    main()
