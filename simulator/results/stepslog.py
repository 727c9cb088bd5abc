"""`--steps-log steps.csv`: every step of the speculative run, one row per step, with named values and units.

Each column's header carries its unit (`_us` microseconds, `_tokens`, `_requests`); `kind` and `drafter` are names,
not codes. The time categories (compute_us ... other_us) sum to duration_us: they are the step's breakdown, as in
the report's "time per token" (all-reduce waiting and transfer booked apart).
"""
from __future__ import annotations

import csv

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


def rows(result: Result):
    """The step log as rows of STEP_COLUMNS values."""
    steps = result.run.steps
    names = drafter_names(result)
    columns = [steps[field] for _, field, _ in STEP_COLUMNS]
    for values in zip(*columns):
        row = []
        for (header, _, _), value in zip(STEP_COLUMNS, values):
            if header == "kind":
                row.append(KINDS.get(int(value), str(int(value))))
            elif header == "drafter":
                row.append(names[int(value)] if 0 <= int(value) < len(names) else "none")
            else:
                row.append(f"{value:.6g}")
        yield row


def write_steps(path: str, result: Result) -> None:
    """Every step of the speculative run as CSV under STEP_COLUMNS' headers (written atomically)."""
    from .files import atomic_write

    with atomic_write(path, newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow([header for header, _, _ in STEP_COLUMNS])
        writer.writerows(rows(result))
