"""Deployments: several engine instances behind a router in one SimPy Environment (serving/deployment.py,
serving/router.py), each on its own GPUs, reported per instance and in total."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import simpy

from conftest import scenario_path
from simulator.cli import main
from simulator.timing.machine import Machine
from simulator.serving.simulate import simulate
from simulator.serving.deployment import instance_gpus, instance_machines, instance_seeds, simulate_deployment
from simulator.serving.router import Router
from simulator.results.report import deployment_lines
from simulator.api.run import resolve, run
from simulator.results.summary import summarize

DP2 = scenario_path("pcie8_tp4_dp2.yaml")  # Llama-3.1-70B, 2 x TP4 on the reference machine, one socket each
SMALL = {"workload__output_tokens": 128}


def test_instances_take_the_placement_gpus_and_their_collectives_cross_them():
    """Instance 1's all-reduce ring runs over gpu4-7 (socket 1), not over the first tp GPUs; a group split over
    both sockets crosses the socket link and pays for it."""
    scenario = resolve(DP2)
    machines = instance_machines(scenario)
    assert [m.fabric.gpu_names for m in machines] == [["gpu0", "gpu1", "gpu2", "gpu3"], ["gpu4", "gpu5", "gpu6", "gpu7"]]
    names = machines[1].fabric.names
    ring = machines[1].allreduce.step_plan(1 << 20).hops
    assert {names[node] for hop in ring for link in hop.links for node in link} == \
        {"gpu4", "gpu5", "gpu6", "gpu7", "cpu1"}
    split = Machine(scenario, ["gpu0", "gpu1", "gpu4", "gpu5"])
    nbytes = 1 << 20
    assert split.allreduce.step_plan(nbytes).bandwidth_GBps < machines[0].allreduce.step_plan(nbytes).bandwidth_GBps
    assert split.allreduce.cost(nbytes).time_us > machines[0].allreduce.cost(nbytes).time_us
    assert machines[0].key != machines[1].key  # the fast fidelity's memoised samples are per instance


def test_instance_seeds_are_spawned_and_one_instance_keeps_the_scenario_seed():
    assert instance_seeds(7, 1) == [7]
    seeds = instance_seeds(7, 3)
    assert len(set(seeds)) == 3 and seeds == instance_seeds(7, 3) and 7 not in seeds


@pytest.mark.parametrize("fidelity", ["fast", "layer", "link"])
def test_an_isolated_replica_runs_exactly_as_it_would_alone(fidelity):
    """Requests arriving at once, round robin, no link shared: instance i serves requests i, i + 2, ... exactly as a
    lone replica on its GPUs with its spawned seed serves as many (every step the same float)."""
    both = resolve(DP2, {"workload__requests": 8, **SMALL})
    servers = simulate_deployment(both, fidelity=fidelity)
    alone = resolve(DP2, {"workload__requests": 4, "parallelism__dp": 1, **SMALL})
    for i, (gpus, seed) in enumerate(zip(instance_gpus(both), instance_seeds(0, 2))):
        solo = summarize(simulate(alone, Machine(alone, gpus), seed=seed, fidelity=fidelity))
        part = summarize(servers[i])
        assert [r.request_id for r in servers[i].requests] == [i, i + 2, i + 4, i + 6]
        assert np.array_equal(part.steps.duration_us, solo.steps.duration_us)
        assert part.throughput_tok_s == solo.throughput_tok_s


def test_two_replicas_give_twice_one_replica_at_layer_fidelity():
    """Issue 14's acceptance: 2 replicas with the same load per replica give within 3% of twice one replica's
    throughput. The instances draw from their own seeds; one replica's throughput varies by 0.6% (SD) from seed to
    seed at this load (8 seeds, measured when the test was written), so the ratio's SD is ~0.8% and 3% is ~4 SD."""
    load = {"workload__output_tokens": 256, "fidelity": "layer"}
    one = run(DP2, baseline=False, parallelism__dp=1, workload__requests=16, **load)
    two = run(DP2, baseline=False, workload__requests=32, **load)
    assert two.deployment["instances"] == 2 and one.deployment["instances"] == 1
    assert two.throughput_tok_s == pytest.approx(2 * one.throughput_tok_s, rel=0.03)
    per = two.deployment["per_instance"]
    assert [per[k]["requests"] for k in ("0", "1")] == [16, 16]
    assert sum(per[k]["tokens"] for k in per) == two.tokens == 2 * one.tokens
    # the deployment's span is its slowest instance's: the total is at most the instances' rates added
    assert two.throughput_tok_s <= sum(per[k]["throughput_tok_s"] for k in per) * (1 + 1e-12)
    assert sum(two.breakdown_ms_per_token.values()) == pytest.approx(1e3 / two.throughput_tok_s, rel=1e-9)


