"""The engine's custom all-reduce rule comes from its profile (custom_allreduce, read into runtime.custom_allreduce):
whether it runs instead of NCCL (GPU counts, PCIe GPUs, largest message) and which of one-shot / two-shot its kernel
picks. SGLang 0.4.4.post2's TensorRT-LLM port switches at 512 KiB on 8 GPUs (trt_reduce_internal.cuh
SelectImplementation), vLLM 0.8.4's kernel at 256 KiB (custom_all_reduce.cuh); the times are the model's exactly."""
from __future__ import annotations

import math

import pytest

from simulator.config.engine_profile import load_profile
from simulator.hardware import nccl_tables as T
from simulator.hardware.collective_cost import IMPLEMENTATION_CUSTOM
from simulator.hardware.collectives import AllReduce
from simulator.hardware.interconnect import Fabric
from simulator.kernels import measured
from simulator.kernels.custom_allreduce_fit import FittedMode
from test_collectives import nvswitch_topology

needs_data = pytest.mark.skipif(measured.data_root() is None, reason="aiconfigurator-core not installed")
LINK_GBps, FLOOR_US = 450.0, 1.0  # nvswitch_topology's GPU links; the kernel floor passed below
SGLANG, VLLM = ("sglang", "0.4.4.post2"), ("vllm", "0.8.4")


def rule_of(engine: tuple[str, str]):
    return load_profile(*engine)[0].custom_allreduce.value


def physical_us(algorithm: str, ranks: int, nbytes: int) -> float:
    """The flags-and-reads model on nvswitch_topology: a flag is a round trip at NCCL's NVLink LL step latency (the
    links add none); every rank reads its n - 1 peers at once, so a read flow gets a link's bandwidth / (n - 1)."""
    flag = 2 * T.HW_LATENCY_US["nvlink"]["ring"][0]
    flow = LINK_GBps / (ranks - 1)
    if algorithm == "one_shot":
        return 2 * flag + FLOOR_US + nbytes / (1000.0 * flow)
    return 3 * flag + 2 * FLOOR_US + nbytes / (1000.0 * flow * ranks / 2)


def test_the_profiles_state_the_kernels_switch_as_their_code_has_it():
    """trt_reduce_internal.cuh: one-shot at <= 2 GPUs, below 1 MiB at <= 4, below 512 KiB above; vLLM's
    custom_all_reduce.cuh: below 512 KiB at <= 4, below 256 KiB at <= 8; both gate on inp_size < 8 MiB in multiples
    of 16 B (SGLang 0.5.9: <= 8 MiB); _SUPPORTED_WORLD_SIZES [2, 4, 6, 8]."""
    trt, vllm, new = rule_of(SGLANG), rule_of(VLLM), rule_of(("sglang", "0.5.9"))
    assert [trt.two_shot_bytes(n) for n in (2, 4, 6, 8)] == [0, 1 << 20, 512 << 10, 512 << 10]
    assert [vllm.two_shot_bytes(n) for n in (2, 4, 6, 8)] == [0, 512 << 10, 256 << 10, 256 << 10]
    assert [new.two_shot_bytes(n) for n in (2, 4, 6, 8)] == [0, 512 << 10, 256 << 10, 256 << 10]
    assert (trt.max_bytes, vllm.max_bytes, new.max_bytes) == ((8 << 20) - 16, (8 << 20) - 16, 8 << 20)
    assert trt.gpu_counts == vllm.gpu_counts == [2, 4, 6, 8] and trt.pcie_max_gpus == vllm.pcie_max_gpus == 2


