"""Model-free drafters as the engines run them, over token ids: SGLang's n-gram trie, vLLM's prompt lookup and
SuffixDecoding's suffix trees. Each proposes a draft tree (children per node, node 0 the last verified token) for a
request's history; greedy verification accepts the longest path that the actual continuation follows (accepted()).

SGLang (speculative_algorithm NGRAM, cpp_ngram/trie_cache.cpp): one trie shared by every request. After each
verify the last branch_length tokens of the request (prompt + output) are inserted as their suffixes of length >= 2
(the prompt itself is not inserted at prefill); a child touched last is tried first. A lookup walks the last w tokens
for w = max_match_window .. min_match_window and expands, breadth first, each matched node: breadth max_bfs at the
shortest window falling by (max_bfs - min_bfs) / (windows) per window length and per level, at least 1, merging equal
tokens, until draft_tokens nodes. Its node-pool capacity (10M nodes) is not modelled: a run inserts ~17 nodes a token.
A history of lone requests (each alone in its batch, one after another) runs on LoneTrie, the same trie kept as text.
vLLM (method ngram): the longest suffix n-gram (prompt_lookup_min..max) that occurred earlier, its earliest
occurrence, and the k tokens after it as a chain. SuffixDecoding (Arctic Inference; vLLM method suffix): counted
tries of every substring up to max_tree_depth tokens over the request's prompt + output and over every request's
output (the running one's as it grows); for each match length m the most frequent continuation, stopped when its
estimated probability (product of child / parent counts) falls below min_token_prob, at most max_spec_factor * m +
offset tokens (and m + drafts <= max_tree_depth); the candidate with the highest score (summed probabilities) wins,
the longer match and the request's tree on a tie (Arctic Inference v0.0.6, SuffixCache.speculate).
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
