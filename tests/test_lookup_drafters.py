"""The model-free drafters' accept lengths (speculation/textual.py over speculation/ngramtrie.py, lonetrie.py,
lookup.py, suffixtrees.py) against brute-force reference implementations written from the engines' descriptions: no
trie, every count and recency found by scanning the token lists, every tree path enumerated."""
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cache import Store, held
from simulator.config.speculation import NgramDrafter, SuffixDrafter
from simulator.serving import walking
from simulator.speculation.textual import TextAcceptance
from simulator.speculation.trees import Tree

BASE = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
# repeats of whole and partial phrases, a periodic stretch, novel tokens between: the known structure
STREAM = (BASE + [31, 32] + BASE[:6] + [41] + BASE + [51, 52, 53] + [7, 8, 9] * 8 + BASE[3:] + [61]
          + BASE[:4] + [7, 8, 9, 7] + [71, 72] + BASE + [12, 13, 14, 81] + [7, 8] * 5 + BASE[::-1] + BASE)
PROMPT = 14


class Text:
    """A corpus stub: request i reads STREAM rotated by 7 i tokens."""

    def tokens(self, index: int, count: int) -> list[int]:
        rotated = STREAM[7 * index:] + STREAM[:7 * index]
        return (rotated * (1 + count // len(rotated)))[:count]


def run_model(method: str, config, requests: int, drafts: int, text=None) -> list[int]:
    """Requests one after another through the model, as the serving loop calls it: drafts accepted per step."""
    model, tree, out = TextAcceptance(method, config, text or Text()), Tree.chain(drafts), []
    for rid in range(requests):
        request = SimpleNamespace(request_id=rid, prompt_tokens=PROMPT, output_tokens=len(STREAM) - PROMPT)
        state, remaining = model.start_request(request), request.output_tokens - 1
        while remaining > 0:
            taken, emitted, state = model.step(tree, state, None, 0, 0, remaining)
            out.append(taken)
            remaining -= emitted
    return out


def run_reference(propose, after_step, after_request, requests: int, drafts: int, text=None,
                  record: list | None = None) -> list[int]:
    """Drafts accepted per step; `record` takes (the proposal's longest path, tokens emitted) per step."""
    out = []
    for rid in range(requests):
        tokens = (text or Text()).tokens(rid, len(STREAM))
        position = PROMPT + 1
        while position < len(tokens):
            paths = propose(rid, tokens, position, drafts)
            continuation = tokens[position:position + drafts]
            taken = max((len(p) for p in paths if continuation[:len(p)] == p), default=0)
            out.append(taken)
            if record is not None:
                record.append((max(len(p) for p in paths), min(taken + 1, len(tokens) - position)))
            position += min(taken + 1, len(tokens) - position)
            after_step(rid, tokens, position)
        after_request(tokens[PROMPT:])
    return out


def prefixes(chain) -> list[list[int]]:
    """A chain's nodes as paths from the root."""
    return [chain[:k] for k in range(len(chain) + 1)]


def occurs_at(seq, pattern) -> list[int]:
    return [j for j in range(len(seq) - len(pattern) + 1) if seq[j:j + len(pattern)] == pattern]


def sglang_reference(c, requests: int, drafts: int, text=None) -> list[int]:
    paths = []  # every inserted path, in insertion order (its index is its time)
    pending = {}

    def last_touch(prefix):
        return max((k for k, p in enumerate(paths) if p[:len(prefix)] == prefix), default=None)

    def children(prefix):
        found = {p[len(prefix)] for p in paths if len(p) > len(prefix) and p[:len(prefix)] == prefix}
        return sorted(found, key=lambda t: -last_touch(prefix + [t]))

    def propose(rid, tokens, position, drafts):
        if rid in pending:  # a new round: the last round's inserts land first
            flush()
        scale = (c.max_bfs_breadth - c.min_bfs_breadth) / (c.max_match_window - c.min_match_window + 1)
        nodes = [[]]  # each draft node's path from the root
        for window in range(min(position, c.max_match_window), c.min_match_window - 1, -1):
            anchor = tokens[position - window:position]
            if last_touch(anchor) is None:
                continue
            queue = [([], (c.max_match_window - window) * scale + c.min_bfs_breadth, anchor)]
            while queue and len(nodes) <= drafts:
                path, breadth, at = queue.pop(0)
                for taken, token in enumerate(children(at)):
                    if taken >= max(1, int(breadth)) or len(nodes) > drafts:
                        break
                    if path + [token] not in nodes:
                        nodes.append(path + [token])
                    queue.append((path + [token], breadth - scale, at + [token]))
        return nodes

    def flush():
        for window in pending.values():
            for i in range(len(window) - c.min_match_window):
                paths.append(window[i:])
        pending.clear()

    def after_step(rid, tokens, position):
        pending[rid] = tokens[max(0, position - c.branch_length):position]
        if position >= len(tokens):  # a completing request's round lands at once
            flush()

    return run_reference(propose, after_step, lambda out: None, requests, drafts, text)


def prompt_lookup_reference(c, requests: int, drafts: int) -> list[int]:
    def propose(rid, tokens, position, drafts):
        history = tokens[:position]
        for n in range(min(c.prompt_lookup_max, position), c.prompt_lookup_min - 1, -1):
            starts = [j for j in occurs_at(history, history[-n:]) if j + n - 1 <= position - 2]
            if starts:
                return prefixes(history[starts[0] + n:starts[0] + n + drafts])
        return [[]]
    return run_reference(propose, lambda *a: None, lambda out: None, requests, drafts)


def suffix_reference(c, requests: int, drafts: int, text=None, record: list | None = None) -> list[int]:
    """Arctic Inference v0.0.6's SuffixCache.speculate: the request's tree (prompt + output so far) and the global one
    (completed outputs and this request's output so far); per tree, match lengths longest first, a candidate kept
    only with a strictly higher score; the global tree's best replaces the request tree's only when strictly higher."""
    done = []  # completed requests' outputs, in completion order

    def counts(seqs, prefix):
        """(occurrences of prefix, {next token: (occurrences, first occurrence as (sequence, end))})."""
        total, nxt = 0, {}
        for s, seq in enumerate(seqs):
            for j in occurs_at(seq, prefix):
                total += 1
                if j + len(prefix) < len(seq) and len(prefix) < c.max_tree_depth:
                    token = seq[j + len(prefix)]
                    n, first = nxt.get(token, (0, (s, j + len(prefix))))
                    nxt[token] = (n + 1, min(first, (s, j + len(prefix))))
        return total, nxt

    def propose(rid, tokens, position, drafts):
        history = tokens[:position]
        best, best_score = [], 0.0
        trees = ([history], done + [history[PROMPT:]]) if c.cache_requests else ([history],)
        for seqs in trees:
            tree_best, tree_score = [], 0.0
            for m in range(min(c.max_tree_depth, position), 0, -1):
                pattern = history[position - m:]
                if counts(seqs, pattern)[0] == 0:
                    continue
                limit = min(drafts, int(c.max_spec_factor * m + c.max_spec_offset + 1e-6))
                out, prob, score = [], 1.0, 0.0
                while len(out) < limit:
                    total, nxt = counts(seqs, pattern + out)
                    if not nxt:
                        break
                    token = min(nxt, key=lambda t: (-nxt[t][0], nxt[t][1]))
                    prob *= nxt[token][0] / total
                    if prob < c.min_token_prob:
                        break
                    out.append(token)
                    score += prob
                if score > tree_score:
                    tree_best, tree_score = out, score
            if tree_score > best_score:
                best, best_score = tree_best, tree_score
        return prefixes(best)
    return run_reference(propose, lambda *a: None, done.append, requests, drafts, text, record)


@pytest.mark.parametrize("drafts", [3, 8])
def test_sglang_trie_matches_brute_force(drafts):
    config = NgramDrafter(branch_length=6, max_match_window=4, max_bfs_breadth=4)
    expected = sglang_reference(config, 2, drafts)
    assert run_model("ngram", config, 2, drafts) == expected
    assert max(expected) >= 3  # the stream's repeats are found


def test_sglang_defaults_match_brute_force():
    config = NgramDrafter()
    assert run_model("ngram", config, 1, 8) == sglang_reference(config, 1, 8)


@pytest.mark.parametrize("low, high", [(1, 3), (2, 5)])
def test_prompt_lookup_matches_brute_force(low, high):
    config = NgramDrafter(algorithm="prompt_lookup", prompt_lookup_min=low, prompt_lookup_max=high)
    expected = prompt_lookup_reference(config, 1, 6)
    assert run_model("ngram", config, 1, 6) == expected
    assert max(expected) == 6


@pytest.mark.parametrize("shared", [False, True])
def test_suffix_matches_brute_force(shared):
    config = SuffixDrafter(max_tree_depth=8, max_spec_factor=1.5, min_token_prob=0.2, cache_requests=shared)
    expected = suffix_reference(config, 2, 6)
    assert run_model("suffix", config, 2, 6) == expected
    assert max(expected) >= 3


class RandomText:
    """Streams of a small alphabet (many repeats, many tied counts): request i reads its own."""

    def __init__(self, seed: int, alphabet: int):
        self.seed, self.alphabet = seed, alphabet

    def tokens(self, index: int, count: int) -> list[int]:
        return np.random.default_rng([self.seed, index]).integers(0, self.alphabet, count).tolist()


@pytest.mark.parametrize("seed", range(3))
def test_suffix_matches_brute_force_on_random_streams(seed):
    """Counts, ties (the first of equals wins) and the shared tree of earlier outputs on random text."""
    config = SuffixDrafter(max_tree_depth=7, max_spec_factor=2.0, min_token_prob=0.05, cache_requests=True)
    text = RandomText(seed, 3 + seed)
    expected = suffix_reference(config, 3, 5, text)
    assert run_model("suffix", config, 3, 5, text) == expected
    assert max(expected) >= 2


def test_periodic_text_is_accepted_in_full_once_a_period_is_seen():
    """[1..5] repeated: after the first period prompt lookup proposes the period's continuation, all accepted."""
    class Periodic:
        def tokens(self, index, count):
            return ([1, 2, 3, 4, 5] * count)[:count]
    config = NgramDrafter(algorithm="prompt_lookup", prompt_lookup_min=2, prompt_lookup_max=3)
    model, tree = TextAcceptance("ngram", config, Periodic()), Tree.chain(4)
    state = model.start_request(SimpleNamespace(request_id=0, prompt_tokens=6, output_tokens=41))
    remaining, lengths = 40, []
    while remaining > 0:
        taken, emitted, state = model.step(tree, state, None, 0, 0, remaining)
        lengths.append(taken)
        remaining -= emitted
    assert lengths == [4] * 8  # 8 steps of 4 drafts + the bonus token = 40 tokens


class RetouchingTrie:
    """The simple reference for SglangTrie: dict children in recency order, every insert walking each suffix of its
    window from the root and moving every node it passes to the most recent end (as SGLang re-touches them)."""

    def __init__(self, c):
        self.c, self.root, self.match_len = c, {}, 0
        self.scale = (c.max_bfs_breadth - c.min_bfs_breadth) / (c.max_match_window - c.min_match_window + 1)

    def insert(self, request, tokens, end):
        window = tokens[max(0, end - self.c.branch_length):end]
        for i in range(len(window) - self.c.min_match_window):
            cursor = self.root
            for token in window[i:]:
                child = cursor.pop(token, None)
                cursor[token] = child = {} if child is None else child
                cursor = child

    def may_accept(self, tokens, length):
        return True  # always proposes: SglangTrie's skip of a proposal that cannot be accepted is checked against it

    def propose(self, tokens, length, drafts, request=None):
        c, children, self.match_len = self.c, [{}], 0
        for window in range(min(length, c.max_match_window), c.min_match_window - 1, -1):
            node = self.root
            for token in tokens[length - window:length]:
                node = node.get(token)
                if node is None:
                    break
            if node is None:
                continue
            self.match_len = max(self.match_len, window)
            queue, at = [(0, (c.max_match_window - window) * self.scale + c.min_bfs_breadth, node)], 0
            while at < len(queue) and len(children) <= drafts:
                parent, breadth, trie_node = queue[at]
                at += 1
                for taken, token in enumerate(reversed(trie_node)):
                    if taken >= max(1, int(breadth)) or len(children) > drafts:
                        break
                    pos = children[parent].get(token)
                    if pos is None:
                        pos = children[parent][token] = len(children)
                        children.append({})
                    queue.append((pos, breadth - self.scale, trie_node[token]))
        return children


@pytest.mark.parametrize("seed", range(6))
def test_sglang_trie_matches_the_retouching_trie_on_random_batches(seed):
    """Random token streams of a small alphabet (many repeats), 1-4 requests stepping in random rounds (some steps
    plain, moving only the position), random windows and breadths: the incremental trie accepts, emits and matches
    exactly as the one that re-walks every suffix (and always proposes: SglangTrie skips the hopeless ones)."""
    assert retouching_agrees(seed) > 10


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sglang_trie_matches_the_retouching_trie_on_drawn_batches(seed):
    """The same comparison over drawn seeds (each a stream, windows, breadths, requests and rounds)."""
    retouching_agrees(seed)


def retouching_agrees(seed) -> int:
    """Steps the incremental and the re-touching tries took, asserting each agreed; see the tests above."""
    rng = np.random.default_rng(seed)
    window_max = int(rng.integers(2, 8))
    config = NgramDrafter(branch_length=int(rng.integers(window_max + 1, 14)), max_match_window=window_max,
                          min_match_window=int(rng.integers(1, window_max + 1)), max_bfs_breadth=int(rng.integers(1, 6)))
    alphabet = int(rng.integers(3, 9))

    class Random:
        def tokens(self, index, count):
            return np.random.default_rng([seed, index]).integers(0, alphabet, count).tolist()

    fast, simple = TextAcceptance("ngram", config, Random()), TextAcceptance("ngram", config, Random())
    simple._trie = RetouchingTrie(config)
    requests = int(rng.integers(1, 5))
    remaining = {}
    for rid in range(requests):
        request = SimpleNamespace(request_id=rid, prompt_tokens=int(rng.integers(1, 30)),
                                  output_tokens=int(rng.integers(20, 200)))
        fast.start_request(request), simple.start_request(request)
        remaining[rid] = request.output_tokens - 1
    trees = [Tree.chain(int(rng.integers(1, 9))) for _ in range(3)]
    steps = 0
    while remaining:
        batch = [rid for rid in remaining if rng.random() < 0.7] or list(remaining)
        for rid in rng.permutation(batch).tolist():
            if rng.random() < 0.15:  # a plain step
                fast.advance(rid, 1, 0.0), simple.advance(rid, 1, 0.0)
                done = 1
            else:
                tree = trees[int(rng.integers(len(trees)))]
                got, want = fast.step(tree, rid, None, 0, 0, remaining[rid]), simple.step(tree, rid, None, 0, 0,
                                                                                         remaining[rid])
                assert got == want
                done = got[1]
                steps += 1
            assert fast.match_tokens(rid) == simple.match_tokens(rid)
            remaining[rid] -= done
            if remaining[rid] <= 0:
                del remaining[rid]
    return steps


class KeyedText(Text):
    """Text with a value to key a stored walk by (as a corpus file's)."""

    value_key = ("test stream",)


def lone_walks(model, drafts_each: list[int], stepwise: bool) -> list[int]:
    """Requests one after another, request i drafting drafts_each[i]: each walked alone at once (taken_alone) or
    step by step (step)."""
    out = []
    for rid, drafts in enumerate(drafts_each):
        request = SimpleNamespace(request_id=rid, prompt_tokens=PROMPT, output_tokens=len(STREAM) - PROMPT)
        state, remaining, tree = model.start_request(request), request.output_tokens - 1, Tree.chain(drafts)
        if not stepwise:
            out += model.taken_alone(tree, state, remaining).tolist()
            continue
        while remaining > 0:
            taken, emitted, state = model.step(tree, state, None, 0, 0, remaining)
            out.append(taken)
            remaining -= emitted
    return out


def test_sglang_lone_walks_found_in_the_store_are_the_steps():
    """A lone walk is stored by what it reads: another model over the same text finds the first walks and computes
    the next (other drafts) on the trie the found walks left, exactly as the steps (and the brute force) give."""
    config = NgramDrafter(branch_length=6, max_match_window=4, max_bfs_breadth=4)
    name = "speculation.textual.taken_alone"
    with held(Store()) as store:
        first = lone_walks(TextAcceptance("ngram", config, KeyedText()), [8, 8, 8], stepwise=False)
        assert store.count(name) == 3 and store.computed[name] == 3
        again = lone_walks(TextAcceptance("ngram", config, KeyedText()), [8, 8, 3], stepwise=False)
        assert store.computed[name] == 4  # two found, the third computed
    assert first == sglang_reference(config, 3, 8)
    assert again == lone_walks(TextAcceptance("ngram", config, Text()), [8, 8, 3], stepwise=True)
    assert again[:len(again) * 2 // 3] != first[:len(again) * 2 // 3] or again[-50:] != first[-50:]


def test_a_lone_text_walk_at_once_draws_and_records_as_its_steps(monkeypatch):
    """Walks.walk_alone over a text model's walk taken at once: the same emitted tokens, records and acceptance stream
    (blocks drawn where the steps draw them, small blocks so that the walk crosses several) as step by step."""
    monkeypatch.setattr(walking, "UNIFORM_BLOCK", 40)
    config = NgramDrafter(branch_length=6, max_match_window=4, max_bfs_breadth=4)
    decision = SimpleNamespace(tree=Tree.chain(5), drafter=0)
    seen = []
    for at_once in (True, False):
        model = TextAcceptance("ngram", config, Text())
        walks = walking.Walks([SimpleNamespace(acceptance=model)], SimpleNamespace(), np.random.default_rng(3))
        walks.uniform_row(31)  # the stream part-way through a block
        request = SimpleNamespace(request_id=0, prompt_tokens=PROMPT, output_tokens=len(STREAM) - PROMPT, generated=1)
        request.acceptance_state = model.start_request(request)
        if at_once:
            emitted = walks.walk_alone(request, decision)
        else:
            tree, _, walk_uniforms, need, step, _ = walks._setup_for(decision)
            emitted = walks._walk_alone(request, tree, walk_uniforms, need, lambda *a: model.step(*a))
        seen.append((emitted, walks.lengths.tolist(), walks.positions.tolist(), request.generated,
                     walks._rng.bit_generator.state, walks.uniform_row(7)))
    assert seen[0] == seen[1] and len(seen[0][0]) > 20 and seen[0][3] == len(STREAM) - PROMPT


def random_ngram_config(rng) -> NgramDrafter:
    """Windows, breadths and branch lengths drawn small (a branch shorter than a step's tokens leaves starts that no
    insert takes), the shortest window 1-3 tokens."""
    window_min = int(rng.integers(1, 4))
    window_max = int(rng.integers(window_min, window_min + 6))
    return NgramDrafter(branch_length=int(rng.integers(window_max + 1, window_max + 12)), min_match_window=window_min,
                        max_match_window=window_max, min_bfs_breadth=1, max_bfs_breadth=int(rng.integers(1, 7)))


@pytest.mark.parametrize("config", [NgramDrafter(), NgramDrafter(branch_length=6, max_match_window=4, max_bfs_breadth=4),
                                    NgramDrafter(branch_length=4, max_match_window=3, min_match_window=2),
                                    NgramDrafter(branch_length=3, max_match_window=2, max_bfs_breadth=3)])
@pytest.mark.parametrize("drafts", [2, 8])
def test_sglang_lone_walks_match_brute_force(config, drafts):
    """Requests walked alone one after another (taken_alone: the trie kept as its text, speculation/lonetrie.py's
    LoneTrie) accept what the brute force does on the hand-written stream."""
    model = TextAcceptance("ngram", config, Text())
    got = lone_walks(model, [drafts] * 3, stepwise=False)
    assert model._lone is not None  # the walks ran on the LoneTrie
    expected = sglang_reference(config, 3, drafts)
    assert got == expected
    assert max(expected) >= 2  # the stream's repeats are found


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sglang_lone_walks_match_brute_force_on_drawn_streams(seed):
    """The same on drawn random streams of a 3-6 token alphabet and drawn windows, breadths, branches and drafts."""
    rng = np.random.default_rng(seed)
    config, drafts = random_ngram_config(rng), int(rng.integers(1, 10))
    text = RandomText(seed, int(rng.integers(3, 7)))
    model = TextAcceptance("ngram", config, text)
    got = lone_walks(model, [drafts] * 2, stepwise=False)
    assert model._lone is not None
    assert got == sglang_reference(config, 2, drafts, text)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sglang_lone_walks_are_the_trie_steps_on_drawn_streams(seed):
    """Drawn requests (prompt and output lengths, drafts each) walked alone give what SglangTrie's steps give; after
    them the trie they hand their inserts to matches and steps as the stepped one (a request of batched steps)."""
    rng = np.random.default_rng(seed)
    config, alphabet = random_ngram_config(rng), int(rng.integers(2, 9))

    class Random:
        def tokens(self, index, count):
            return np.random.default_rng([seed, index]).integers(0, alphabet, count).tolist()

    walked, stepped = TextAcceptance("ngram", config, Random()), TextAcceptance("ngram", config, Random())
    requests = [SimpleNamespace(request_id=rid, prompt_tokens=int(rng.integers(1, 40)),
                                output_tokens=int(rng.integers(2, 300))) for rid in range(int(rng.integers(1, 5)))]
    for request in requests:
        tree = Tree.chain(int(rng.integers(1, 10)))
        state, remaining = walked.start_request(request), request.output_tokens - 1
        taken = walked.taken_alone(tree, state, remaining).tolist()
        stepped.start_request(request)
        steps = []
        while remaining > 0:
            got, emitted, _ = stepped.step(tree, state, None, 0, 0, remaining)
            steps.append(got)
            remaining -= emitted
        assert taken == steps
    assert walked._lone is not None
    last = SimpleNamespace(request_id=len(requests), prompt_tokens=20, output_tokens=60)
    for model in (walked, stepped):
        model.start_request(last)
    assert [walked.match_tokens(r.request_id) for r in requests] == [stepped.match_tokens(r.request_id)
                                                                     for r in requests]
    remaining, tree = last.output_tokens - 1, Tree.chain(5)
    while remaining > 0:
        got = walked.step(tree, last.request_id, None, 0, 0, remaining)
        assert got == stepped.step(tree, last.request_id, None, 0, 0, remaining)
        remaining -= got[1]
    assert walked._lone is None  # a step outside a lone walk: the LoneTrie is left


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_plain_steps_after_lone_walks_insert_after_the_walks(seed):
    """A request whose first tokens come from plain steps (advance: each inserts its tokens into SGLang's trie) after
    requests walked alone: the walks' inserts land first, as they happened, so its drafted steps match a model
    that stepped every request."""
    rng = np.random.default_rng(seed)
    config, alphabet = random_ngram_config(rng), int(rng.integers(2, 6))

    class Random:
        def tokens(self, index, count):
            return np.random.default_rng([seed, index]).integers(0, alphabet, count).tolist()

    walked, stepped = TextAcceptance("ngram", config, Random()), TextAcceptance("ngram", config, Random())
    for rid in range(int(rng.integers(1, 4))):
        request = SimpleNamespace(request_id=rid, prompt_tokens=int(rng.integers(1, 30)),
                                  output_tokens=int(rng.integers(2, 200)))
        tree, remaining = Tree.chain(int(rng.integers(1, 8))), request.output_tokens - 1
        walked.taken_alone(tree, walked.start_request(request), remaining)
        stepped.start_request(request)
        while remaining > 0:
            remaining -= stepped.step(tree, rid, None, 0, 0, remaining)[1]
    last = SimpleNamespace(request_id=9, prompt_tokens=int(rng.integers(1, 30)), output_tokens=120)
    remaining, tree, plain = last.output_tokens - 1, Tree.chain(5), int(rng.integers(2, 6))
    for model in (walked, stepped):
        model.start_request(last)
        for _ in range(plain):
            model.advance(last.request_id, 1, 0.0)
    remaining -= walked._positions[9] - last.prompt_tokens
    while remaining > 0:
        got = walked.step(tree, last.request_id, None, 0, 0, remaining)
        assert got == stepped.step(tree, last.request_id, None, 0, 0, remaining)
        remaining -= got[1]
