"""SuffixDecoding (Arctic Inference; vLLM method suffix) over token ids: counted tries of every substring up to
max_tree_depth tokens over the request's prompt + output and over every request's output (the running one's as it
grows); for each match length m the most frequent continuation, stopped when its estimated probability (product of
child / parent counts) falls below min_token_prob, at most max_spec_factor * m + offset tokens (and m + drafts <=
max_tree_depth); the candidate with the highest score (summed probabilities) wins, the longer match and the
request's tree on a tie (Arctic Inference v0.0.6, SuffixCache.speculate).
"""
from __future__ import annotations

from .lookup import chain


class CountedTrie:
    """Every substring up to `depth` tokens of the sequences added, with its count. Nodes are ints (int-only lists
    and dicts, which Python's cycle collector does not walk); best[node] is the child of the highest count, the
    earliest of equals (as max() over the children in their order finds it), kept as counts grow: only the child just
    counted can overtake it. Sequences added are counted when the trie is next read."""

    def __init__(self, depth: int):
        self.depth = depth
        self.counts, self.kids, self.best, self.token = [0], [{}], [-1], [-1]  # per node; node 0 is the root
        self.pending: list = []

    def add(self, tokens) -> None:
        """A whole sequence (an earlier request's output)."""
        self.pending.append(tokens)

    def find(self, pattern):
        """The node of `pattern`, or None."""
        while self.pending:
            tail = Tail(self)
            for token in self.pending.pop(0):
                tail.push(token)
        node, kids = 0, self.kids
        for token in pattern:
            node = kids[node].get(token)
            if node is None:
                return None
        return node


class Tail:
    """A sequence being appended to a CountedTrie: the nodes of its last 0..depth-1 tokens, so a token costs depth
    updates."""

    def __init__(self, trie: CountedTrie):
        self.trie, self.nodes = trie, [0]

    def push(self, token) -> None:
        trie = self.trie
        counts, kids_of, best = trie.counts, trie.kids, trie.best
        nodes = [0]
        for node in self.nodes[:trie.depth]:
            kids = kids_of[node]
            child = kids.get(token)
            if child is None:
                child = kids[token] = len(counts)
                counts.append(0)
                kids_of.append({})
                best.append(-1)
                trie.token.append(token)
            count = counts[child] = counts[child] + 1
            top = best[node]
            if top != child and (top < 0 or count > counts[top] or (count == counts[top] and child < top)):
                best[node] = child
            nodes.append(child)
        self.nodes = nodes


class SuffixDrafter:
    """SuffixDecoding for one request (Arctic Inference v0.0.6, SuffixCache.speculate): its own tree over prompt +
    output, and the server's tree of outputs, the earlier requests' and this one's as it grows (from `output_start`)."""

    def __init__(self, depth: int, factor: float, offset: float, min_prob: float, shared: CountedTrie | None,
                 output_start: int = 0):
        self.own, self.shared = CountedTrie(depth), shared
        self.tail, self.pushed = Tail(self.own), 0
        self.shared_tail, self.output_start = (Tail(shared) if shared is not None else None), output_start
        self.factor, self.offset, self.min_prob = factor, offset, min_prob
        self.match_len = 0

    def extend(self, history, length: int) -> None:
        """The request's tokens up to `length` into its own tree, and its output's into the shared one."""
        start = max(self.pushed, self.output_start)
        for token in history[self.pushed:length]:
            self.tail.push(token)
        if self.shared_tail is not None:
            while self.shared.pending:  # earlier outputs added whole are counted first
                self.shared.find(())
            for token in history[start:length]:
                self.shared_tail.push(token)
        self.pushed = max(self.pushed, length)

    def propose(self, history, length: int, drafts: int) -> list[dict]:
        """Per tree, every match length m, the longest winning a tie (Arctic walks them longest first); the shared
        tree's best replaces the own tree's only with a higher score."""
        self.extend(history, length)
        depth = self.own.depth
        best, best_score, self.match_len = [], 0.0, 0
        trees = [self.own] if self.shared is None else [self.own, self.shared]
        for trie in trees:
            counts, top, token_of = trie.counts, trie.best, trie.token
            tree_best, tree_score = [], 0.0
            for m in range(1, min(depth - 1, length) + 1):
                node = self.tail.nodes[m] if trie is self.own else trie.find(history[length - m:length])
                if node is None:
                    break  # a longer suffix is absent too
                self.match_len = max(self.match_len, m)
                limit = min(drafts, int(self.factor * m + self.offset + 1e-6), depth - m)
                tokens, prob, score = [], 1.0, 0.0
                while len(tokens) < limit and top[node] >= 0:
                    child = top[node]  # the most frequent continuation (the first of equals)
                    prob *= counts[child] / counts[node]
                    if prob < self.min_prob:
                        break
                    tokens.append(token_of[child])
                    score += prob
                    node = child
                if score > 0.0 and score >= tree_score:
                    tree_best, tree_score = tokens, score
            if tree_score > best_score:
                best, best_score = tree_best, tree_score
        return chain(best)