@pytest.mark.parametrize("engine, ranks, nbytes, kernel", [
    (SGLANG, 8, 384 << 10, "one_shot"), (VLLM, 8, 384 << 10, "two_shot"),  # the two switches disagree here
    (SGLANG, 8, (512 << 10) - 16, "one_shot"), (SGLANG, 8, 512 << 10, "two_shot"),
    (VLLM, 8, (256 << 10) - 16, "one_shot"), (VLLM, 8, 256 << 10, "two_shot"),
    (SGLANG, 6, 384 << 10, "one_shot"), (VLLM, 6, 384 << 10, "two_shot"),
    (SGLANG, 4, 768 << 10, "one_shot"), (SGLANG, 4, 1 << 20, "two_shot"), (VLLM, 4, 768 << 10, "two_shot"),
    (SGLANG, 2, 4 << 20, "one_shot"), (VLLM, 2, 4 << 20, "one_shot"),
])
def test_the_physical_custom_allreduce_runs_the_algorithm_the_engines_switch_picks(engine, ranks, nbytes, kernel):
    """No measured table: the engine's all-reduce runs what its profile's switch picks (not the faster of the two),
    ahead of NCCL (the engine tries its kernel first), at the flags-and-reads model's time."""
    ar = AllReduce(Fabric(nvswitch_topology(n=ranks)), ranks, "auto", FLOOR_US, custom_rule=rule_of(engine))
    cost = ar.cost(nbytes)
    assert cost.algorithm == kernel and cost.implementation == IMPLEMENTATION_CUSTOM
    assert cost.time_us == pytest.approx(physical_us(kernel, ranks, nbytes), rel=1e-12)


def test_above_the_largest_message_or_at_an_unsupported_gpu_count_the_engine_runs_nccl():
    """vLLM 0.8.4 runs inp_size < 8 MiB: 8 MiB - 16 B is its kernel's, 8 MiB NCCL's; SGLang 0.5.9 runs 8 MiB itself.
    Three GPUs are not among _SUPPORTED_WORLD_SIZES: NCCL, though forcing one-shot still costs the kernel."""
    fabric = Fabric(nvswitch_topology())
    vllm = AllReduce(fabric, 8, "auto", FLOOR_US, custom_rule=rule_of(VLLM))
    assert vllm.cost((8 << 20) - 16).algorithm == "two_shot"
    assert vllm.cost(8 << 20).algorithm in ("nccl_ring", "nccl_tree", "nvls")
    sglang = AllReduce(fabric, 8, "auto", FLOOR_US, custom_rule=rule_of(("sglang", "0.5.9")))
    assert sglang.cost(8 << 20).algorithm == "two_shot"
    assert sglang.cost((8 << 20) + 16).algorithm in ("nccl_ring", "nccl_tree", "nvls")
    three = Fabric(nvswitch_topology(n=3))
    assert AllReduce(three, 3, "auto", FLOOR_US, custom_rule=rule_of(VLLM)).cost(16384).algorithm.startswith("nccl")
    forced = AllReduce(three, 3, "one_shot", FLOOR_US, custom_rule=rule_of(VLLM)).cost(16384)
    assert forced.time_us == pytest.approx(physical_us("one_shot", 3, 16384), rel=1e-12)


def measured_kernel(two_shot_bytes: int) -> FittedMode:
    """A measured kernel's model (kernels/custom_allreduce_fit.py's form): the one-shot fit 5 us + bytes at 100 GB/s,
    and rows from its two-shot switch on."""
    sizes = (two_shot_bytes or 256 << 10, 512 << 10, 1 << 20)
    return FittedMode(5.0, 100.0, 0.0, "table", two_shot_bytes, sizes, (20.0, 30.0, 40.0))


def test_the_measured_path_runs_the_engines_switch_over_the_tables_kernel():
    """The table's kernel switched at 256 KiB (vLLM's design). SGLang 0.4.4.post2 runs 384 KiB one-shot: the one-shot
    fit carried past the table's switch; vLLM 0.8.4 runs it two-shot: the table's rows, log-log interpolated; at
    512 KiB both run two-shot, the row's time."""
    fabric, model = Fabric(nvswitch_topology()), measured_kernel(256 << 10)
    sglang = AllReduce(fabric, 8, "auto", FLOOR_US, model, custom_rule=rule_of(SGLANG))
    vllm = AllReduce(fabric, 8, "auto", FLOOR_US, model, custom_rule=rule_of(VLLM))
    one, two = sglang.cost(384 << 10), vllm.cost(384 << 10)
    assert (one.algorithm, two.algorithm) == ("one_shot", "two_shot")
    assert one.time_us == pytest.approx(5.0 + (384 << 10) / (1000.0 * 100.0), rel=1e-12)
    assert one.implementation == "table one-shot past the measured kernel's two-shot switch: the one-shot fit"
    w = math.log(1.5) / math.log(2.0)  # 384 KiB between the 256 KiB and 512 KiB rows
    assert two.time_us == pytest.approx(20.0 ** (1 - w) * 30.0 ** w, rel=1e-12)
    assert sglang.cost(512 << 10).time_us == vllm.cost(512 << 10).time_us == pytest.approx(30.0, rel=1e-12)


