"""Broken, plausible and extreme configurations through the CLI, in process; every case states its exit code.

The contract (README, issue 5): a configuration mistake prints exactly one line on stderr (no traceback) and exits
with status 2; a valid configuration runs and prints finite numbers (exit 0). Each case below says which of the two
it is: a wrongly accepted mistake fails as surely as a wrongly rejected machine. Never exit 1 (an internal error),
never a hang, never a NaN or an infinity in the JSON. Each example runs under a wall-clock guard (EXAMPLE_TIMEOUT_S) and an address-space
cap (EXAMPLE_MEMORY_GB above what the process already holds), so an example that would hang or swallow the machine
fails as such instead of taking the test run down with it.

Workload sizes (requests, output tokens) are kept small on purpose: a billion-token workload is a legitimate, long
simulation, not a robustness failure. Every other number may be absurd.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from strategies import nvswitch_fabric, pcie_fabric, topology
from conftest import ROOT, scenario_path, topology_path

EXAMPLE_TIMEOUT_S = 20
EXAMPLE_MEMORY_GB = 4
ROBUST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROBUST_VALID = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- running the CLI under guards ----------------------------------------------------------------------------------


class ExampleTimeout(BaseException):
    """Raised by the alarm; a BaseException so the CLI's `except Exception` cannot turn it into exit 1."""


def _current_address_space() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


