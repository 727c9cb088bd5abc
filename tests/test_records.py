"""The step log as named records, and the caches the serving loop keeps (keyed by value, bounded)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.serving.simulate import simulate
from simulator.serving.records import BLOCK, STEP_FACTS, STEP_FIELDS, StepLog
from simulator.timing.costtable import STEP_COST, CostTable
from simulator.api.run import resolve
from simulator.speculation.protocols import Decision
from simulator.speculation.trees import Tree

from conftest import scenario_path


def test_log_blends_costs_by_name_and_grows_past_its_capacity():
    rng = np.random.default_rng(0)
    anchor, delta = rng.random((5, len(STEP_COST))), rng.random((5, len(STEP_COST)))
    table, measured = CostTable(anchor, delta), CostTable.measured(np.arange(len(STEP_COST), dtype=float))
    log = StepLog()
    n = 3 * BLOCK + 7  # several flushes, each past the capacity: the arrays double
    for i in range(n):
        facts = (i % 3, float(i), 1, 2, 3, -1, 4, 5, 6, 10 * i)
        log.append(facts, measured if i % 2 else table, 0 if i % 2 else i % 5, 0.0 if i % 2 else 0.25)
    assert len(log) == n
    cols = log.columns()
    assert len(cols) == n and cols["context"][-1] == 10 * (n - 1)
    i = 10  # an even step: table row 0, weight 0.25
    expected = anchor[0] + 0.25 * delta[0]
    assert cols.duration_us[i] == expected[STEP_COST.index("duration")]
    assert cols.allreduce_profile[i] == expected[STEP_COST.index("allreduce_profile")]
    assert cols.pass_us[11] == STEP_COST.index("pass_us")  # an odd step: the measured row as is
    records = log.records()
    assert records[11].context == 110 and isinstance(records[11].batch, int)
    assert set(cols.keys()) == set(STEP_FIELDS) and set(STEP_FACTS) <= set(STEP_FIELDS)
    with pytest.raises(KeyError):
        cols["no_such_field"]


def test_prefill_steps_book_no_drafting():
    row = np.ones(len(STEP_COST))
    log = StepLog()
    log.append((0, 0.0, 1, 1, 0, -1, 64, 64, 0, 0), CostTable.measured(row))
    log.append((2, 1.0, 1, 2, 3, 0, 4, 70, 0, 64), CostTable.measured(row))
    cols = log.columns()
    assert cols.draft_us.tolist() == [0.0, 1.0] and cols.draft.tolist() == [0.0, 1.0]


def test_decisions_compare_by_value():
    a, b = Decision(0, Tree.chain(3)), Decision(0, Tree.chain(3))
    assert a == b and hash(a) == hash(b) and a is not b
    assert Decision(1, Tree.chain(3)) != a and Decision(0, Tree.chain(4)) != a


def test_step_specs_stay_few_over_2000_hybrid_steps():
    """Hybrid hands out the same decision each step; the store's step specs (keyed by value) hold one entry per
    (kind, decision, batch): they must not grow with the steps (an id()-keyed cache grew by one a step)."""
    from simulator.cache import Store, held
    scenario = resolve(scenario_path("pcie8_hybrid.yaml"),
                       {"workload__requests": 1, "workload__output_tokens": 4096, "fidelity": "fast"})
    with held(Store()) as store:
        server = simulate(scenario, max_steps=2000)
    steps = server.log.columns()
    assert len(steps) == 2000
    kinds = set(steps.kind.tolist())
    assert kinds == {0.0, 1.0, 2.0}  # prefill, plain decode and speculative steps all ran
    assert store.count("server.step_spec") <= 3
    assert sum(store.count(name) for name in ("costs.pair", "costs.step_table", "costs.mean")) < 100


def test_a_deferred_breakdown_is_the_evaluated_one(monkeypatch):
    """A run's cost tables evaluate their breakdown only when it is read: the same floats as tables evaluated
    at once, in every column, and the durations without evaluating anything."""
    from conftest import clear_sample_caches
    from simulator.timing import costs
    from simulator.serving import server as server_module
    from simulator.results.summary import step_table

    scenario = resolve(scenario_path("pcie8_ngram.yaml"), {"workload__requests": 2, "workload__output_tokens": 300})
    clear_sample_caches()
    deferred = simulate(scenario, speculate=False)
    cols = step_table(deferred)
    assert not all(t.evaluated for t in deferred.log._tables)  # durations read, nothing evaluated
    durations = cols.duration_us.copy()
    assert not all(t.evaluated for t in deferred.log._tables)
    compute = cols.compute  # the first read of the breakdown evaluates it
    assert all(t.evaluated for t in deferred.log._tables)
    clear_sample_caches()
    monkeypatch.setattr(server_module, "FastStepCosts", lambda *a, **k: costs.FastStepCosts(*a[:3]))
    at_once = step_table(simulate(scenario, speculate=False))
    assert np.array_equal(durations, at_once.duration_us) and np.array_equal(compute, at_once.compute)
    for name in STEP_FIELDS:
        assert np.array_equal(cols[name], at_once[name]), name
    with pytest.raises(AttributeError):
        cols.kind = cols.kind


@pytest.mark.parametrize("name", ["pcie8_ngram.yaml", "pcie8_eagle3.yaml", "pcie8_hybrid.yaml"])
def test_a_sweep_points_figures_are_the_runs(name, monkeypatch):
    """run_figures gives run()'s figures, the same values, and evaluates no breakdown for figures that read
    durations alone (a sweep's throughput, speedup, accept length and break-even)."""
    from conftest import clear_sample_caches
    from simulator.timing import sampling
    from simulator.api.run import FIGURES, run, run_figures

    scenario = resolve(scenario_path(name), {"workload__requests": 2, "workload__output_tokens": 200})
    clear_sample_caches()
    real_breakdown, evaluated = sampling.breakdown, []
    monkeypatch.setattr(sampling, "breakdown", lambda *a: evaluated.append(1) or real_breakdown(*a))
    names = ["throughput_tok_s", "baseline_tok_s", "speedup", "mean_accept_len", "breakeven_accept_len",
             "provenance", "not_a_figure"]
    few = run_figures(scenario, names)
    assert not evaluated and list(few) == names[:-1]
    full = run(scenario).to_dict()
    assert evaluated  # the whole result reads the breakdown
    assert few == {k: full[k] for k in few}
    every = run_figures(scenario, FIGURES)
    assert list(every) == list(full) and {**every, "wall_time_s": 0} == {**full, "wall_time_s": 0}


def test_steps_and_step_return_the_same_named_fields():
    """step() and steps() hand the serving loop named records with the same fields in the same order (one step's,
    and many steps' as arrays); the serving loop's facts are a StepFacts in the log's STEP_FACTS order."""
    from simulator.serving.records import StepFacts
    from simulator.timing.costtable import StepCost, StepCosts

    assert StepCost._fields == ("duration_us", "table", "row", "weight")
    assert StepCosts._fields == ("durations_us", "tables", "rows", "weights")
    assert STEP_FACTS == StepFacts._fields and STEP_FACTS[:2] == ("kind", "start_at")
    log = StepLog()
    log.append(StepFacts(1, 5.0, 2, 3, 0, -1, 0, 40, 0, 37), CostTable(np.arange(len(STEP_COST), dtype=float)))
    row = log.records()[0]
    assert (row.kind, row.start_at, row.tokens, row.kv_tokens, row.context, row.duration_us) == (1, 5.0, 3, 40, 37, 0.0)


def test_result_sections_are_named_records_read_as_their_json_too():
    """A Result's step times, breakdown, all-reduce times and speculation are frozen records: read by attribute, equal
    to (and written as) the JSON object of the same keys, found by the dotted paths sweeps use, pickled whole."""
    import dataclasses
    import json
    import pickle

    from simulator.results.planner import lookup
    from simulator.results.sections import BreakdownMs, StatsMs, StepTimesMs, json_of

    verify = StatsMs(mean=2.0, p50=1.5, p99=4.0)
    times = StepTimesMs(decode=None, verify=verify, draft=None, step=StatsMs(3.0, 2.5, 5.0), baseline_decode=None)
    assert times.verify.p50 == 1.5 and times["verify"]["p99"] == 4.0 and times.get("draft") is None
    as_json = {"decode": None, "verify": {"mean": 2.0, "p50": 1.5, "p99": 4.0}, "draft": None,
               "step": {"mean": 3.0, "p50": 2.5, "p99": 5.0}, "baseline_decode": None}
    assert times == as_json and json.loads(json.dumps(json_of({"step_ms": times}))) == {"step_ms": as_json}
    assert lookup({"step_ms": times}, "step_ms.verify.mean") == 2.0 and lookup({"step_ms": times}, "step_ms.x") is None
    assert pickle.loads(pickle.dumps(times)) == times and times != {**as_json, "decode": {"mean": 1.0}}
    with pytest.raises(dataclasses.FrozenInstanceError):
        times.verify = None  # type: ignore[misc]
    with pytest.raises(KeyError):
        verify["p90"]
    assert list(BreakdownMs(1, 2, 3, 4, 5, 6, 7)) == ["compute", "memory", "launch", "allreduce_transfer",
                                                       "allreduce_wait", "draft", "other"]
    # written by Section's own __repr__ (no per-class one compiled), as a dataclass's would be, every field named
    assert repr(times) == ("StepTimesMs(decode=None, verify=StatsMs(mean=2.0, p50=1.5, p99=4.0), draft=None, "
                           "step=StatsMs(mean=3.0, p50=2.5, p99=5.0), baseline_decode=None)")


def test_a_sections_one_init_binds_fields_as_a_dataclass_would():
    """Section's one __init__ (no per-class method compiled): positional then keyword fields in order, a class
    value the default, a missing, unknown or repeated field a TypeError; the record frozen against delete too."""
    import dataclasses

    from simulator.results.collective_sections import AllreduceChoice
    from simulator.results.sections import PolicyFigures, StatsMs

    assert dict(StatsMs(1.0, p99=3.0, p50=2.0)) == {"mean": 1.0, "p50": 2.0, "p99": 3.0}
    assert PolicyFigures("static", 10, 1.0).drafter_share is None
    for bad in [lambda: StatsMs(1.0, 2.0), lambda: StatsMs(1.0, 2.0, 3.0, 4.0), lambda: StatsMs(1.0, 2.0, p90=3.0),
                lambda: StatsMs(1.0, 2.0, 3.0, mean=1.0)]:
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(dataclasses.FrozenInstanceError):
        del StatsMs(1.0, 2.0, 3.0).mean
    from simulator.hardware.collective_cost import CollectiveCost
    assert AllreduceChoice._keys() == ("bytes", *(f.name for f in dataclasses.fields(CollectiveCost)))


def test_a_sections_optional_figure_is_no_key_while_it_is_none():
    """A figure a section has only sometimes (a policy's drafter shares, a what-if that does not apply) is absent
    from its keys and its JSON while None, present once set: the JSON the plain dicts wrote, unchanged."""
    import json

    from simulator.results.sections import GraphVerifyWhatIf, PolicyFigures, WhatIf, json_of

    one = PolicyFigures(kind="static", steps=10, speculative_share=1.0)
    assert list(one) == ["kind", "steps", "speculative_share"] and one.get("drafter_share") is None
    assert json.dumps(json_of(one)) == '{"kind": "static", "steps": 10, "speculative_share": 1.0}'
    with pytest.raises(KeyError):
        one["drafter_share"]
    two = PolicyFigures("multi_drafter", 4, 0.5, {"eagle3": 0.25, "ngram": 0.25})
    assert two == {"kind": "multi_drafter", "steps": 4, "speculative_share": 0.5,
                   "drafter_share": {"eagle3": 0.25, "ngram": 0.25}}
    assert not WhatIf() and json_of(WhatIf()) == {} and WhatIf(GraphVerifyWhatIf(1.0, 2.0, 1.5))["cuda_graph_verify"] \
        == {"verify_ms": 1.0, "breakeven_accept_len": 2.0, "speedup_at_this_accept_len": 1.5}


def test_a_sink_gets_every_step_as_it_is_stored_and_joined_logs_view_the_same_columns():
    """A log with a sink hands each block over when it is stored (before the run ends: a steps log written as it
    goes), the blocks together are the log's columns; two logs joined give each one's columns as a view."""
    rng = np.random.default_rng(1)
    table = CostTable(rng.random((7, len(STEP_COST))), rng.random((7, len(STEP_COST))))
    blocks = []
    logs = [StepLog(sink=blocks.append), StepLog()]
    n = 2 * BLOCK + 5
    for k, log in enumerate(logs):
        for i in range(n + k):
            log.append((i % 3, float(i), 1 + i % 4, 2, 3, 0, 4, 5 + i, 6, 2 ** 30 + i), table, (i * 5) % 7,
                       float(i % 10) / 10)
    assert len(blocks) == 2 and sum(len(b) for b in blocks) == 2 * BLOCK  # the rest still pending
    logs[0].flush()
    whole = logs[0].columns()
    for name in STEP_FIELDS:
        assert np.array_equal(np.concatenate([b[name] for b in blocks]), whole[name]), name
    expected = [log.columns() for log in logs]
    as_lists = [{name: cols[name].tolist() for name in STEP_FIELDS} for cols in expected]
    joined, views = type(whole).joined([log.detach() for log in logs])
    assert len(joined) == 2 * n + 1 and [len(v) for v in views] == [n, n + 1]
    for view, lists in zip(views, as_lists):
        for name in STEP_FIELDS:
            assert view[name].tolist() == lists[name], name
    assert joined.context[n - 1] == 2 ** 30 + n - 1  # wide totals kept exactly in 32 bits
    for name in STEP_FIELDS:  # the whole (no copy held) reads as the logs' columns in turn
        assert joined[name].tolist() == as_lists[0][name] + as_lists[1][name], name
    # a column at some steps, read part by part (a cost blended there alone): the whole column's values there
    masks = [rng.random(len(joined)) < 0.3, np.ones(len(joined), bool), np.zeros(len(joined), bool),
             np.asarray(joined.kind) == 0]
    for mask in masks:
        for table in (joined, views[1]):
            part = mask[-len(table):]
            for name in STEP_FIELDS:
                assert table.at(name, part).tolist() == table[name][part].tolist(), name
    with pytest.raises(KeyError):
        joined.at("row", masks[0])


def test_runs_added_as_arrays_are_their_steps_appended_one_by_one():
    """StepLog.add_run (plain decode's runs) among single appends (prefills): the same columns as every step
    appended in turn, across several blocks (each handed to a sink once, in order) and tables first met in a run."""
    rng = np.random.default_rng(2)
    tables = [CostTable(rng.random((5, len(STEP_COST))), rng.random((5, len(STEP_COST)))) for _ in range(9)]
    blocks: list[list] = [[], []]
    runs, one_by_one = StepLog(sink=blocks[0].append), StepLog(sink=blocks[1].append)
    added = 0
    while added < 3 * BLOCK + 100:
        if rng.random() < 0.4:  # a single step
            facts, table = tuple(rng.integers(0, 50, len(STEP_FACTS)).tolist()), tables[rng.integers(9)]
            row, weight = int(rng.integers(5)), float(rng.random())
            for log in (runs, one_by_one):
                log.append(facts, table, row, weight)
            added += 1
            continue
        n = int(rng.integers(1, 300))
        facts = {name: rng.integers(0, 50, n) for name in STEP_FACTS}
        facts.update(kind=1, depth=0, start_at=rng.random(n) * 1e6)  # a value for all steps, or floats
        split = int(rng.integers(0, n + 1))
        run_tables = [(t, c) for t, c in ((tables[rng.integers(9)], split), (tables[rng.integers(9)], n - split)) if c]
        rows, weights = rng.integers(0, 5, n), rng.random(n)
        runs.add_run(facts, run_tables, rows, weights)
        at = 0
        for table, count in run_tables:
            for i in range(at, at + count):
                one_by_one.append(tuple(float(np.broadcast_to(facts[name], n)[i]) for name in STEP_FACTS), table,
                                  int(rows[i]), float(weights[i]))
            at += count
        added += n
    assert len(runs) == len(one_by_one) == added
    for log in (runs, one_by_one):
        log.flush()
    got, want = runs.columns(), one_by_one.columns()
    assert len(blocks[0]) >= 3 and all(len(b) >= BLOCK for b in blocks[0][:-1])
    for name in STEP_FIELDS:
        assert np.array_equal(got[name], want[name]), name
        assert np.array_equal(np.concatenate([b[name] for b in blocks[0]]), want[name]), name  # each step once


def test_a_step_total_beyond_32_bits_is_refused():
    log = StepLog()
    log.append((1, 0.0, 1, 1, 0, -1, 0, 2 ** 31, 0, 0), CostTable.measured(np.ones(len(STEP_COST))))
    with pytest.raises(OverflowError, match="kv_tokens"):
        log.flush()


def test_a_runs_result_holds_records_at_every_depth_but_its_maps_keyed_by_data():
    """A loaded run on a priced topology: every fixed-key part of its Result, nested ones too (provenance, the load's
    target check and client figures, the planner's price), is a named record; a plain dict only where the keys are
    data (accept lengths, pass kinds, kernel families, instances, drafters). The price is the topology file's."""
    import os

    import yaml

    from simulator.api.run import run
    from simulator.config.topology import GPUPrice
    from simulator.results.sections import ClientFigures, GpuPrice, Provenance, Section, TargetCheck, json_of
    from conftest import ROOT

    keyed_by_data = {"accept_len_hist", "allreduce_ms_per_pass", "kernels.families", "collectives.kinds",
                     "deployment.per_instance", "policy.drafter_share"}
    r = run(scenario_path("nvlink8_h100_llama8b_poisson.yaml"), workload__requests=6, baseline=False)
    plain = []

    def walk(value, path):
        if isinstance(value, dict) and path not in keyed_by_data:
            plain.append(path)
        if isinstance(value, (dict, Section)):
            for key in value:
                walk(value[key], f"{path}.{key}" if path else key)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, path)

    for name in r.to_dict():
        walk(getattr(r, name), name)
    assert plain == [] and r.accept_len_windows and r.load.client.itl_ms is not None
    assert isinstance(r.provenance, Provenance) and r.provenance.overrides == ("workload.requests=6",)
    assert isinstance(r.load.target, TargetCheck) and isinstance(r.load.client, ClientFigures)
    assert r.load.client.ttft_ms.median == r.load.client["ttft_ms"]["median"] and r.planner.target_met is r.load.target.met
    topology = yaml.safe_load(open(os.path.join(ROOT, "topologies", "nvlink8_h100.yaml")))
    assert isinstance(r.planner.price, GpuPrice) and json_of(r.planner.price) == topology["price"]
    assert GpuPrice._keys() == tuple(GPUPrice.model_fields)  # the record is the configuration's price, field for field


def test_the_allreduce_section_is_the_collective_models_record_with_its_size():
    """The Result's all-reduce choice has `bytes` and then exactly CollectiveCost's fields, in order, with their
    defaults: a field added to or renamed in the collective model's record reaches the section (and its JSON)."""
    from dataclasses import fields

    from simulator.hardware.collectives import CollectiveCost
    from simulator.results.report import CSV_COLUMNS
    from simulator.results.collective_sections import AllreduceChoice

    names = [f.name for f in fields(CollectiveCost)]
    assert AllreduceChoice._keys() == ("bytes", *names)
    cost = CollectiveCost("nccl_ring", "LL", 12.5, 5.0, 1.25, 2.1875)
    choice = AllreduceChoice(4096, **cost.as_dict())
    assert dict(choice) == {"bytes": 4096, **cost.as_dict()} and choice.implementation == cost.implementation
    assert [c for c in CSV_COLUMNS if c.startswith("allreduce_choice.decode.")] == \
        [f"allreduce_choice.decode.{k}" for k in ("bytes", *names) if k != "implementation"]
