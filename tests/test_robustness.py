"""Broken and extreme configurations through the CLI, in process: exit 2 with one line, or a valid finite result.

The contract (README, issue 5): a configuration mistake prints exactly one line on stderr (no traceback) and exits
with status 2; anything else runs and prints finite numbers. Never exit 1 (an internal error), never a hang, never a
NaN or an infinity in the JSON. Each example runs under a wall-clock guard (EXAMPLE_TIMEOUT_S) and an address-space
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
ROBUST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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


def assert_contract(code: int, out: str, err: str) -> dict | str:
    """Exit 2 with exactly one stderr line and no traceback, or exit 0 with finite JSON; returns the line or data."""
    assert code in (0, 2), f"exit {code}: {err.strip()[-500:]}"
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
WORKLOAD = {"requests": 1, "prompt_tokens": 200, "output_tokens": 64, "concurrency": 1}

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
WORKLOAD_SIZES = {("workload", "requests"), ("workload", "output_tokens"), ("workload", "concurrency")}


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


extreme_numbers = st.sampled_from([0, -1, 1, 1e-300, 1e-6, 1e9, 1e300, 2**63, 10**30, -1e300,
                                   float("nan"), float("inf"), float("-inf")])
junk = st.one_of(
    extreme_numbers,
    st.none(), st.booleans(), st.text(max_size=6), st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(-3, 3), max_size=3), st.just({}), st.just({"kind": "nonsense"}), st.just([]),
)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@st.composite
def broken_scenarios(draw):
    """A base scenario with 1-2 mutations: a number set to an extreme or scaled, a value replaced by junk of another
    type, a key deleted, an unknown key added. Numbers are the favoured target: an absurd number passes a type check
    and reaches the engine, where NaN and infinity can leak into the results."""
    name = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[name])
    notes = [name]
    for _ in range(draw(st.integers(1, 2))):
        all_paths = list(paths(data))
        numeric = [p for p in all_paths if is_number(get(data, p))]
        op = draw(st.sampled_from(["extreme", "extreme", "scale", "replace", "delete", "unknown_key"]))
        if op in ("extreme", "scale") and numeric:
            path = draw(st.sampled_from(numeric))
        else:
            op = op if op in ("replace", "delete", "unknown_key") else "replace"
            path = draw(st.sampled_from(all_paths))
        parent, key = get(data, path[:-1]), path[-1]
        value = parent[key]
        if op == "extreme":
            parent[key] = draw(extreme_numbers)
        elif op == "scale":
            scaled = value * draw(st.sampled_from([0, -1, 1e-300, 1e-6, 1e-3, 10, 1e3, 1e6, 1e9, 1e300]))
            exact = isinstance(value, int) and math.isfinite(scaled) and abs(scaled) < 2**70
            parent[key] = int(scaled) if exact else scaled
        elif op == "delete" and isinstance(parent, dict):
            del parent[key]
        elif op == "unknown_key" and isinstance(value, dict):
            value["bogus_key"] = copy.deepcopy(draw(junk))
        else:
            op = "replace"
            parent[key] = copy.deepcopy(draw(junk))  # a fresh object: st.just returns the same dict every time
        if path in WORKLOAD_SIZES and is_number(parent.get(key)) and not math.isnan(parent[key]) and parent[key] > 512:
            parent[key] = 512  # a huge workload is a long run, not a broken one
        notes.append(f"{op} {'.'.join(map(str, path))}")
    return data, notes


@ROBUST
@given(broken_scenarios())
def test_broken_scenario_files_exit_2_with_one_line_or_give_finite_results(case):
    data, notes = case
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, data)
        code, out, err = run_cli(path, "--format", "json")
    assert_contract(code, out, err)


SET_PATHS = sorted({".".join(str(k) if isinstance(k, str) else f"[{k}]" for k in p).replace(".[", "[")
                    for p in paths(BASES["pcie2_chain"]) if p not in WORKLOAD_SIZES})
SET_VALUES = [".nan", ".inf", "-.inf", "1e-6", "1e9", "1e300", "1e-300", "0", "-1", "[]", "{}", "null", "x", "true",
              "[1, 2]", "{kind: x}", "2", "0.5", "''", "18446744073709551617"]


@ROBUST
@given(st.lists(st.tuples(st.sampled_from(SET_PATHS), st.sampled_from(SET_VALUES)), min_size=1, max_size=3))
def test_set_overrides_with_absurd_values(overrides):
    with tempfile.TemporaryDirectory() as directory:
        path = write_yaml(directory, BASES["pcie2_chain"])
        argv = [path, "--format", "json"]
        for key, value in overrides:
            argv += ["--set", f"{key}={value}"]
        code, out, err = run_cli(*argv)
    assert_contract(code, out, err)


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


EXTREMES = {
    "one GPU, tp 1": {**copy.deepcopy(BASES["pcie2_chain"]),
                      "topology": topology(pcie_fabric(1, sockets=1), GPU, HOST), "parallelism": {"tp": 1}},
    "64 GPUs on a PCIe tree": sixty_four("pcie"),
    "64 GPUs on an NVSwitch": sixty_four("nvswitch"),
    "1M-token context": with_changes("pcie2_chain", {"workload.prompt_tokens": 1_000_000}),
    "1M-token context, tree": with_changes("nvswitch4_tree", {"workload.prompt_tokens": 1_000_000}),
    "links at 1e-6 GB/s": all_links(copy.deepcopy(BASES["pcie2_chain"]), bandwidth_GBps=1e-6),
    "links at 1e9 GB/s": all_links(copy.deepcopy(BASES["nvswitch4_tree"]), bandwidth_GBps=1e9),
    "memory at 1e-6 GB/s": with_changes("pcie2_chain", {"topology.gpu.memory_bandwidth_GBps": 1e-6}),
    "memory at 1e9 GB/s": with_changes("pcie2_chain", {"topology.gpu.memory_bandwidth_GBps": 1e9}),
    "launches of 1e300 us": with_changes("pcie2_chain", {"topology.host.eager_launch_us": 1e300}),
    "no requests": with_changes("pcie2_chain", {"workload.requests": 0}),
    "no output tokens": with_changes("pcie2_chain", {"workload.output_tokens": 0}),
    "empty workload mapping": with_changes("pcie2_chain", {"workload": {}}),
    "one output token": with_changes("pcie2_chain", {"workload.output_tokens": 1}),
    "concurrency above requests": with_changes("pcie2_chain", {"workload.concurrency": 64}),
    "tp above GPUs": with_changes("pcie2_chain", {"parallelism.tp": 64}),
    "acceptance 1, 20000 drafts": with_changes("pcie2_chain", {"speculation.draft_tokens": 20000,
                                                               "speculation.acceptance": {"kind": "iid", "alpha": 1.0}}),
    "a billion drafts": with_changes("pcie2_chain", {"speculation.draft_tokens": 10**9,
                                                     "speculation.acceptance": {"kind": "iid", "alpha": 0.5}}),
    "a hundred million layers": with_changes("pcie2_chain", {"model.num_layers": 10**8, "model.num_dense_layers": 10**8,
                                                             "topology.gpu.memory_GB": 1e300}),
}


@pytest.mark.parametrize("name", sorted(EXTREMES))
def test_named_extremes(tmp_path, name):
    code, out, err = run_cli(write_yaml(str(tmp_path), EXTREMES[name]), "--format", "json")
    assert_contract(code, out, err)


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
    assert_contract(code, out, err)


@pytest.mark.parametrize("text", ["", "[]", "just a string", "42", "{name: x}", "name: [unclosed", "\x00\x01\x02",
                                  "a: b: c", "name: x\n" * 3, "{topology: 1, model: 2}", "- - - -"])
def test_malformed_files(tmp_path, text):
    path = tmp_path / "scenario.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    assert_contract(*run_cli(str(path), "--format", "json"))


@pytest.mark.parametrize("override", [
    "topology.fabric.links[8].bandwidth_GBps=1e-6", "topology.fabric.links[8].bandwidth_GBps=1e9",
    "topology.fabric.shm_hop_latency_us=1e9", "topology.gpu.memory_bandwidth_GBps=.inf", "topology.host.sync_us=.inf",
    "model.moe.routing_locality=.nan", "speculation.acceptance.probs=[.nan, 0.5, 0.5]", "parallelism.tp=1",
    "workload.prompt_tokens=1000000"])
def test_shipped_reference_with_extreme_sets(override):
    """The reference scenario (Kimi-K2.5 on 8 x RTX PRO 6000) through --set."""
    code, out, err = run_cli(scenario_path("pcie8_eagle3.yaml"), "--set", "workload.requests=1", "--set",
                             "workload.output_tokens=64", "--set", override, "--format", "json")
    assert_contract(code, out, err)


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
    line = assert_contract(code, out, err)
    assert code == 2, "Kimi-K2.5 (about 600 GB of weights) ran on one 96 GB GPU"
    assert "memory" in line.lower() and "96" in line, line


def test_a_million_token_kv_cache_counts_against_memory(tmp_path):
    """Kimi-K2.5 at tp 8 on 8 x 96 GB: the weights fit (~75 GB per GPU), but a 1M-token context adds ~70 GB of MLA
    latent cache per GPU (576 values x 2 bytes x 61 layers per token, replicated on every rank)."""
    reference = scenario_path("pcie8_eagle3.yaml")
    code, out, err = run_cli(reference, "--set", "workload.requests=1", "--set", "workload.output_tokens=64",
                             "--set", "workload.prompt_tokens=1000000", "--format", "json")
    line = assert_contract(code, out, err)
    assert code == 2 and "memory" in str(line).lower(), "a 1M-token context of Kimi-K2.5 fitted in 96 GB GPUs"