@contextlib.contextmanager
def guarded(seconds: float = EXAMPLE_TIMEOUT_S, memory_gb: float = EXAMPLE_MEMORY_GB):
    def on_alarm(signum, frame):
        raise ExampleTimeout(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _current_address_space() + int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with guarded(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _no_constants(name: str):
    raise AssertionError(f"{name} in the JSON output")


def finite_numbers(value, path="json"):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        assert math.isfinite(value), f"{path} = {value}"
    elif isinstance(value, dict):
        for k, v in value.items():
            finite_numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            finite_numbers(v, f"{path}[{i}]")


def assert_contract(code: int, out: str, err: str, expected: int) -> dict | str:
    """The expected exit: 2 with exactly one stderr line and no traceback, or 0 with finite JSON; returns the line or
    the data."""
    assert code == expected, f"exit {code}, expected {expected}: {err.strip()[-500:]}"
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert out == ""
        return lines[0]
    data = json.loads(out, parse_constant=_no_constants)
    finite_numbers(data)
    assert data["tokens"] > 0 and data["throughput_tok_s"] > 0
    return data


def write_yaml(directory: str, data=None, text: str | None = None, name: str = "scenario.yaml") -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text if text is not None else yaml.safe_dump(data, sort_keys=False))
    return path


# --- a small valid scenario, and the ways to break it --------------------------------------------------------------

GPU = {"name": "rob-gpu", "memory_GB": 80.0, "memory_bandwidth_GBps": 2000.0, "memory_efficiency": 0.8,
       "peak_TFLOPS": {"bf16": 500.0, "fp8": 1000.0}, "compute_efficiency": 0.7, "kernel_floor_us": 1.0}
HOST = {"eager_launch_us": 10.0, "launch_jitter_cv": 0.5, "rank_skew_cv": 0.1, "graph_launch_us": 20.0,
        "graph_node_us": 0.5, "step_overhead_us": 150.0, "sync_us": 15.0}
DENSE = {"name": "rob-dense", "num_layers": 2, "num_dense_layers": 2, "hidden_size": 512, "vocab_size": 32000,
         "attention": {"kind": "gqa", "num_heads": 8, "num_kv_heads": 4, "head_dim": 64},
         "dense_intermediate_size": 1024, "weights": {"attention": "bf16", "dense_mlp": "bf16"},
         "kernels": {"attention": 7, "dense_mlp": 4, "moe": 6, "per_pass": 10, "verify_per_pass": 20,
                     "tree_attention": 4},
         "mtp_layers": 1,
         "draft_head": {"num_heads": 8, "num_kv_heads": 4, "head_dim": 64, "intermediate_size": 1024,
                        "draft_vocab_size": 32000}}
MOE = {**copy.deepcopy(DENSE), "name": "rob-moe", "num_dense_layers": 1,
       "moe": {"num_experts": 16, "experts_per_token": 2, "num_shared_experts": 1, "intermediate_size": 256,
               "routing_locality": 0.3}}
WORKLOAD = {"requests": 1, "prompt_tokens": 200, "output_tokens": 64, "max_running_requests": 1}

BASES = {
    "pcie2_chain": {"name": "rob", "topology": topology(pcie_fabric(2, sockets=1), GPU, HOST), "model": DENSE,
                    "parallelism": {"tp": 2}, "workload": WORKLOAD,
                    "runtime": {"cuda_graph_verify": False, "allreduce": "auto"},
                    "speculation": {"method": "eagle3", "draft_tokens": 3, "verify": "chain",
                                    "acceptance": {"kind": "positional", "probs": [0.7, 0.5, 0.3]}},
                    "policy": {"kind": "static"}, "seed": 0},
    "nvswitch4_tree": {"name": "rob-tree", "topology": topology(nvswitch_fabric(4), GPU, HOST), "model": MOE,
                       "parallelism": {"tp": 4}, "workload": WORKLOAD,
                       "runtime": {"cuda_graph_verify": True, "allreduce": "one_shot", "fuse_allreduce_rmsnorm": True},
                       "speculation": {"method": "mtp", "draft_tokens": 6, "verify": "tree",
                                       "tree": {"kind": "topk", "k": 2, "depth": 3},
                                       "acceptance": {"kind": "bursty", "easy": {"probs": [0.9, 0.8]},
                                                      "hard": {"probs": [0.3]}, "mean_easy_tokens": 50,
                                                      "mean_hard_tokens": 50}},
                       "policy": {"kind": "hybrid"}, "seed": 1},
}
WORKLOAD_SIZES = {("workload", "requests"), ("workload", "output_tokens"), ("workload", "max_running_requests")}


def paths(data, prefix=()):
    """Every key path of a nested dict/list (containers included)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield prefix + (key,)
            yield from paths(value, prefix + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield prefix + (i,)
            yield from paths(value, prefix + (i,))


def get(data, path):
    for key in path:
        data = data[key]
    return data


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


NOT_PHYSICAL = {"seed"}  # numbers that may be negative: not quantities
NUMERIC = {name: [p for p in paths(data) if is_number(get(data, p)) and p[-1] not in NOT_PHYSICAL]
           for name, data in BASES.items()}
MAPPINGS = {name: [()] + [p for p in paths(data) if isinstance(get(data, p), dict)] for name, data in BASES.items()}
KINDS = {name: [p for p in paths(data) if p[-1] == "kind" and p[0] != "topology"] for name, data in BASES.items()}

# what a number in a config can never be: not finite, negative (every numeric key here is a physical quantity, a
# count or a probability), or not a number at all (astronomically large ones: test_astronomical_numbers_...)
not_a_quantity = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), -1, -1e-6, -1e300]),
    st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False), st.integers(max_value=-1),
    st.sampled_from(["x", "", "fast", [1, 2], [], {"kind": "nonsense"}, {}]),
)


@st.composite
def mistaken_scenarios(draw):
    """A base scenario with one mistake a user can make and the loader must name: a number that is not a quantity,
    an unknown key in any mapping, an unknown `kind`, or a required top-level section missing."""
    name = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[name])
    op = draw(st.sampled_from(["number", "number", "unknown_key", "kind", "missing"]))
    if op == "number":
        path = draw(st.sampled_from(NUMERIC[name]))
        get(data, path[:-1])[path[-1]] = copy.deepcopy(draw(not_a_quantity))
    elif op == "unknown_key":
        path = draw(st.sampled_from(MAPPINGS[name]))
        get(data, path)["bogus_key"] = 1
    elif op == "kind":
        path = draw(st.sampled_from(KINDS[name]))
        get(data, path[:-1])["kind"] = "nonsense"
    else:
        path = (draw(st.sampled_from(["topology", "model"])),)
        del data[path[0]]
    return data, f"{name}: {op} {'.'.join(map(str, path))}"


@ROBUST
@given(mistaken_scenarios())
def test_mistaken_scenario_files_exit_2_with_one_line(case):
    data, note = case
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, data)
        code, out, err = run_cli(path, "--format", "json")
    assert_contract(code, out, err, expected=2)


# physically plausible ranges (not the loader's limits): any value inside them is a machine someone could own
PLAUSIBLE = {
    "memory_GB": (24.0, 200.0), "memory_bandwidth_GBps": (100.0, 10000.0), "memory_efficiency": (0.3, 1.0),
    "bf16": (10.0, 5000.0), "fp8": (10.0, 10000.0), "compute_efficiency": (0.1, 1.0), "kernel_floor_us": (0.0, 5.0),
    "eager_launch_us": (1.0, 50.0), "launch_jitter_cv": (0.0, 1.0), "rank_skew_cv": (0.0, 0.5),
    "graph_launch_us": (1.0, 100.0), "graph_node_us": (0.0, 3.0), "step_overhead_us": (0.0, 1000.0),
    "sync_us": (0.0, 100.0), "bandwidth_GBps": (1.0, 1000.0), "latency_us": (0.0, 10.0),
    "shm_hop_latency_us": (0.0, 10.0), "routing_locality": (0.0, 0.95), "mean_easy_tokens": (1.0, 500.0),
    "mean_hard_tokens": (1.0, 500.0), "prompt_tokens": (1, 4000), "output_tokens": (1, 128),
}


def plausible_paths(name: str) -> list:
    data = BASES[name]
    found = [p for p in paths(data) if is_number(get(data, p)) and p[-1] in PLAUSIBLE]
    return found + [p for p in paths(data) if "probs" in p[:-1]]  # acceptance probabilities


@st.composite
def plausible_scenarios(draw):
    """A base scenario with up to four inputs moved anywhere inside their plausible range."""
    name = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[name])
    for path in draw(st.lists(st.sampled_from(plausible_paths(name)), min_size=1, max_size=4, unique=True)):
        low, high = PLAUSIBLE.get(path[-1], (0.0, 1.0))
        value = draw(st.integers(low, high) if isinstance(low, int) else st.floats(low, high))
        get(data, path[:-1])[path[-1]] = value
    return data


@ROBUST_VALID
@given(plausible_scenarios())
def test_plausible_scenario_files_run_with_finite_results(data):
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, data)
        code, out, err = run_cli(path, "--format", "json")
    assert_contract(code, out, err, expected=0)


SET_PATHS = sorted({".".join(str(k) if isinstance(k, str) else f"[{k}]" for k in p).replace(".[", "[")
                    for p in NUMERIC["pcie2_chain"]})
SET_MISTAKES = [".nan", ".inf", "-.inf", "-1", "-1e-6", "x", "''", "[]", "{}", "[1, 2]", "{kind: x}"]


@ROBUST
@given(st.sampled_from(SET_PATHS), st.sampled_from(SET_MISTAKES))
def test_set_overrides_that_are_not_quantities_exit_2(key, value):
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, BASES["pcie2_chain"])
        code, out, err = run_cli(path, "--format", "json", "--set", f"{key}={value}")
    line = assert_contract(code, out, err, expected=2)
    assert key.split(".")[-1].split("[")[0] in line, line  # the line names the key


@pytest.mark.parametrize("key", [k for k in SET_PATHS if k != "workload.max_running_requests"])
def test_astronomical_numbers_exit_2_naming_their_key(key):
    """2^64 + 1 is no GPU count, size, rate or time: the line must blame the key that holds it (a workload's sizes
    may be blamed on the workload: 'workload: too much work: ...' or 'workload: request 0 needs ... tokens of KV
    cache')."""
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, BASES["pcie2_chain"])
        code, out, err = run_cli(path, "--format", "json", "--set", f"{key}=18446744073709551617")
    line = assert_contract(code, out, err, expected=2)
    named = key.split(".")[-1].split("[")[0] in line
    assert named or (key.startswith("workload.") and ": workload: " in line), line


def test_concurrency_beyond_requests_is_capped():
    """A batch cap above the number of requests is no mistake: the batch simply never fills."""
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, BASES["pcie2_chain"])
        # 2^63 - 1: the largest integer a file may hold (beyond 64 bits is refused: tests/test_limits.py)
        code, out, err = run_cli(path, "--format", "json", "--set", "workload.max_running_requests=9223372036854775807")
    assert_contract(code, out, err, expected=0)