def test_a_two_shot_the_table_never_measured_is_the_physical_models():
    """A 2-GPU table is one-shot at every size; an engine whose kernel two-shots there (a rule made for the test) is
    timed by the physical two-shot, not by the one-shot rows."""
    from simulator.config.scenario import CustomAllReduce

    rule = CustomAllReduce.model_validate({"kernel": "test", "two_shot_from_bytes": {2: 128 << 10},
                                           "max_bytes": 8 << 20, "pcie_max_gpus": 2, "gpu_counts": [2]})
    ar = AllReduce(Fabric(nvswitch_topology(n=2)), 2, "auto", FLOOR_US, measured_kernel(0), custom_rule=rule)
    cost = ar.cost(512 << 10)
    assert cost.algorithm == "two_shot" and cost.implementation == IMPLEMENTATION_CUSTOM
    assert cost.time_us == pytest.approx(physical_us("two_shot", 2, 512 << 10), rel=1e-12)
    assert ar.cost(64 << 10).time_us == pytest.approx(5.0 + (64 << 10) / (1000.0 * 100.0), rel=1e-12)


def test_a_tables_kernel_takes_the_rule_of_its_release_or_the_nearest_profile_below():
    from simulator.kernels.custom_allreduce_fit import table_rule

    assert table_rule("sglang", "0.5.9") == rule_of(("sglang", "0.5.9"))
    assert table_rule("sglang", "0.5.14") == rule_of(("sglang", "0.5.9"))
    assert table_rule("vllm", "0.24.0") == rule_of(("vllm", "0.8.5"))


@needs_data
def test_a_scenario_runs_its_engines_rule_sglang_0_4_4_post2_one_shot_vllm_0_8_4_two_shot():
    """8 x H200, TP8, a 384 KiB all-reduce (24 tokens x hidden 8192 x bf16): under SGLang 0.4.4.post2 one-shot (the
    fit of SGLang 0.5.9's table below its 256 KiB switch, carried on), under vLLM 0.8.4 two-shot (vLLM 0.14.0's rows);
    --disable-custom-all-reduce: NCCL."""
    import simulator
    from conftest import scenario_path
    from simulator.kernels.custom_allreduce_fit import fit_table
    from simulator.timing.machine import Machine

    path, nbytes = scenario_path("nvlink8_h200_eagle3.yaml"), 384 << 10

    def under(engine, *more):
        scenario = simulator.load_scenario(path, [("engine.name", engine[0]), ("engine.version", engine[1]), *more])
        return scenario, Machine(scenario).allreduce.cost(nbytes)

    scenario, one = under(SGLANG)
    assert scenario.spec.runtime.custom_allreduce == rule_of(SGLANG)
    fit = fit_table("h200_sxm", "sglang", "0.5.9", 8).graph
    assert one.algorithm == "one_shot" and fit.two_shot_bytes == 256 << 10
    assert one.time_us == pytest.approx(fit.latency_us + nbytes / (1000.0 * fit.bandwidth_GBps), rel=1e-12)
    scenario, two = under(VLLM)
    assert scenario.spec.runtime.custom_allreduce == rule_of(VLLM)
    assert two.algorithm == "two_shot" and "the table's rows" in two.implementation
    _, off = under(SGLANG, ("engine.disable_custom_all_reduce", True))
    assert off.algorithm.startswith("nccl") or off.algorithm == "nvls"
