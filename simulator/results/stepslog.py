"""`--steps-log steps.csv`: every step of the speculative run, one row per step, with named values and units.

Each column's header carries its unit (`_us` microseconds, `_tokens`, `_requests`); `kind` and `drafter` are names,
not codes. The time categories (compute_us ... other_us) sum to duration_us: they are the step's breakdown, as in
the report's "time per token" (all-reduce waiting and transfer booked apart).
"""
from __future__ import annotations

import csv
import shutil
import tempfile
from typing import IO

from ..serving.records import KIND_DECODE, KIND_PREFILL, KIND_SPEC
from .summary import Result

KINDS = {KIND_PREFILL: "prefill", KIND_DECODE: "decode", KIND_SPEC: "speculative"}

# (header, step-log field, meaning)
STEP_COLUMNS = (
    ("kind", "kind", "prefill, decode (plain) or speculative (draft + verify)"),
    ("start_us", "start_at", "simulated time the step started"),
    ("duration_us", "duration_us", "the whole step: drafting, the main pass and host work"),
    ("draft_us", "draft_us", "drafting (draft passes and drafter host work)"),
    ("pass_us", "pass_us", "the main pass: verify for a speculative step, else decode or prefill"),
    ("batch_requests", "batch", "requests in the step"),
    ("tokens", "tokens", "tokens the step emitted (accepted drafts and bonus tokens included)"),
    ("depth", "depth", "deepest accepted draft"),
    ("compute_us", "compute", "breakdown: compute-bound kernel time"),
    ("memory_us", "memory", "breakdown: memory-bound kernel time"),
    ("launch_us", "launch", "breakdown: GPU idle waiting for the host's launches"),
    ("allreduce_transfer_us", "allreduce_transfer", "breakdown: all-reduce transfer"),
    ("allreduce_wait_us", "allreduce_wait", "breakdown: waiting at all-reduce barriers for the slowest rank"),
    ("draft_breakdown_us", "draft", "breakdown: drafting"),
    ("other_us", "other", "breakdown: scheduler and synchronisation host work"),
    ("allreduce_rank_mean_us", "allreduce_only", "all-reduce time (wait + transfer) averaged over ranks"),
    ("allreduce_profiled_rank_us", "allreduce_profile", "all-reduce time a profile of one typical rank shows"),
    ("drafter", "drafter", "the drafter used (none for plain decode and prefill)"),
    ("verify_tokens", "verify_tokens", "tokens in the verify pass (every request's tree)"),
    ("kv_tokens", "kv_tokens", "tokens held in the KV cache after the step"),
    ("waiting_requests", "waiting", "requests queued for a batch slot or KV memory"),
    ("context_tokens", "context", "context tokens the step's pass attends to (summed over the batch)"),
)


def drafter_names(result: Result) -> list[str]:
    """Drafter index -> name: the scenario's method first, then a multi-drafter policy's fallback."""
    shares = (result.policy or {}).get("drafter_share") or {}
    return list(shares) or [result.speculation.method]


def scenario_drafters(scenario) -> list[str]:
    """drafter_names from the scenario alone (the same names: the policy's shares are keyed by them)."""
    spec = scenario.spec
    return [spec.speculation.method] + ([spec.policy.fallback.method] if spec.policy.kind == "multi_drafter" else [])


def block_rows(steps, names: list[str]):
    """Steps (named columns) as rows of STEP_COLUMNS values."""
    columns = [steps[field] for _, field, _ in STEP_COLUMNS]
    for values in zip(*(column.tolist() for column in columns)):
        row = []
        for (header, _, _), value in zip(STEP_COLUMNS, values):
            if header == "kind":
                row.append(KINDS.get(int(value), str(int(value))))
            elif header == "drafter":
                row.append(names[int(value)] if 0 <= int(value) < len(names) else "none")
            else:
                row.append(f"{value:.6g}")
        yield row


def rows(result: Result):
    """The step log as rows of STEP_COLUMNS values."""
    return block_rows(result.run.steps, drafter_names(result))


def write_steps(path: str, result: Result) -> None:
    """Every step of the speculative run as CSV under STEP_COLUMNS' headers (written atomically)."""
    from .files import atomic_write

    with atomic_write(path, newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow([header for header, _, _ in STEP_COLUMNS])
        writer.writerows(rows(result))


class StepsLogWriter:
    """`--steps-log` written as the run goes: each block of steps becomes CSV rows when the log stores it (its
    sink), so the file costs no memory beyond a block. A deployment's instances write in turn, as write_steps
    orders them: instance 0's rows into the file, each later instance's into a temporary file beside it, appended
    at the end. The file appears whole (atomic_write) when the run succeeds; on an error it is left as it was."""

    def __init__(self, path: str, scenario):
        from .files import atomic_write

        self.names = scenario_drafters(scenario)
        self._context = atomic_write(path, newline="")
        self._handle = self._context.__enter__()
        self._parts: dict[int, IO] = {}
        csv.writer(self._handle, lineterminator="\n").writerow([header for header, _, _ in STEP_COLUMNS])

    def sink(self, instance: int):
        """The sink of instance `instance`'s step log."""
        if instance == 0:
            handle = self._handle
        else:
            handle = self._parts[instance] = tempfile.TemporaryFile("w+", newline="")
        writer = csv.writer(handle, lineterminator="\n")
        return lambda steps: writer.writerows(block_rows(steps, self.names))

    def close(self, error: BaseException | None = None) -> None:
        """Append the later instances' rows and put the file in place (error: leave it as it was)."""
        try:
            if error is None:
                for index in sorted(self._parts):
                    part = self._parts[index]
                    part.seek(0)
                    shutil.copyfileobj(part, self._handle)
        finally:
            for part in self._parts.values():
                part.close()
            if error is None:
                self._context.__exit__(None, None, None)
            else:
                self._context.__exit__(type(error), error, error.__traceback__)