@pytest.mark.parametrize("key", ["bogus", "workload.bogus", "topology.gpu.bogus", "speculation.acceptance.bogus"])
def test_set_overrides_of_unknown_keys_exit_2(key):
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, BASES["pcie2_chain"])
        code, out, err = run_cli(path, "--format", "json", "--set", f"{key}=1")
    assert_contract(code, out, err, expected=2)


# --- named extremes ------------------------------------------------------------------------------------------------


def with_changes(base: str, changes: dict) -> dict:
    data = copy.deepcopy(BASES[base])
    for dotted, value in changes.items():
        node = data
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(keys[-1])] = value
        else:
            node[keys[-1]] = value
    return data


def sixty_four(kind: str) -> dict:
    fabric = pcie_fabric(64, sockets=2, gpus_per_switch=8, p2p_level="pcie_switch") if kind == "pcie" else \
        nvswitch_fabric(64)
    model = copy.deepcopy(DENSE)
    model["attention"].update(num_heads=64, num_kv_heads=64)
    model["draft_head"].update(num_heads=64, num_kv_heads=64)
    return {**copy.deepcopy(BASES["pcie2_chain"]), "topology": topology(fabric, GPU, HOST), "model": model,
            "parallelism": {"tp": 64}}


def all_links(data: dict, **fields) -> dict:
    for link in data["topology"]["fabric"]["links"]:
        link.update(fields)
    return data