class _Stub:
    """A server as the router sees it: its load, and what it was sent."""

    def __init__(self, load: int):
        self.load, self.got, self.closed = load, [], False

    def submit(self, request):
        self.got.append(request.request_id)
        self.load += 1

    def close(self):
        self.closed = True


class _Request:
    def __init__(self, request_id: int, arrived_at: float):
        self.request_id, self.arrived_at, self.instance = request_id, arrived_at, 0


def _route(kind: str, loads: list[int], arrivals: list[float]):
    env = simpy.Environment()
    servers = [_Stub(load) for load in loads]
    router = Router(env, servers, kind)
    log = []
    requests = [_Request(i, t) for i, t in enumerate(arrivals)]
    original = router.pick
    router.pick = lambda: (log.append(env.now), original())[1]
    env.process(router.run(requests))
    env.run()
    return servers, router, log, requests


def test_round_robin_in_arrival_order_at_arrival_times():
    servers, router, log, requests = _route("round_robin", [5, 0, 0], [0.0, 1.5, 1.5, 4.0, 9.0])
    assert [s.got for s in servers] == [[0, 3], [1, 4], [2]]
    assert log == [0.0, 1.5, 1.5, 4.0, 9.0] and router.sent == [2, 2, 1]
    assert [r.instance for r in requests] == [0, 1, 2, 0, 1] and all(s.closed for s in servers)


def test_least_loaded_goes_to_the_fewest_requests_lowest_index_on_a_tie():
    servers, router, _, _ = _route("least_loaded", [2, 0, 1], [0.0] * 5)
    # loads (2, 0, 1): -> 1 (2, 1, 1) -> 1, the tie's lowest (2, 2, 1) -> 2 (2, 2, 2) -> 0 (3, 2, 2) -> 1
    assert [s.got for s in servers] == [[3], [0, 1, 4], [2]]
    assert router.sent == [1, 3, 1]


POISSON = {"kind": "poisson", "rate_per_s": 2.0}


@pytest.mark.parametrize("path, overrides", [
    ("large/cluster16_h100_llama8b_dp128.yaml", {"parallelism.dp": 8, "workload.requests": 120}),  # plain runs
    ("pcie8_tp4_dp2.yaml", {"workload.requests": 16, "workload.output_tokens": 48, "workload.max_running_requests": 2,
                            "workload.arrival": POISSON}),
    ("pcie8_tp4_dp2.yaml", {"workload.requests": 12, "workload.prompt_tokens": 21000, "workload.output_tokens": 1024,
                            "workload.max_running_requests": 4, "workload.kv_overflow": "preempt",
                            "runtime.memory_fraction": 0.45, "workload.arrival": POISSON}),  # preemptions
    ("two_node_pcie8_pd.yaml", {"workload.requests": 12, "workload.output_tokens": 32, "workload.arrival": POISSON})])
def test_each_instances_counted_load_is_its_requests_at_every_pick(monkeypatch, path, overrides):
    """The least-loaded router reads each instance's count of requests in and out (Admission.held): at every
    arrival it equals the requests waiting, prefilling and decoding there (Server.load), and every count ends at 0."""
    picks, servers = [], {}
    real = Router.pick

    def pick(router):
        servers.update((id(s), s) for s in router.servers)
        assert [a.held for a in router._admissions] == [s.load for s in router.servers]
        picks.append(1)
        return real(router)
    monkeypatch.setattr(Router, "pick", pick)
    result = run(scenario_path(path), baseline=False, deployment__router="least_loaded",
                 **{k.replace(".", "__"): v for k, v in overrides.items()})
    routers = 2 if path.startswith("two_node_pcie8_pd") else 1  # the prefill instances', then the decode ones'
    assert len(picks) == routers * len(result.run.requests)
    assert len(servers) == overrides.get("parallelism.dp", 2)  # every instance was compared
    assert all(s.admission.held == s.load == 0 for s in servers.values())
    assert sum(r.preemptions for r in result.run.requests) > 0 or "workload.kv_overflow" not in overrides


