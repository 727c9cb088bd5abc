"""SGLang's n-gram drafter (speculative_algorithm NGRAM, cpp_ngram/trie_cache.cpp) as a trie over token ids: one
trie shared by every request. After each verify the last branch_length tokens of the request (prompt + output) are
inserted as their suffixes of length >= 2 (the prompt itself is not inserted at prefill); a child touched last is tried
first. A lookup walks the last w tokens for w = max_match_window .. min_match_window and expands, breadth first, each
matched node: breadth max_bfs at the shortest window falling by (max_bfs - min_bfs) / (windows) per window length and
per level, at least 1, merging equal tokens, until draft_tokens nodes. Its node-pool capacity (10M nodes) is not
modelled: a run inserts ~17 nodes a token. A history of lone requests runs on lonetrie.LoneTrie, the same trie kept
as text.
"""
from __future__ import annotations

def _descend(kids_of: list[dict], node: int, tokens) -> int:
    """Walk `tokens` down from `node`, adding missing children; each child touched moves to its parent's end (the
    most recently used order SGLang's trie keeps). Returns the last node."""
    for token in tokens:
        kids = kids_of[node]
        node = kids.pop(token, None)
        if node is None:
            node = len(kids_of)
            kids_of.append({})
        kids[token] = node
    return node

class SglangTrie:
    """SGLang's n-gram trie (BFS / recency match type): one per server, shared by all requests.

    Nodes are ints; kids[node] maps a token to its child node, in the order the children were touched (the last
    touched last, as SGLang moves a touched child to its list's front). Int-only dicts are not tracked by Python's
    cycle collector, which otherwise walks the whole trie at each full collection. Inserts come in runs, a run being
    one request's inserts in a row: the run's first insert walks every suffix of its window from the root; a later
    one continues each suffix it shares with the insert before from that suffix's last node (tails) over the new
    tokens only, touching ~40 nodes instead of ~170. The order is SGLang's: among siblings (equal length) a later
    start is touched later in both, and a run touches a node at its latest covered start (inlined for speed;
    tests/test_lookup_drafters.py checks it against the re-touching trie on random interleavings).
    """

    def __init__(self, branch_length: int, min_window: int, max_window: int, min_bfs: int, max_bfs: int):
        if not (1 <= min_window <= max_window < branch_length and 1 <= min_bfs <= max_bfs):
            raise ValueError("need 1 <= min_match_window <= max_match_window < branch_length, 1 <= min_bfs <= max_bfs")
        self.branch, self.min_window, self.max_window = branch_length, min_window, max_window
        self.min_bfs, self.scale = min_bfs, (max_bfs - min_bfs) / (max_window - min_window + 1)
        self.kids: list[dict[int, int]] = [{}]  # node -> {token: child}; node 0 is the root
        self.run = None  # (request, end, first start, tails): the run the last insert belongs to
        self.match_len = 0  # the longest window the last lookup matched

    def insert(self, request, tokens, end: int) -> None:
        """After a verify: the last branch_length tokens of tokens[:end] (request's), every suffix longer than
        min_match_window."""
        lo, last = max(0, end - self.branch), end - self.min_window  # suffixes start at lo .. last - 1
        kids_of, run = self.kids, self.run
        tails, first = [], lo
        if run is not None and run[0] == request and run[1] <= end:
            _, prev_end, prev_lo, prev_tails = run
            if prev_end == end:
                return  # the same window again: the order stays
            if lo - prev_lo < len(prev_tails):
                tails = prev_tails[lo - prev_lo:]
                new = tokens[prev_end:end]
                if len(new) == 1:  # one new token (most steps accept nothing): the loop below without its inner loop
                    token = new[0]
                    for k, node in enumerate(tails):
                        kids = kids_of[node]
                        node = kids.pop(token, None)
                        if node is None:
                            node = len(kids_of)
                            kids_of.append({})
                        tails[k] = kids[token] = node
                else:
                    for k, node in enumerate(tails):  # a suffix of the insert before: its new tokens only (_descend
                        for token in new:             # inlined: ~17 tails a step, the walk's hottest loop)
                            kids = kids_of[node]
                            node = kids.pop(token, None)
                            if node is None:
                                node = len(kids_of)
                                kids_of.append({})
                            kids[token] = node
                        tails[k] = node
                first = lo + len(tails)
        for i in range(first, last):  # a new start: its whole suffix from the root
            tails.append(_descend(kids_of, 0, tokens[i:end]))
        self.run = (request, end, lo, tails)

    def may_accept(self, tokens, length: int) -> bool:
        """Whether a proposal for tokens[:length] can hold tokens[length] at its root at all: every root child is a
        child of a matched window, whose last min_match_window + 1 tokens an insert put in the trie from the root,
        so without that path the greedy verify accepts nothing and propose() need not run."""
        start = length - self.min_window
        if start < 0:
            return False
        node, kids_of = 0, self.kids
        for token in tokens[start:length + 1]:
            node = kids_of[node].get(token)
            if node is None:
                return False
        return True

    def propose(self, tokens, length: int, drafts: int, request=None) -> list[dict]:
        """The draft tree for a request whose tokens so far are tokens[:length] (at most `drafts` nodes besides the
        root). A window's node is the tail of the request's last insert where that ended at `length` (the hot path:
        the tree's size kept in a local, not counted again)."""
        children: list[dict] = [{}]
        size, match_len = 1, 0
        kids_of, scale, run = self.kids, self.scale, self.run
        tails, offset = ((run[3], length - run[2]) if run is not None and run[0] == request and run[1] == length
                         else ((), 0))
        num_tails = len(tails)
        for window in range(min(length, self.max_window), self.min_window - 1, -1):
            if 0 <= offset - window < num_tails:
                node = tails[offset - window]
            else:
                node = 0
                for token in tokens[length - window:length]:
                    node = kids_of[node].get(token)
                    if node is None:
                        break
                if node is None:
                    continue
            if size > drafts:
                break  # full: a shorter window changes neither the tree nor the longest match
            if not match_len:
                match_len = window  # the first match is the longest
            if not kids_of[node]:
                continue
            queue, at = [(0, (self.max_window - window) * scale + self.min_bfs, node)], 0
            while at < len(queue) and size <= drafts:
                parent, breadth, trie_node = queue[at]
                at += 1
                kids, here = kids_of[trie_node], children[parent]
                cap, taken = max(1, int(breadth)), 0
                for token in reversed(kids):
                    if taken >= cap or size > drafts:
                        break
                    taken += 1
                    pos = here.get(token)
                    if pos is None:
                        pos = here[token] = size
                        children.append({})
                        size += 1
                    queue.append((pos, breadth - scale, kids[token]))
        self.match_len = match_len
        return children
