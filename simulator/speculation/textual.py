"""Acceptance computed from text: a model-free drafter (speculation/lookup.py, ngramtrie.py, lonetrie.py,
suffixtrees.py) runs over each request's tokens from a corpus and the target accepts what its proposal shares with
the actual continuation (greedy verification).

Stated assumption: the corpus's tokens after a request's prompt are the target's greedy output (its user turns
included: they stand for more text of the same conversation). Nothing is sampled: the uniforms go unread, and the
same corpus, drafter and workload give the same accept lengths on every machine. A request's position is read from
its remaining tokens, so a preempted request resumes where it was; the drafter's caches catch up lazily.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..cache import current, key_of
from ..corpora import Corpus
from .acceptance import AcceptanceModel, emitted_of, positional_table
from .lonetrie import LoneTrie
from .lookup import PromptLookup, accepted
from .ngramtrie import SglangTrie
from .suffixtrees import CountedTrie, SuffixDrafter
from .trees import Tree

REPLAY_REQUESTS = 2  # requests the analytic figures (expected_tokens, table) replay, each from a fresh drafter


class TextAcceptance(AcceptanceModel):
    """Accept lengths computed by running the drafter over the corpus text each request stands for."""

    stateful = True
    value_key = None  # the drafter's caches move with every step (and SGLang's trie is shared by all requests)

    def __init__(self, method: str, config, corpus: Corpus, first_stream: int = 0):
        super().__init__([0.0])
        self.method, self.config, self.corpus, self.first_stream = method, config, corpus, first_stream
        self._requests: dict[int, tuple] = {}  # request id -> (tokens, prompt, output, per-request drafter)
        self._trie = self._shared()
        self._pending: dict[int, int] = {}  # SGLang inserts after the whole batch verified: request -> its end
        self._positions: dict[int, int] = {}  # request id -> tokens it holds (kept for match_tokens)
        # lone walks (taken_alone): the digest of those so far (None once another step moved the caches), and the
        # stored ones whose inserts the trie has not taken yet
        self._history: bytes | None = b""
        self._unapplied: list[tuple[int, np.ndarray]] = []
        # while every insert so far came from lone walks, SGLang's trie as their text (LoneTrie), which computes the
        # next lone walk; the trie above takes the walks' inserts (_unapplied) only when it is read
        self._lone = self._lone_trie()
        self._lone_found: list[tuple[int, np.ndarray]] = []  # found walks' inserts that the LoneTrie has not taken
        self._lone_walked: set = set()
        self._key = None
        self._peeked: dict = {}  # request -> (position, drafts, proposal) of proposed() for its next step

    def _shared(self):
        c = self.config
        if self.method == "ngram" and c.algorithm == "sglang_trie":
            return SglangTrie(c.branch_length, c.min_match_window, c.max_match_window, c.min_bfs_breadth,
                              c.max_bfs_breadth)
        if self.method == "suffix" and c.cache_requests:
            return CountedTrie(c.max_tree_depth)
        return None

    def _lone_trie(self):
        c = self.config
        if self.method == "ngram" and c.algorithm == "sglang_trie":
            return LoneTrie(c.branch_length, c.min_match_window, c.max_match_window, c.min_bfs_breadth,
                            c.max_bfs_breadth)
        return None

    def _own(self, prompt: int = 0):
        c = self.config
        if self.method == "suffix":
            return SuffixDrafter(c.max_tree_depth, c.max_spec_factor, c.max_spec_offset, c.min_token_prob, self._trie,
                                 prompt)
        if c.algorithm == "prompt_lookup":
            return PromptLookup(c.prompt_lookup_min, c.prompt_lookup_max)
        return None

    def start_request(self, request):
        rid = request.request_id
        if rid not in self._requests:
            prompt, output = request.prompt_tokens, request.output_tokens
            tokens = self.corpus.tokens(self.first_stream + rid, prompt + output)
            self._requests[rid] = (tokens, prompt, output, self._own(prompt))
            self._positions[rid] = prompt + max(1, getattr(request, "generated", 1))
        return rid

    def start(self, prompt_tokens: int):
        raise TypeError("text acceptance starts from the request (start_request)")

    def step(self, tree: Tree, state, uniforms, at: int, switch_at: int, remaining: int):
        self._history = None  # a step outside a lone walk: what the caches hold is no longer a digest's
        self._lone = None  # nor a history of lone walks
        return self._step(tree, state, remaining)

    def _step(self, tree: Tree, state, remaining: int):
        if self._unapplied:
            self._materialize()
        tokens, prompt, output, own = self._requests[state]
        position = prompt + output - remaining
        trie = self._trie
        if self.method == "ngram" and own is None:
            if state in self._pending:  # a new round: the previous round's inserts land before anyone looks up
                self._flush()
            # no root child can be the next token: nothing accepted, the proposal unread (its match_len too)
            taken = (accepted(trie.propose(tokens, position, tree.num_drafts, state),
                              tokens[position:position + tree.num_drafts])
                     if trie.may_accept(tokens, position) else 0)
        else:
            peeked = self._peeked.pop(state, None)  # the proposal the engine scheduled this step's verify by
            children = peeked[2] if peeked is not None and peeked[:2] == (position, tree.num_drafts) else \
                own.propose(tokens, position, tree.num_drafts)
            taken = accepted(children, tokens[position:position + tree.num_drafts])  # the proposal's own shape
        emitted = taken + 1 if taken < remaining else remaining
        self._positions[state] = position + emitted
        if self.method == "ngram" and own is None:
            self._queue(state, position + emitted, emitted >= remaining)
        elif self.method == "suffix" and trie is not None and emitted >= remaining:
            own.extend(tokens, prompt + output)  # the shared tree holds the completed request's whole output
        return taken, emitted, state

    def taken_alone(self, tree: Tree, state, remaining: int):
        """Drafts accepted at each step of a lone request from where it is until it completes (step() step by step,
        nothing else stepping meanwhile), as an array; None where the drafter is not SGLang's shared trie. Stored by
        the value of what it reads (the drafter's parameters, the corpus, the digest of the lone walks before this one,
        which made the trie, and this request's stream and position), so another run or sweep point over the same
        text finds it; the trie takes a found walk's inserts when it is next read (_materialize)."""
        tokens, prompt, output, own = self._requests[state]
        if self.method != "ngram" or own is not None or self._pending:
            return None
        position = prompt + output - remaining
        corpus_key = getattr(self.corpus, "value_key", None)
        if self._history is None or corpus_key is None:
            return self._walk(tree, state, remaining)
        call = (state, self.first_stream + state, prompt, output, position, tree.num_drafts)
        if self._key is None:
            self._key = ("speculation.textual.taken_alone", self.method, key_of(self.config), corpus_key)
        key = (*self._key, self._history, call)
        walked = []
        taken = current().get(key, lambda: walked.append(True) or self._walk(tree, state, remaining))
        if not walked:  # found: the trie takes the walk's inserts (at every step's end) when it is next read
            ends = position + np.cumsum(emitted_of(taken, remaining))
            self._unapplied.append((state, ends))
            if self._lone is not None:
                self._lone_found.append((state, ends))
                self._lone_walked.add(state)
            self._positions[state] = position + remaining
        self._history = hashlib.sha1(self._history + repr(call).encode()).digest()
        return taken

    def _walk(self, tree: Tree, state, remaining: int) -> np.ndarray:
        """The lone walk's drafts accepted at each step: on the LoneTrie while every insert so far came from lone
        walks (SglangTrie takes the walk's inserts when it is next read), else step by step."""
        lone = self._lone
        if lone is not None and state not in self._lone_walked:
            tokens, prompt, output, _ = self._requests[state]
            position = prompt + output - remaining
            for found, ends in self._lone_found:
                lone.take(self._requests[found][0], ends.tolist())
            self._lone_found.clear()
            self._lone_walked.add(state)
            taken = np.array(lone.walk(tokens, position, remaining, tree.num_drafts), dtype=np.int64)
            self._unapplied.append((state, position + np.cumsum(emitted_of(taken, remaining))))
            self._positions[state] = position + remaining
            return taken
        self._lone = None
        taken_each = []
        while remaining > 0:
            taken, emitted, _ = self._step(tree, state, remaining)
            taken_each.append(taken)
            remaining -= emitted
        return np.array(taken_each, dtype=np.int64)

    def _materialize(self) -> None:
        """The inserts of the stored walks found since the trie was last read, in their order."""
        unapplied, self._unapplied = self._unapplied, []
        for state, ends in unapplied:
            tokens = self._requests[state][0]
            for end in ends.tolist():
                self._trie.insert(state, tokens, end)

    def _queue(self, state, end: int, completes: bool = False) -> None:
        """SGLang's insert after a step: the request's last branch_length tokens before `end`, landing when the next
        round starts (a completing request's at once)."""
        if state in self._pending:
            self._flush()
        self._pending[state] = end
        if completes:
            self._flush()

    def _flush(self) -> None:
        if self._unapplied:  # the stored walks' inserts came first
            self._materialize()
        for state, end in self._pending.items():
            self._trie.insert(state, self._requests[state][0], end)
        self._pending.clear()

    def accepted(self, tree: Tree, state, uniforms, at: int = 0) -> int:
        raise TypeError("text acceptance moves the drafter's caches: step() accepts and emits in one call")

    def advance(self, state, emitted: int, u: float):
        """Another drafter's step or a plain one: only the position moves (step() reads it from the remaining)."""
        self._history = None
        self._lone = None
        self._positions[state] += emitted
        if self.method == "ngram" and self._trie is not None:  # the cache sees every generated token
            self._queue(state, self._positions[state])
        return state

    def proposed(self, state, remaining: int, drafts: int) -> int:
        """Drafts the request's own drafter (prompt lookup, suffix trees: a chain) proposes at this step, computed
        before the step as the engine does (vLLM V1 drafts at the end of the step before and schedules 1 + those);
        kept for the step. SGLang's shared trie pads to its drafts: `drafts`."""
        tokens, prompt, output, own = self._requests[state]
        if own is None:
            return drafts
        if self._unapplied:
            self._materialize()
        position = prompt + output - remaining
        children = own.propose(tokens, position, drafts)
        self._peeked[state] = (position, drafts, children)
        self._history = None  # the drafter's caches moved outside a lone walk
        return len(children) - 1

    def match_tokens(self, state) -> int:
        """The longest suffix the drafter would match now (a lookup of one draft, its proposal unused)."""
        tokens, _, _, own = self._requests[state]
        if self._unapplied:
            self._materialize()
        if own is not None:
            own.propose(tokens, self._positions[state], 1)
            return own.match_len
        self._trie.propose(tokens, self._positions[state], 1, state)
        return self._trie.match_len

    # -- analytic figures, replayed from the text ------------------------------------------------------------------
    def replay(self, tree: Tree, prompt_tokens: int = 1000, output_tokens: int = 2048) -> tuple[int, ...]:
        """Drafts accepted per step over REPLAY_REQUESTS requests, each with a fresh drafter (what expected_tokens and
        table summarise), in the run's store by what it reads: the method, its configuration, the corpus, the
        streams, the drafts per step (a drafter proposes tree.num_drafts tokens, whatever the tree's shape)."""
        key = ("textual.replay", self.method, key_of(self.config), key_of(self.corpus), self.first_stream,
               tree.num_drafts, prompt_tokens, output_tokens)
        return current().get(key, lambda: self._replay(tree, prompt_tokens, output_tokens))

    def _replay(self, tree: Tree, prompt_tokens: int, output_tokens: int) -> tuple[int, ...]:
        fresh = TextAcceptance(self.method, self.config, self.corpus, self.first_stream)
        lengths = []
        for rid in range(REPLAY_REQUESTS):
            request = _Replayed(rid, prompt_tokens, output_tokens)
            state, remaining = fresh.start_request(request), output_tokens - 1
            taken = fresh.taken_alone(tree, state, remaining)
            if taken is not None:
                lengths += taken.tolist()
                continue
            while remaining > 0:
                taken, emitted, _ = fresh.step(tree, state, (), 0, 0, remaining)
                lengths.append(taken)
                remaining -= emitted
        return tuple(lengths)

    def expected_tokens(self, tree: Tree) -> float:
        lengths = self.replay(tree)
        return sum(min(a, tree.depth) + 1 for a in lengths) / len(lengths)

    def table(self, depth: int, state=None):
        """A chain's positional table from the replay: P(depth d accepted | depth d-1 was)."""
        lengths = self.replay(Tree.chain(depth))
        probs = []
        for d in range(1, depth + 1):
            reached = sum(1 for a in lengths if a >= d - 1)
            probs.append(sum(1 for a in lengths if a >= d) / reached if reached else 0.0)
        return positional_table(probs, 1.0, depth)


class _Replayed:
    """A stand-in request for a replay."""

    def __init__(self, rid: int, prompt: int, output: int):
        self.request_id, self.prompt_tokens, self.output_tokens = rid, prompt, output