def test_least_loaded_keeps_short_requests_away_from_a_long_one(tmp_path):
    """A short request and a long one arrive together (a trace is read in arrival order, shorter rows first on a
    tie), then a short one every second, one request at a time per instance: round robin queues every other short
    request behind the long one on instance 1; least-loaded sees instance 1 busy and instance 0 free, and sends every
    later request to instance 0."""
    trace = tmp_path / "arrivals.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,1024\n0,100,16\n1,100,16\n2,100,16\n3,100,16\n")
    load = {"workload__arrival": {"kind": "trace", "file": str(trace)}, "workload__concurrency": 1,
            "speculation__method": "none"}
    rr = run(DP2, baseline=False, **load)
    ll = run(DP2, baseline=False, deployment__router="least_loaded", **load)
    assert [r.output_tokens for r in rr.run.requests] == [16, 1024, 16, 16, 16]
    assert [r.instance for r in rr.run.requests] == [0, 1, 0, 1, 0]
    assert [r.instance for r in ll.run.requests] == [0, 1, 0, 0, 0]
    long_request_s = rr.run.requests[1].completed_at / 1e6
    assert rr.load["ttft_ms"]["p99"] / 1e3 > 0.8 * long_request_s - 2  # a short one waited for the long one
    assert ll.load["ttft_ms"]["p99"] < 1e3  # none did