# name: (scenario, the exit it must give). 0: an extreme but physical machine or workload, which must run and give
# finite numbers; 2: outside what the loader accepts (a count of zero, a size or rate past its physical limit, more
# GPUs than the machine has).
EXTREMES = {
    "one GPU, tp 1": ({**copy.deepcopy(BASES["pcie2_chain"]),
                       "topology": topology(pcie_fabric(1, sockets=1), GPU, HOST), "parallelism": {"tp": 1}}, 0),
    "64 GPUs on a PCIe tree": (sixty_four("pcie"), 0),
    "64 GPUs on an NVSwitch": (sixty_four("nvswitch"), 0),
    "1M-token context": (with_changes("pcie2_chain", {"workload.prompt_tokens": 1_000_000}), 0),
    "1M-token context, tree": (with_changes("nvswitch4_tree", {"workload.prompt_tokens": 1_000_000}), 0),
    "links at 1e-6 GB/s": (all_links(copy.deepcopy(BASES["pcie2_chain"]), bandwidth_GBps=1e-6), 2),
    "links at 1e9 GB/s": (all_links(copy.deepcopy(BASES["nvswitch4_tree"]), bandwidth_GBps=1e9), 2),
    "links at 1e-3 GB/s": (all_links(copy.deepcopy(BASES["pcie2_chain"]), bandwidth_GBps=1e-3), 0),
    "links at 1e6 GB/s": (all_links(copy.deepcopy(BASES["nvswitch4_tree"]), bandwidth_GBps=1e6), 0),
    "memory at 1e-6 GB/s": (with_changes("pcie2_chain", {"topology.gpu.memory_bandwidth_GBps": 1e-6}), 2),
    "memory at 1e9 GB/s": (with_changes("pcie2_chain", {"topology.gpu.memory_bandwidth_GBps": 1e9}), 2),
    "memory at 1e6 GB/s": (with_changes("pcie2_chain", {"topology.gpu.memory_bandwidth_GBps": 1e6}), 0),
    "launches of 1e300 us": (with_changes("pcie2_chain", {"topology.host.eager_launch_us": 1e300}), 2),
    "launches of one second": (with_changes("pcie2_chain", {"topology.host.eager_launch_us": 1e6}), 0),
    "no requests": (with_changes("pcie2_chain", {"workload.requests": 0}), 2),
    "no output tokens": (with_changes("pcie2_chain", {"workload.output_tokens": 0}), 2),
    "empty workload mapping (all defaults)": (with_changes("pcie2_chain", {"workload": {}}), 0),
    "one output token": (with_changes("pcie2_chain", {"workload.output_tokens": 1}), 0),
    "concurrency above requests": (with_changes("pcie2_chain", {"workload.max_running_requests": 64}), 0),
    "tp above GPUs": (with_changes("pcie2_chain", {"parallelism.tp": 64}), 2),
    "acceptance 1, 20000 drafts": (with_changes("pcie2_chain", {"speculation.draft_tokens": 20000,
                                                                "speculation.acceptance": {"kind": "iid", "alpha": 1.0}}), 2),
    "acceptance 1, 255 drafts": (with_changes("pcie2_chain", {"speculation.draft_tokens": 255,
                                                              "speculation.acceptance": {"kind": "iid", "alpha": 1.0}}), 0),
    "a billion drafts": (with_changes("pcie2_chain", {"speculation.draft_tokens": 10**9,
                                                      "speculation.acceptance": {"kind": "iid", "alpha": 0.5}}), 2),
    "a hundred million layers": (with_changes("pcie2_chain", {"model.num_layers": 10**8, "model.num_dense_layers": 10**8,
                                                              "topology.gpu.memory_GB": 1e300}), 2),
    "goodput policy without a prior": (with_changes("pcie2_chain", {"policy": {"kind": "goodput",
                                                                               "prior_weight": 0.0}}), 0),
}


