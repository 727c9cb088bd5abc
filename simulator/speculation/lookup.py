"""Model-free drafters as the engines run them, over token ids: each proposes a draft tree (children per node, node 0
the last verified token) for a request's history; greedy verification accepts the longest path that the actual
continuation follows (accepted()). Here vLLM's prompt lookup (method ngram): the longest suffix n-gram
(prompt_lookup_min..max) that occurred earlier, its earliest occurrence, and the k tokens after it as a chain.
SGLang's n-gram trie is in ngramtrie.py (its lone-request form in lonetrie.py), SuffixDecoding's suffix trees in
suffixtrees.py.
"""
from __future__ import annotations


def accepted(children: list[dict], continuation) -> int:
    """Drafts accepted under greedy verification: the longest tree path the continuation follows."""
    node, count = 0, 0
    for token in continuation:
        node = children[node].get(token)
        if node is None:
            break
        count += 1
    return count


class PromptLookup:
    """vLLM's n-gram proposer for one request: earliest occurrence of the longest matching suffix n-gram."""

    def __init__(self, min_n: int, max_n: int):
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        self.min_n, self.max_n = min_n, max_n
        self.first: dict = {}  # n-gram -> its earliest start, for n-grams ending before the history's last token
        self.indexed = 0  # n-grams ending before this position are in `first`
        self.match_len = 0

    def propose(self, history, length: int, drafts: int) -> list[dict]:
        first = self.first
        for end in range(self.indexed, length - 1):  # n-grams ending at end (< length - 1)
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                first.setdefault(tuple(history[end - n + 1:end + 1]), end - n + 1)
        self.indexed = max(self.indexed, length - 1)
        self.match_len = 0
        for n in range(min(self.max_n, length), self.min_n - 1, -1):
            start = first.get(tuple(history[length - n:length]))
            if start is not None:
                self.match_len = n
                return chain(history[start + n:min(start + n + drafts, length)])
        return [{}]


def chain(tokens) -> list[dict]:
    """A chain of drafts as a tree."""
    return [{token: k + 1} for k, token in enumerate(tokens)] + [{}]
