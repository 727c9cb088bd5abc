"""The flow network: max-min fair sharing of link bandwidth, re-rated whenever a flow starts or ends.

Exact timelines where the fluid model is exact (SimPy style: who finished when), a property over random flow sets on
random small graphs against the definition of max-min fairness and an exact rational reference solver, and the
two-flows-on-one-hop case a snapshot share model (the link fidelity's before the flow network) got wrong (48 + 24 GB/s
on a 48 GB/s hop).
"""
from __future__ import annotations

from fractions import Fraction

import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config import load_scenario
from simulator.hardware.flows import FlowNetwork
from simulator.hardware.maxmin import max_min_rates, reference_rates
from simulator.hardware.interconnect import Fabric
from strategies import flow_sets

from conftest import scenario_path

REL = 1e-9


def _sender(env, network, log, name, start_us, route, nbytes, limit=None):
    yield env.timeout(start_us)
    flow = yield network.transfer(route, nbytes, limit)
    log.append((name, env.now))
    return flow


def _run(capacity, flows):
    """Run (name, start_us, route, nbytes[, limit]) senders to the end; the finish log and the Flow records."""
    env = simpy.Environment()
    network = FlowNetwork(env, capacity)
    log: list = []
    procs = {f[0]: env.process(_sender(env, network, log, *f)) for f in flows}
    env.run()
    return log, {name: proc.value for name, proc in procs.items()}


# --- exact timelines ---------------------------------------------------------------------------------------------

def test_second_flow_halves_the_first_and_speeds_up_when_it_ends():
    """A alone at 48 GB/s; B joins at 1 us and both run at 24; A ends at 3 us; B alone at 48 ends at 4 us."""
    log, flows = _run({"l": 48.0}, [("a", 0.0, ["l"], 96e3), ("b", 1.0, ["l"], 96e3)])
    assert log == [("a", 3.0), ("b", 4.0)]
    assert flows["a"].rates == [(0.0, 48.0), (1.0, 24.0), (3.0, 0.0)]
    assert flows["b"].rates == [(1.0, 24.0), (3.0, 48.0), (4.0, 0.0)]


def test_a_flow_bottlenecked_elsewhere_leaves_its_share_to_the_others():
    """Max-min, not equal split: C crosses a 10 GB/s link, so on the shared 48 GB/s link A gets 38, not 24."""
    capacity = {"shared": 48.0, "thin": 10.0}
    log, flows = _run(capacity, [("a", 0.0, ["shared"], 76e3), ("c", 0.0, ["shared", "thin"], 40e3)])
    # a: 76e3 B at 38 GB/s = 2 us; c: 40e3 B at 10 GB/s = 4 us (A's end does not speed C: its link is the thin one)
    assert log == [("a", 2.0), ("c", 4.0)]
    assert flows["a"].rates == [(0.0, 38.0), (2.0, 0.0)]
    assert flows["c"].rates == [(0.0, 10.0), (4.0, 0.0)]


def test_a_flow_limit_acts_as_a_private_link():
    log, flows = _run({"l": 48.0}, [("a", 0.0, ["l"], 20e3, 10.0), ("b", 0.0, ["l"], 76e3)])
    assert log == [("a", 2.0), ("b", 2.0)]
    assert flows["b"].rates == [(0.0, 38.0), (2.0, 0.0)]


def test_simultaneous_ends_rerate_once_and_zero_bytes_finish_at_once():
    log, flows = _run({"l": 40.0}, [("a", 0.0, ["l"], 40e3), ("b", 0.0, ["l"], 40e3), ("z", 0.5, ["l"], 0)])
    assert log == [("z", 0.5), ("a", 2.0), ("b", 2.0)]
    assert flows["z"].rates == []


def test_two_flows_on_one_48_GBps_hop_get_24_and_24_not_48_and_24():
    """Two transfers out of gpu0 on the reference machine share its 48 GB/s root-port link. The snapshot model
    (the former hardware/links.py) keeps the first at the 48 it had alone and gives the second 24: 72 GB/s through 48."""
    fabric = Fabric(load_scenario(scenario_path("pcie8_eagle3.yaml")).topology)
    first, second = fabric.hop(0, 1), fabric.hop(0, 2)
    shared = set(first.links) & set(second.links)
    assert shared and {fabric.link_of[link].bandwidth_GBps for link in shared} == {48.0}
    env = simpy.Environment()
    network = FlowNetwork.from_fabric(env, fabric)
    network.transfer(first.links, 1e6)
    assert network.rates_GBps() == [48.0]
    env.run(until=1.0)
    network.transfer(second.links, 1e6)
    assert network.rates_GBps() == [24.0, 24.0]


def test_bad_routes_are_refused():
    env = simpy.Environment()
    network = FlowNetwork(env, {"l": 1.0})
    for route, nbytes in (([], 1), (["x"], 1), (["l", "l"], 1), (["l"], -1)):
        with pytest.raises(ValueError):
            network.transfer(route, nbytes)
    with pytest.raises(ValueError):
        FlowNetwork(env, {"l": 0.0})


# --- properties over random flow sets ----------------------------------------------------------------------------

