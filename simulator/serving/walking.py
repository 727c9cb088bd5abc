"""The acceptance side of a step: every request walks the verify tree with its own uniforms (common random numbers
across scenarios), its regime moves on, and the accept lengths are recorded."""
from __future__ import annotations

from array import array

import numpy as np

from ..speculation.acceptance import emitted_of

UNIFORM_BLOCK = 1 << 14
WALK_UNIFORMS = 16  # uniforms a tree walk takes (at least its depth): runs with different draft lengths stay aligned


class Walks:
    """The acceptance draws of one run, and what every request accepted."""

    def __init__(self, slots: list, policy, rng: np.random.Generator):
        self.slots = slots
        self.watch = getattr(policy, "observe_walk", None)  # a policy that learns from every request's walk
        # the model whose per-request state carries the text's regime (the primary drafter's, if stateful)
        self.primary = slots[0].acceptance if slots and slots[0].acceptance.stateful else None
        self._rng = rng
        # the acceptance stream's current block: a list, or the array as drawn where a lone walk taken at once
        # (_taken_alone) drew it and nothing has read it yet (most are never read); _block() reads it as a list
        self._uniforms: list[float] | np.ndarray = []
        self._at = 0
        self._decided, self._setup = None, ()  # the last decision walked, and what its walks read
        # per request per speculative step: typed arrays (4 bytes an entry, not a list's pointer and int object)
        self.lengths = array("i")  # tokens emitted, bonus token included
        self.positions = array("i")  # tokens the request had generated before that step

    def _setup_for(self, decision) -> tuple:
        """What a walk of this decision reads: (tree, depth, uniforms per walk, uniforms per request, the model's
        step, the primary model that moves the regime when this drafter's model has none (else None))."""
        tree, model = decision.tree, self.slots[decision.drafter].acceptance
        depth = tree.depth
        walk_uniforms = depth if depth > WALK_UNIFORMS else WALK_UNIFORMS
        primary = self.primary if self.primary is not None and not model.stateful else None
        need = walk_uniforms + 1 if model.stateful or primary is not None else walk_uniforms
        return tree, depth, walk_uniforms, need, model.step, primary

    def _next_block(self) -> list[float]:
        """The acceptance stream's next block (drawn every time: random draws are not stored)."""
        return self._rng.random(UNIFORM_BLOCK).tolist()

    def _block(self) -> list[float]:
        """The current block as a list (the same floats: tolist converts each float64 exactly)."""
        if self._uniforms.__class__ is not list:
            self._uniforms = self._uniforms.tolist()
        return self._uniforms

    def uniform_row(self, n: int) -> list[float]:
        """n acceptance uniforms, drawn in numpy blocks."""
        if self._at + n > len(self._uniforms):
            self._uniforms = self._next_block()
            self._at = 0
        row = self._block()[self._at:self._at + n]
        self._at += n
        return row

    def walk(self, active: list, decision, now: float) -> tuple[int, bool]:
        """Every request walks the verify tree with its own uniforms; returns (tokens emitted, any completed).
        The hot path (uniform_row inlined: each walk reads its row where it lies in the block; the model's step
        walks and moves the regime in one call)."""
        if decision is not self._decided:  # policies hand out long-lived decisions: set up once per decision
            self._decided, self._setup = decision, self._setup_for(decision)
        tree, depth, walk_uniforms, need, step, primary = self._setup
        watch = self.watch
        lengths, positions = self.lengths, self.positions
        uniforms, at = self._uniforms, self._at
        if uniforms.__class__ is not list:  # _block() inlined: a batch walks every step
            uniforms = self._block()
        tokens, done = 0, False
        for request in active:
            if at + need > len(uniforms):
                uniforms, at = self._next_block(), 0
            generated = request.generated
            switch = at + walk_uniforms  # read only by a model (or primary) whose regime moves
            accepted, emitted, state = step(tree, request.acceptance_state, uniforms, at, switch,
                                            request.output_tokens - generated)
            if watch is not None:
                watch(depth, accepted)
            lengths.append(emitted)
            positions.append(generated)
            request.acceptance_state = state if primary is None else primary.advance(state, emitted, uniforms[switch])
            at += need
            request.generated = generated = generated + emitted
            tokens += emitted
            if generated >= request.output_tokens:
                request.completed_at = now
                done = True
        self._uniforms, self._at = uniforms, at
        return tokens, done

    def walk_alone(self, request, decision) -> list[int]:
        """A lone request's walks, step after step until it completes: the tokens each step emits. The same draws
        and records as walk() step by step, for a batch that cannot change before then (nothing else reads the
        acceptance stream in between); the caller sets completed_at when it knows the last step's time. Walked
        every time: the walks read the acceptance stream, and random draws are not stored."""
        if decision is not self._decided:
            self._decided, self._setup = decision, self._setup_for(decision)
        tree, _, walk_uniforms, need, step, primary = self._setup
        # a fixed policy drafts with slot 0, whose own model carries any regime: no primary to advance
        assert primary is None, "walk_alone serves drafter 0 (a static policy); walk() advances a primary model"
        alone = getattr(self.slots[decision.drafter].acceptance, "taken_alone", None)
        remaining = request.output_tokens - request.generated
        taken = alone(tree, request.acceptance_state, remaining) if alone is not None and remaining > 0 else None
        if taken is None:
            return self._walk_alone(request, tree, walk_uniforms, need, step)
        return self._taken_alone(request, emitted_of(taken, remaining), need)

    def _taken_alone(self, request, emitted: np.ndarray, need: int) -> list[int]:
        """walk_alone's records and draws for a model that accepted a whole walk at once (taken_alone): the steps'
        positions, and the acceptance stream moved by `need` uniforms a step, its blocks drawn as the step-by-step
        walk draws them (the uniforms go unread: only the last block is kept)."""
        steps, generated = len(emitted), request.generated
        ends = np.cumsum(emitted)
        self.positions.frombytes((generated + ends - emitted).astype(np.int32).tobytes())  # array("i"): 4 bytes
        self.lengths.frombytes(emitted.astype(np.int32).tobytes())
        room = (len(self._uniforms) - self._at) // need  # steps the current block still serves
        if steps <= room:
            self._at += steps * need
        else:
            per_block = UNIFORM_BLOCK // need
            blocks = -(-(steps - room) // per_block)
            for _ in range(blocks - 1):
                self._rng.random(UNIFORM_BLOCK)  # a block the walks would have drawn and not read
            self._uniforms = self._rng.random(UNIFORM_BLOCK)  # a list when read (_block)
            self._at = (steps - room - (blocks - 1) * per_block) * need
        request.generated = generated + int(ends[-1])
        return emitted.tolist()

    def _walk_alone(self, request, tree, walk_uniforms: int, need: int, step) -> list[int]:
        """walk_alone's walks (see there)."""
        uniforms, at, positions = self._block(), self._at, self.positions
        state, generated, output = request.acceptance_state, request.generated, request.output_tokens
        emitted_per_step: list[int] = []
        emit = emitted_per_step.append
        while generated < output:
            if at + need > len(uniforms):
                uniforms, at = self._next_block(), 0
            switch = at + walk_uniforms
            _, emitted, state = step(tree, state, uniforms, at, switch, output - generated)
            positions.append(generated)
            emit(emitted)
            at += need
            generated += emitted
        self.lengths.extend(emitted_per_step)
        request.acceptance_state, request.generated = state, generated
        self._uniforms, self._at = uniforms, at
        return emitted_per_step

    def plain_alone(self, request) -> int:
        """A lone request's plain decode steps until it completes, as plain() step by step when no model moves a
        regime (speculation off): a token each; returns the steps (the caller sets completed_at)."""
        assert self.primary is None, "a regime moves by one uniform a step: plain() steps"
        steps = request.output_tokens - request.generated
        request.generated += steps
        return steps

    def plain(self, active: list, now: float) -> tuple[int, bool]:
        """A plain decode step: one token per request (the regime still moves); returns (tokens, any completed)."""
        primary = self.primary
        done = False
        for request in active:
            request.generated += 1
            if primary is not None:  # one uniform (uniform_row(1)[0], inlined)
                if self._at + 1 > len(self._uniforms):
                    self._uniforms, self._at = self._next_block(), 0
                request.acceptance_state = primary.advance(request.acceptance_state, 1, self._block()[self._at])
                self._at += 1
            if request.generated >= request.output_tokens:
                request.completed_at = now
                done = True
        return len(active), done