def test_per_instance_figures_in_json_table_and_csv(capsys):
    argv = [DP2, "--set", "workload.requests=4", "--set", "workload.output_tokens=64"]
    assert main(argv + ["--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    dep = data["deployment"]
    assert dep["instances"] == 2 and dep["router"] == "round_robin" and dep["gpus"] == 8
    assert set(dep["per_instance"]["1"]) >= {"gpus", "requests", "tokens", "throughput_tok_s", "ttft_ms", "tpot_ms"}
    assert "2 x TP4 (round-robin router)" in data["description"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "deployment          2 instances of TP4 on 8 GPUs" in table and "instance 1 (gpu4,gpu5,gpu6,gpu7)" in table
    assert main(argv + ["--format", "csv"]) == 0
    (cells,) = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert cells["deployment.instances"] == "2" and float(cells["deployment.total_tok_s"]) == \
        pytest.approx(dep["total_tok_s"])
    assert main(argv + ["--format", "csv-long"]) == 0
    assert "deployment.per_instance.1.throughput_tok_s" in capsys.readouterr().out


@pytest.mark.parametrize("sets, fragment", [
    (["deployment.router=random"], "deployment.router"),
    (["deployment.routr=round_robin"], "deployment"),
    (["parallelism.gpus=[[gpu0,gpu1,gpu2,gpu3],[gpu4,gpu5,gpu6]]"], "parallelism.gpus[1]: 3 GPUs"),
])
def test_deployment_mistakes_are_one_line_and_exit_2(capsys, sets, fragment):
    argv = [DP2]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and fragment in err, err


# --- shared links at link fidelity -------------------------------------------------------------------------------

CROSS = [["gpu0", "gpu1", "gpu4", "gpu5"], ["gpu2", "gpu3", "gpu6", "gpu7"]]  # each TP group on both sockets


def _collectives(links, plans, starts):
    """Each plan's collective started at its time on the shared links: {instance: duration}."""
    env, durations = links.env, {}

    def one(i):
        yield env.timeout(starts[i])
        begin = env.now
        yield from links.collective(plans[i], i)
        durations[i] = env.now - begin
    for i in range(len(plans)):
        env.process(one(i))
    env.run()
    return durations


def test_two_rings_across_the_socket_link_each_get_the_fair_share():
    """Two TP4 groups whose rings both cross the 22 GB/s socket link, one flow each way per ring: together each
    gets 11 GB/s there, so each all-reduce's transfer takes twice as long (the analytic fair share); started half a
    transfer apart, the first runs alone for T/2 then shares, the second shares until the first ends and then runs
    alone: both take T/2 + T (re-rated when the second starts and when the first ends)."""
    from simulator.serving.deployment import shared_links
    from simulator.timing.linkpass import SharedLinks

    scenario = resolve(DP2, {"parallelism__gpus": CROSS})
    machines = instance_machines(scenario)
    assert shared_links(machines) == ["cpu0->cpu1", "cpu1->cpu0"]
    assert shared_links(instance_machines(resolve(DP2))) == []
    plans = [m.allreduce.step_plan(64 << 20) for m in machines]
    assert [p.bandwidth_GBps for p in plans] == [22.0, 22.0]  # alone, the socket link is each ring's narrowest
    latency = plans[0].base_us + plans[0].steps * plans[0].step_latency_us
    transfer = plans[0].steps * plans[0].transfer_us
    assert transfer > 10 * latency  # a bandwidth-bound message
    fair = 22.0 / 2
    together = _collectives(SharedLinks(simpy.Environment(), machines[0].fabric), plans, [0.0, 0.0])
    for i in (0, 1):
        assert together[i] == pytest.approx(latency + transfer * 22.0 / fair, rel=0.02)
        assert together[i] == pytest.approx(latency + 2 * transfer, rel=1e-9)
    links = SharedLinks(simpy.Environment(), machines[0].fabric)
    staggered = _collectives(links, plans, [0.0, transfer / 2])
    assert staggered[0] == pytest.approx(latency + 1.5 * transfer, rel=1e-9)
    assert staggered[1] == pytest.approx(latency + 1.5 * transfer, rel=1e-9)
    assert links.delay_us[0] == pytest.approx(0.5 * transfer, rel=1e-9)
    alone = _collectives(SharedLinks(simpy.Environment(), machines[0].fabric), plans[:1], [0.0])
    assert alone[0] == pytest.approx(machines[0].allreduce.cost(64 << 20).time_us, rel=1e-9)  # = layer fidelity


def test_shared_links_report_link_and_layer_throughput():
    """Groups that cross the socket link slow each other at link fidelity; the Result gives that throughput, the
    layer fidelity's (no sharing) and the collectives' wait. Isolated groups share nothing and wait for nothing."""
    load = {"workload__requests": 4, "workload__output_tokens": 64, "fidelity": "link"}
    crossed = run(DP2, baseline=False, parallelism__gpus=CROSS, **load)
    layer = run(DP2, baseline=False, parallelism__gpus=CROSS, **{**load, "fidelity": "layer"})
    contention = crossed.deployment["contention"]
    assert crossed.deployment["shared_links"] == ["cpu0->cpu1", "cpu1->cpu0"]
    assert contention["layer_tok_s"] == layer.throughput_tok_s
    assert contention["link_tok_s"] == crossed.throughput_tok_s < layer.throughput_tok_s
    assert contention["slowdown"] == pytest.approx(1 - crossed.throughput_tok_s / layer.throughput_tok_s)
    assert all(inst["link_delay_ms"] > 0 for inst in crossed.deployment["per_instance"].values())
    isolated = run(DP2, baseline=False, **load)
    assert isolated.deployment["shared_links"] == [] and "contention" not in isolated.deployment
    assert all(abs(inst["link_delay_ms"]) < 1e-6 for inst in isolated.deployment["per_instance"].values())


# --- prefill/decode disaggregation -------------------------------------------------------------------------------

def test_disaggregated_requests_prefill_on_one_instance_and_decode_on_the_other():
    """Instance 0 only prefills, instance 1 only decodes: every request's first token comes from instance 0, its KV
    cache then crosses to instance 1 (4 shards over the 22 GB/s socket link, shared with the other transfers in
    flight, and the route's latency), which admits it without a prefill and generates the rest; no token is lost or
    made twice."""
    from simulator.serving.records import KIND_PREFILL

    scenario = resolve(DP2, {"deployment__prefill_instances": 1, "workload__requests": 4, **SMALL})
    prefill, decode = simulate_deployment(scenario, fidelity="layer")
    steps = [summarize(server).steps for server in (prefill, decode)]
    assert (steps[0]["kind"] == KIND_PREFILL).all() and not (steps[1]["kind"] == KIND_PREFILL).any()
    assert steps[0]["tokens"].sum() == 4 and steps[1]["tokens"].sum() == 4 * (128 - 1)
    requests = prefill.requests
    assert requests == decode.requests and all(r.instance == 1 and r.completed_at for r in requests)
    per_token = decode.machine.memory["kv_bytes_per_token"]
    assert [nbytes for nbytes, _ in decode.kv_received] == [(1000 + 1) * per_token] * 4
    fabric = decode.machine.fabric
    latency = fabric.topology.fabric.shm_hop_latency_us + 0.2  # staged through host memory, across the sockets
    first = decode.kv_received[0]
    # the four requests prefill in one batch, so their transfers start together: 16 shards share the socket link
    assert first[1] == pytest.approx(latency + first[0] / (22.0 / 16 * 1e3), rel=1e-9)
    for r in requests:
        assert r.admitted_at <= r.first_token_at < r.first_token_at + first[1] * (1 - 1e-9) <= r.completed_at


def test_disaggregation_report_and_mistakes(capsys):
    argv = [DP2, "--set", "deployment.prefill_instances=1", "--set", "workload.requests=4",
            "--set", "workload.output_tokens=32", "--format", "json"]
    assert main(argv) == 0
    dep = json.loads(capsys.readouterr().out)["deployment"]
    assert [dep["per_instance"][k]["role"] for k in ("0", "1")] == ["prefill", "decode"]
    pd = dep["disaggregation"]
    assert pd["kv_transfers"] == 4 and pd["prefill_instances"] == 1 and pd["decode_instances"] == 1
    per_token = instance_machines(resolve(DP2))[0].memory["kv_bytes_per_token"]
    assert pd["kv_MB_per_request"] == pytest.approx(4 * (1000 + 1) * per_token / 1e6, rel=1e-12)  # 4 ranks' shards
    assert pd["kv_GBps_mean"] > 0
    for bad, allowed in (("2", "up to 1"), ("1 --set parallelism.dp=1", "dp of 2 or more")):
        argv = [DP2, "--set", f"deployment.prefill_instances={bad.split()[0]}"] + bad.split()[1:]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.strip().count("\n") == 0 and "deployment.prefill_instances" in err and allowed in err, err


def test_kv_transfer_report_counts_every_pipeline_stages_shards():
    """Under TP2 x PP2 each of an instance's 4 ranks (2 per stage) sends a shard: the report counts all 4 (tp x pp,
    not tp alone) and the table names the split. A shard is the heaviest stage's per rank (the memory budget's
    kv_bytes_per_token): Llama-3.1-70B's last 40 layers and the EAGLE-3 head's one, 4 of 8 KV heads x 128 x 2 (K, V)
    x 2 bytes each (the first stage's ranks, without the head, are counted at that size too)."""
    split = {"parallelism__tp": 2, "parallelism__pp": 2, "deployment__prefill_instances": 1, "workload__requests": 2}
    result = run(DP2, baseline=False, fidelity="fast", **split, **SMALL)
    per_token = instance_machines(resolve(DP2, split))[0].memory["kv_bytes_per_token"]
    assert per_token == (40 + 1) * 4 * 128 * 2 * 2
    pd = result.deployment["disaggregation"]
    assert pd["kv_MB_per_request"] == pytest.approx(4 * (1000 + 1) * per_token / 1e6, rel=1e-12)
    assert "2 instances of TP2 x PP2 on 8 GPUs" in "\n".join(deployment_lines(result))


@pytest.mark.parametrize("fidelity", ["fast", "link"])
def test_disaggregation_serves_every_request_at_every_fidelity(fidelity):
    """At link fidelity the KV shards are flows on the links the instances' collectives share."""
    result = run(DP2, baseline=False, fidelity=fidelity, deployment__prefill_instances=1, workload__requests=4, **SMALL)
    assert result.tokens == 4 * 128 and all(r.completed_at for r in result.run.requests)
    assert result.deployment["disaggregation"]["kv_transfers"] == 4


def test_a_deployment_trace_records_instance_0():
    from simulator.results.trace import record

    trace = record(resolve(DP2, {"workload__requests": 2, **SMALL}), steps=2)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert {f"rank {r}" for r in range(4)} <= names and "rank 4" not in names
