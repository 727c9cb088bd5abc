"""Who is in the batch: requests wait, are admitted while a batch slot and their KV cache fit, prefill, decode.

KV memory bounds the admitted requests in one of two ways (workload.kv_overflow):
- queue: a request reserves its whole cache (prompt + output + lookahead) when admitted and is never evicted;
- preempt: a request is admitted when its current cache fits next to what is in use now, and the newest requests
  are evicted (prefilling ones first) when a step would overflow; an evicted request is recomputed (prompt +
  generated) when it is admitted again.
The lookahead is the largest verify tree a request may need cache for in one step.
"""
from __future__ import annotations

from collections import deque

from ..config.errors import ConfigError


class Admission:
    """The waiting queue, the prefilling and the decoding requests, and the KV cache they hold."""

    def __init__(self, workload, kv_capacity: int, lookahead: int):
        self.concurrency = workload.concurrency
        self.queue_mode = workload.kv_overflow == "queue"
        self.kv_capacity = kv_capacity
        self.lookahead = lookahead
        self.waiting: deque = deque()
        self.prefilling: list = []
        self.active: list = []  # decoding requests
        self.held = 0  # requests here (waiting, prefilling or decoding): counted in (Server.submit) and out (release)
        self.kv_reserved = 0
        self.kv_peak = 0
        self.preemptions = 0
        self.on_complete = None  # called with each request that completes (Server: a conversation's next turn)

    def check_fits(self, requests, memory: dict, file: str) -> None:
        """Refuse, at the start, a request whose cache alone is larger than the whole KV cache."""
        for r in requests:
            need = r.prompt_tokens + r.output_tokens + self.lookahead
            if need > self.kv_capacity:
                raise ConfigError(file, "workload", f"request {r.request_id} needs {need:,} tokens of KV cache "
                                  f"({r.prompt_tokens:,} prompt + {r.output_tokens:,} output + {self.lookahead} "
                                  f"lookahead), more than the {self.kv_capacity:,} that fit ({memory['kv_GB']:.1f} GB "
                                  f"per GPU after {memory['weights_GB']:.1f} GB of weights)",
                                  "shorter requests, a larger tp or GPUs with more memory")

    def admit(self, now: float, on_first_admission) -> None:
        """Admit waiting requests while a batch slot is free and their KV cache fits (see the module docstring);
        on_first_admission(request) runs once per request (it starts the request's acceptance state)."""
        while self.waiting and len(self.active) + len(self.prefilling) < self.concurrency:
            request = self.waiting[0]
            if self.queue_mode:
                need = request.prompt_tokens + request.output_tokens + self.lookahead
                if self.kv_reserved + need > self.kv_capacity:
                    break
                self.kv_reserved += need
            elif self.kv_in_use() + self.lookahead * len(self.active) + request.prompt_tokens + \
                    request.generated + self.lookahead > self.kv_capacity:
                break
            self.waiting.popleft()
            if request.admitted_at is None:
                request.admitted_at = now
                on_first_admission(request)
            request.prefill_target = request.prompt_tokens + request.generated
            if request.kv_ready:  # its KV cache came from a prefill instance (disaggregation): it decodes at once
                request.kv_ready = False
                request.prefilled = request.prefill_target
                on_first_admission(request)  # this instance's acceptance state
                self.active.append(request)
                continue
            request.prefilled = 0
            self.prefilling.append(request)

    def would_admit(self) -> bool:
        """Whether admit() would take the first waiting request now (queue mode: a free slot and room to reserve)."""
        if not self.waiting or len(self.active) + len(self.prefilling) >= self.concurrency:
            return False
        request = self.waiting[0]
        if self.queue_mode:
            return self.kv_reserved + request.prompt_tokens + request.output_tokens + self.lookahead <= self.kv_capacity
        return self.kv_in_use() + self.lookahead * len(self.active) + request.prompt_tokens + request.generated + \
            self.lookahead <= self.kv_capacity

    def release(self, request) -> None:
        """A request leaves (it completed, or its KV cache moves to a decode instance): its reservation freed."""
        self.held -= 1
        if self.queue_mode:
            self.kv_reserved -= request.prompt_tokens + request.output_tokens + self.lookahead
        if self.on_complete is not None and request.completed_at is not None:
            self.on_complete(request)

    def kv_in_use(self) -> int:
        """Cached tokens: running requests' contexts, and prefilling requests at their full prefill (their pages
        are allocated when admitted)."""
        return sum(r.prompt_tokens + r.generated for r in self.active) + \
            sum(r.prefill_target for r in self.prefilling)

    def note_kv(self, kv_tokens: int) -> None:
        if kv_tokens > self.kv_peak:
            self.kv_peak = kv_tokens

    def preempt_if_full(self, lookahead: int) -> None:
        """preempt mode: evict the newest requests (prefilling first) until the step's KV cache fits."""
        while self.kv_in_use() + lookahead * len(self.active) > self.kv_capacity:
            if self.prefilling:
                victim = self.prefilling.pop()
            elif len(self.active) > 1:
                victim = self.active.pop()
            else:
                return  # one request always fits: requests larger than the cache were refused at the start
            victim.preemptions += 1
            self.preemptions += 1
            victim.prefilled = 0
            self.waiting.appendleft(victim)

    def retire(self, active: list) -> None:
        """After a step in which some requests completed: release their cache, keep the others decoding."""
        for r in active:
            if r.completed_at is not None:
                self.release(r)
        self.active = [r for r in active if r.completed_at is None]
