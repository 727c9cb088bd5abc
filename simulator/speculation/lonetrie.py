"""SGLang's n-gram trie (ngramtrie.SglangTrie) over a history of lone requests, each walked alone to its end after the
ones before, kept as the requests' text: the same proposals, about one node visit a token instead of ~17.
"""
from __future__ import annotations

NEVER = 1 << 62  # LoneTrie.after where no insert has ended past a position


class LoneTrie:
    """SglangTrie over a history of lone requests (each walked alone to its end, after the ones before), kept as its
    text: such a history inserts every start's suffix at every insert whose window holds the start, so the trie holds
    the text from a start p through position x wherever an insert ended past x within branch_length of p, and among
    siblings the later start was touched last. A node's children are the tokens after its occurrences so held, the
    latest first. Kept per token: the walked requests' text in a row and, per position, the first insert end past it
    (after); per covered start, its end in the list of its first min_match_window + 1 tokens, held by the first
    min_match_window tokens' dict in recency order (the shortest window's children); a longer window's occurrences
    are found among the ends of the context's last min_match_window + 1 tokens. About one node visit a token instead
    of SglangTrie's ~17; the same proposals over such a history (tests/test_lookup_drafters.py against SglangTrie's
    steps and the brute force)."""

    def __init__(self, branch_length: int, min_window: int, max_window: int, min_bfs: int, max_bfs: int):
        self.branch, self.min_window, self.max_window = branch_length, min_window, max_window
        self.min_bfs, self.scale = min_bfs, (max_bfs - min_bfs) / (max_window - min_window + 1)
        self.text: list = []
        self.after: list[int] = []  # per position x: the first insert end past x in x's request (NEVER: none yet)
        self.heads: dict = {}  # first min_window tokens of a covered start -> {next token: its ends, ascending}

    def _start(self, tokens) -> int:
        """A request's tokens after the ones before, a separator first (a match read backwards stops there)."""
        self.text.append(None)
        self.text.extend(tokens)
        self.after.extend([NEVER] * (len(tokens) + 1))
        return len(self.text) - len(tokens)

    def take(self, tokens, ends) -> None:
        """A request's inserts without its proposals (a walk found in the store), at each of `ends` in turn."""
        base = self._start(tokens)
        text, after, heads = self.text, self.after, self.heads
        m, single, last, covered = self.min_window, self.min_window == 1, base, base
        for end in ends:
            end += base
            after[last:end] = [end] * (end - last)
            last = end
            lo, hi = max(base, end - self.branch), end - m
            if hi > lo:
                for p in range(max(covered, lo), hi):
                    key = text[p] if single else tuple(text[p:p + m])
                    kids = heads.setdefault(key, {})
                    found = kids.pop(text[p + m], None)
                    if found is None:
                        found = []
                    found.append(p + m + 1)
                    kids[text[p + m]] = found
                covered = hi

    def walk(self, tokens, position: int, remaining: int, drafts: int) -> list[int]:
        """Drafts accepted at each step of a lone request whose tokens are `tokens`, from `position` with `remaining`
        tokens to generate (SglangTrie's may_accept, propose and insert after each step; loop, insert and accepted()
        inlined, the shortest window of one token apart: the walks are most of an n-gram run's CPU)."""
        base = self._start(tokens)
        text, after, heads = self.text, self.after, self.heads
        branch, m = self.branch, self.min_window
        single = m == 1
        heads_get, propose = heads.get, self.propose
        length = base + position
        out = []
        append = out.append
        covered = last = base  # starts below `covered` are covered (or never will be); `last`: the last insert end
        while remaining > 0:
            start, taken = length - m, 0
            if start >= base:  # may_accept: the next token under the shortest window
                kids = heads_get(text[start] if single else tuple(text[start:length]))
                if kids is not None and text[length] in kids:
                    children, node, at = propose(length, length - base, drafts), 0, length
                    for token in text[length:length + drafts]:  # accepted(), inlined
                        node = children[node].get(token)
                        if node is None:
                            break
                        at += 1
                    taken = at - length
            append(taken)
            if taken < remaining:
                emitted = taken + 1
                remaining -= emitted
            else:
                emitted, remaining = remaining, 0
            end = length = length + emitted
            if last == end - 1:
                after[last] = end
            else:
                after[last:end] = [end] * (end - last)
            last = end
            lo, hi = end - branch, end - m  # the insert's starts
            if lo < base:
                lo = base
            if covered < lo:
                covered = lo
            if single:
                while covered < hi:  # newly covered: their first two tokens
                    key = text[covered]
                    kids = heads_get(key)
                    if kids is None:
                        kids = heads[key] = {}
                    covered += 1
                    token = text[covered]
                    found = kids.pop(token, None)
                    if found is None:
                        kids[token] = [covered + 1]
                    else:
                        found.append(covered + 1)
                        kids[token] = found
                continue
            while covered < hi:  # newly covered: their first m + 1 tokens
                key = tuple(text[covered:covered + m])
                kids = heads_get(key)
                if kids is None:
                    kids = heads[key] = {}
                token = text[covered + m]
                found = kids.pop(token, None)
                covered += 1
                if found is None:
                    kids[token] = [covered + m]
                else:
                    found.append(covered + m)
                    kids[token] = found
        return out

    def propose(self, length: int, local: int, drafts: int) -> list[dict]:
        """SglangTrie.propose for the context text[:length] (`local` of its tokens the request's)."""
        text, after, heads = self.text, self.after, self.heads
        m, scale, max_w, min_bfs, branch = self.min_window, self.scale, self.max_window, self.min_bfs, self.branch
        shortest = m + 1
        children: list[dict] = [{}]
        size = 1
        top = local if local < max_w else max_w
        pairs, high = [], 0  # (an end of the context's last m + 1 tokens, the longest window with children there)
        if top >= shortest:
            kids = heads.get(text[length - shortest] if m == 1 else tuple(text[length - shortest:length - 1]))
            ends = kids.get(text[length - 1]) if kids is not None else None
            if ends is not None:
                for q in reversed(ends):
                    # window k has a child at q where an insert ended past q within branch of its start q - k
                    k = branch + q - after[q]
                    if k > top:
                        k = top
                    if k < shortest:
                        continue
                    at = shortest
                    while at < k and text[q - at - 1] == text[length - at - 1]:
                        at += 1
                    if at > k:
                        at = k
                    pairs.append((q, at))
                    if at > high:
                        high = at
        chain_q = -1  # the single occurrence the last window walked, and where that walk stopped
        for window in range(high if high else m, m - 1, -1):
            if size > drafts:
                break
            if window > m:
                occ = [q for q, k in pairs if k >= window]
                if len(occ) == 1:  # one occurrence: its breadth-first expansion is a chain from the root
                    q = occ[0]
                    limit = q - window + branch
                    if q != chain_q:
                        chain_q, parent, at = q, 0, q
                    parent, at, size = _walk_chain(children, text, after, parent, at, limit, size, drafts)
                    continue
                level, asc = [(0, occ)], False
            else:
                level = heads.get(text[length - 1] if m == 1 else tuple(text[length - m:length]))
                if level is None:
                    continue
                asc = False
            # breadth first, a level at a time: (draft node, occurrences: an end, or a list of them, latest first
            # unless asc)
            breadth, depth = (max_w - window) * scale + min_bfs, window
            while level:
                cap = int(breadth)
                if cap < 1:
                    cap = 1
                breadth -= scale
                nxt = []
                slack = branch - depth  # an occurrence ending at q has a child where after[q] - q <= slack
                if level.__class__ is dict:  # the shortest window's node: its children in recency order
                    here, taken = children[0], 0
                    for token, ends in reversed(level.items()):
                        if taken >= cap or size > drafts:
                            break
                        taken += 1
                        pos = here.get(token)
                        if pos is None:
                            pos = here[token] = size
                            children.append({})
                            size += 1
                        nxt.append((pos, ends[0] if len(ends) == 1 else ends))
                    asc = True  # the ends lists run oldest first
                elif len(level) == 1 and level[0][1].__class__ is int:  # one chain: the rest walks it
                    parent, q = level[0]
                    size = _walk_chain(children, text, after, parent, q, q + slack, size, drafts)[2]
                    break
                else:
                    for parent, occ in level:
                        if size > drafts:
                            break
                        here = children[parent]
                        if occ.__class__ is int:  # one occurrence: one child at most
                            if after[occ] - occ <= slack:
                                token = text[occ]
                                pos = here.get(token)
                                if pos is None:
                                    pos = here[token] = size
                                    children.append({})
                                    size += 1
                                nxt.append((pos, occ + 1))
                            continue
                        groups: dict = {}  # child token -> its occurrences, latest first
                        for q in (reversed(occ) if asc else occ):
                            if after[q] - q <= slack:
                                token = text[q]
                                found = groups.get(token)
                                if found is None:
                                    groups[token] = [q + 1]
                                else:
                                    found.append(q + 1)
                        taken = 0
                        for token, found in groups.items():
                            if taken >= cap or size > drafts:
                                break
                            taken += 1
                            pos = here.get(token)
                            if pos is None:
                                pos = here[token] = size
                                children.append({})
                                size += 1
                            nxt.append((pos, found[0] if len(found) == 1 else found))
                    asc = False
                if size > drafts:
                    break
                level, depth = nxt, depth + 1
        return children


def _walk_chain(children: list[dict], text, after, parent: int, at: int, limit: int, size: int, drafts: int):
    """LoneTrie.propose's walk down one occurrence's chain: from draft node `parent`, the text's tokens from `at` on,
    while an insert ended within `limit` past them (after[at] <= limit) and the tree has room; returns (the last node,
    where the walk stopped, the tree's size)."""
    while after[at] <= limit and size <= drafts:
        token = text[at]
        here = children[parent]
        parent = here.get(token)
        if parent is None:
            parent = here[token] = size
            children.append({})
            size += 1
        at += 1
    return parent, at, size