def extreme_case(name: str):
    case = EXTREMES[name]
    return pytest.param(name, marks=case.marks) if hasattr(case, "marks") else name


@pytest.mark.parametrize("name", [extreme_case(name) for name in sorted(EXTREMES)])
def test_named_extremes(tmp_path, name):
    case = EXTREMES[name]
    data, expected = case.values[0] if hasattr(case, "values") else case
    code, out, err = run_cli(write_yaml(str(tmp_path), data), "--format", "json")
    assert_contract(code, out, err, expected=expected)


# NaN and infinities written the way YAML spells them, in every float field of the base scenario
FLOAT_PATHS = [p for p in paths(BASES["pcie2_chain"])
               if isinstance(get(BASES["pcie2_chain"], p), float) or p[-1] in ("bandwidth_GBps", "latency_us")]


@pytest.mark.parametrize("spelling", [".nan", ".inf", "-.inf"])
@pytest.mark.parametrize("path", FLOAT_PATHS, ids=lambda p: ".".join(map(str, p)))
def test_nan_and_inf_in_yaml(tmp_path, spelling, path):
    data = copy.deepcopy(BASES["pcie2_chain"])
    get(data, path[:-1])[path[-1]] = "__SPECIAL__"
    text = yaml.safe_dump(data, sort_keys=False).replace("__SPECIAL__", spelling)
    code, out, err = run_cli(write_yaml(str(tmp_path), text=text), "--format", "json")
    assert_contract(code, out, err, expected=2)


@pytest.mark.parametrize("text", ["", "[]", "just a string", "42", "{name: x}", "name: [unclosed", "\x00\x01\x02",
                                  "a: b: c", "name: x\n" * 3, "{topology: 1, model: 2}", "- - - -"])
def test_malformed_files(tmp_path, text):
    path = tmp_path / "scenario.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    assert_contract(*run_cli(str(path), "--format", "json"), expected=2)


