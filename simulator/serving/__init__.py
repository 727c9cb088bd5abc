"""The processes of a serving engine in one SimPy Environment: the serving loop (server: the scheduler, admission,
batching, the speculation policy's decision, the step log in records), requests and their arrivals, the router, a
deployment of instances and prefill/decode disaggregation with its KV transfers, and at event fidelity every rank's
host and GPU stream, every collective and the drafter (ranks, steps, drafting). What a pass costs comes from
simulator.timing (docs/design.md)."""