def _check_max_min(capacity, routes, limits, rates):
    """The definition: no link over capacity; every flow is at its limit or crosses a saturated link on which
    no flow runs faster than it (its bottleneck)."""
    load = {link: 0.0 for link in capacity}
    for route, rate in zip(routes, rates):
        assert rate > 0
        for link in route:
            load[link] += rate
    for link, used in load.items():
        assert used <= capacity[link] * (1 + REL)
    for route, limit, rate in zip(routes, limits, rates):
        if limit is not None and rate == pytest.approx(limit, rel=REL):
            continue
        bottlenecks = [link for link in route if load[link] == pytest.approx(capacity[link], rel=REL)
                       and all(r <= rate * (1 + REL) for rt, r in zip(routes, rates) if link in rt)]
        assert bottlenecks, f"flow on {route} at {rate} GB/s has no bottleneck link"


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(flow_sets())
def test_rates_are_max_min_fair_and_equal_the_reference(case):
    capacity, flows = case
    routes, limits = [r for r, _ in flows], [lim for _, lim in flows]
    rates = max_min_rates(routes, capacity, limits)
    _check_max_min(capacity, routes, limits, rates)
    exact = reference_rates(routes, capacity, limits)
    assert rates == pytest.approx([float(x) for x in exact], rel=REL)


@PROPERTY
@given(flow_sets(max_flows=6), st.data())
def test_rerating_on_every_start_and_finish(case, data):
    """Flows start at random times with random sizes. At every start and every finish the network's rates are the
    reference allocation of the flows then active, and each finished flow moved exactly its bytes over the rates it
    was given (so the completions the re-rating moved are where they belong)."""
    capacity, flows = case
    env = simpy.Environment()
    network = FlowNetwork(env, capacity)
    checks = []

    def check(_event=None):
        active = network.active
        expected = reference_rates([f.route for f in active], capacity, [f.limit_GBps for f in active])
        assert network.rates_GBps() == pytest.approx([float(x) for x in expected], rel=REL)
        checks.append(env.now)

    def sender(route, limit, start_us, nbytes):
        yield env.timeout(start_us)
        event = network.transfer(route, nbytes, limit)
        check()
        event.callbacks.append(check)
        return (yield event)

    procs = [env.process(sender(route, limit, data.draw(st.integers(0, 5)), data.draw(st.integers(1, 200)) * 1e3))
             for route, limit in flows]
    env.run()
    assert len(checks) == 2 * len(flows)
    for proc in procs:
        flow = proc.value
        moved = sum(rate * (end - at) * 1e3 for (at, rate), (end, _) in zip(flow.rates, flow.rates[1:]))
        assert moved == pytest.approx(flow.nbytes, rel=1e-9)
        assert flow.rates[0][0] == flow.started_at and flow.rates[-1] == (flow.finished_at, 0.0)


def test_reference_is_exact_rational():
    rates = reference_rates([["a"], ["a"], ["a", "b"]], {"a": 10.0, "b": 1.0})
    assert rates == [Fraction(9, 2), Fraction(9, 2), Fraction(1)]


def test_a_flow_group_fires_once_after_its_last_flow_and_tail():
    """A group of two 48 KB flows, one alone on a 48 GB/s link (done at 1 us), one sharing a 24 GB/s link with a
    third flow started by hand (12 GB/s each, both done at 4 us): the group's one event fires 1.5 us after its last
    byte (the tail, a collective's latency), not when its first flow ends."""
    env = simpy.Environment()
    network = FlowNetwork(env, {"a": 48.0, "b": 24.0})
    log = []

    def group():
        yield network.transfer_group([("a",), ("b",)], 48_000, tail_us=1.5)
        log.append(("group", env.now))
    env.process(group())
    env.process(_sender(env, network, log, "other", 0.0, ("b",), 48_000))
    env.run()
    # both flows on b at 12 GB/s: 48 KB each by 4 us; a's alone at 48 GB/s: 1 us
    assert log == [("other", pytest.approx(4.0, rel=REL)), ("group", pytest.approx(5.5, rel=REL))]
    assert network.active == []


@PROPERTY
@given(flow_sets(max_flows=8), st.data())
def test_groups_end_when_their_flows_sent_one_by_one_end(case, data):
    """Flows split into groups started at random times: each group's event fires when the same flows, sent one by one
    with `transfer` (every one re-rated on the shared network), have all finished, plus its tail. Groups whose links
    nothing else crosses run on their own schedule (hardware/lonegroup.py) and go back into the network when a later
    group crosses one of their links; neither may move a completion."""
    capacity, flows = case
    groups: dict[int, list] = {}
    for route, _limit in flows:
        groups.setdefault(data.draw(st.integers(0, 2)), []).append(route)
    timing = {g: (data.draw(st.integers(0, 4)), data.draw(st.integers(1, 100)) * 1e3, data.draw(st.integers(0, 3)) * 0.5)
              for g in groups}

    def ends(grouped: bool) -> dict:
        """When each group is done: sent as one group (its event includes the tail) or flow by flow (tail added)."""
        env = simpy.Environment()
        network, done = FlowNetwork(env, capacity), {}

        def sender(g):
            start, nbytes, tail = timing[g]
            yield env.timeout(start)
            if grouped:
                yield network.transfer_group(groups[g], nbytes, tail)
            else:
                yield env.all_of([network.transfer(route, nbytes) for route in groups[g]])
            done[g] = env.now + (0.0 if grouped else tail)
        for g in groups:
            env.process(sender(g))
        env.run()
        assert network.active == []
        return done

    assert ends(grouped=True) == pytest.approx(ends(grouped=False), rel=REL)