@pytest.mark.parametrize("override,expected", [
    ("topology.fabric.links[8].bandwidth_GBps=1e-6", 2), ("topology.fabric.links[8].bandwidth_GBps=1e9", 2),
    ("topology.fabric.links[8].bandwidth_GBps=0.01", 0), ("topology.fabric.links[8].bandwidth_GBps=1e5", 0),
    ("topology.fabric.shm_hop_latency_us=1e9", 2), ("topology.fabric.shm_hop_latency_us=1000", 0),
    ("topology.gpu.memory_bandwidth_GBps=.inf", 2), ("topology.host.sync_us=.inf", 2),
    ("model.moe.routing_locality=.nan", 2), ("model.moe.routing_locality=0.9", 0),
    ("speculation.acceptance.probs=[.nan, 0.5, 0.5]", 2), ("speculation.acceptance.probs=[1, 1, 1]", 0),
    ("parallelism.tp=1", 2),  # 596 GB of weights on one 96 GB GPU
    ("parallelism.tp=2", 2),  # 300 GB per GPU
    ("parallelism.tp=3", 2),  # does not divide 8 GPUs
    ("workload.prompt_tokens=1000000", 2),  # the KV cache of one request exceeds what is left after the weights
    ("workload.prompt_tokens=100000", 0)])
def test_shipped_reference_with_extreme_sets(override, expected):
    """The reference scenario (Kimi-K2.5 on 8 x RTX PRO 6000) through --set."""
    code, out, err = run_cli(scenario_path("pcie8_eagle3.yaml"), "--set", "workload.requests=1", "--set",
                             "workload.output_tokens=64", "--set", override, "--format", "json")
    assert_contract(code, out, err, expected=expected)


# --- a model that does not fit -------------------------------------------------------------------------------------


def one_gpu_reference(tmp_path, **changes) -> str:
    with open(topology_path("pcie8_rtx_pro_6000.yaml")) as handle:
        topo = yaml.safe_load(handle)
    topo["fabric"]["nodes"] = [{"name": "cpu0", "kind": "cpu"}, {"name": "gpu0", "kind": "gpu"}]
    topo["fabric"]["links"] = [{"between": ["gpu0", "cpu0"], "kind": "pcie", "bandwidth_GBps": 48, "latency_us": 0.0}]
    with open(scenario_path("pcie8_eagle3.yaml")) as handle:
        data = yaml.safe_load(handle)
    data.update(topology=topo, model=os.path.join(ROOT, "scenarios", "models", "kimi_k2_5.yaml"),
                parallelism={"tp": 1}, workload={"requests": 1, "prompt_tokens": 100, "output_tokens": 64}, **changes)
    return write_yaml(str(tmp_path), data)


def test_kimi_on_one_96GB_gpu_is_reported_as_not_fitting(tmp_path):
    code, out, err = run_cli(one_gpu_reference(tmp_path), "--format", "json")
    line = assert_contract(code, out, err, expected=2)  # Kimi-K2.5 is about 600 GB of weights
    assert "memory" in line.lower() and "96" in line, line


def test_a_million_token_kv_cache_counts_against_memory(tmp_path):
    """Kimi-K2.5 at tp 8 on 8 x 96 GB: the weights fit (~75 GB per GPU), but a 1M-token context adds ~70 GB of MLA
    latent cache per GPU (576 values x 2 bytes x 61 layers per token, replicated on every rank)."""
    reference = scenario_path("pcie8_eagle3.yaml")
    code, out, err = run_cli(reference, "--set", "workload.requests=1", "--set", "workload.output_tokens=64",
                             "--set", "workload.prompt_tokens=1000000", "--format", "json")
    line = assert_contract(code, out, err, expected=2)
    assert "memory" in str(line).lower() or "kv cache" in str(line).lower(), line


def test_a_missing_dependency_is_one_line_saying_how_to_install(tmp_path):
    """A Python without simpy (a user who skipped the install) gets one line naming the package, not an 'internal
    error'; exit 1 (the installation, not the scenario, is at fault)."""
    blocker = ("import sys, importlib.abc\n"
               "class Block(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'simpy' or name.startswith('simpy.'):\n"
               "            raise ModuleNotFoundError(\"No module named 'simpy'\", name='simpy')\n"
               "sys.meta_path.insert(0, Block())\n"
               "from simulator.__main__ import main\n"
               "sys.exit(main(['scenarios/pcie8_ngram.yaml']))\n")
    proc = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the dependency 'simpy' is not installed" in proc.stderr and "pip install" in proc.stderr
    assert "internal error" not in proc.stderr
