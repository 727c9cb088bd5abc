"""A kernel family the engine runs with a kernel of its own that no measured table holds (profile key
unmeasured_kernels) is timed by the roofline, and the kernel report says so: gpt-fast's attention (Inductor's math
SDPA, generate.py decode_n_tokens) on the A100, where SGLang's table (FlashAttentionBackend) would otherwise answer.
An engine without the key (SGLang, transformers' stand-in) still reads the table; its rows are read with pandas here."""
from __future__ import annotations

import pytest

from conftest import scenario_path
from simulator.config import load_scenario
from simulator.kernels import measured
from simulator.kernels.timer import KernelTimer
from simulator.hardware.gpu import GPU
from simulator.model.cost import PassShape
from simulator.timing.machine import Machine

if measured.data_root() is None:
    pytest.skip("aiconfigurator-core is not installed (the measured extra)", allow_module_level=True)

LLAMA7B = scenario_path("validation/cases/a100_llama2_decode.yaml")
AS_VALIDATED = [("topology.gpu.read_bandwidth_GBps", 1700)]  # scenarios/validation/gpt_fast.yaml's 7B bf16 case
SPECBENCH = scenario_path("validation/cases/a100_vicuna7b_specbench.yaml")


def _attention(machine: Machine, kv_len: int = 255):
    """The decode pass's attention kernel (Llama-2-7B: 32 heads over 32, head size 128) and every kernel of it."""
    kernels = [k for s in machine.layout("target", PassShape(1, 1, kv_len)).segments for k in s.kernels]
    (attention,) = {k.shape for k in kernels if k.shape is not None and k.shape.family == "attention"}
    return next(k for k in kernels if k.shape == attention), kernels


def _table_us(**columns) -> float:
    """The one row's latency (us) of SGLang's A100 decode table (0.5.10, FlashAttentionBackend), bf16 KV, head 128."""
    frame = measured.read_table("a100_sxm", "attention", "generation_attention_perf", "sglang")
    rows = frame[(frame.kernel_source == "flash_attention") & (frame.head_dim == 128)
                 & (frame.kv_cache_dtype == "bfloat16")]
    for column, value in columns.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1
    return 1e3 * float(rows.latency.iloc[0])


def test_gpt_fast_times_its_attention_by_the_roofline_not_the_table():
    gpt_fast = Machine(load_scenario(LLAMA7B, AS_VALIDATED))
    assert set(gpt_fast.runtime.unmeasured_kernels) == {"attention"}
    kernel, kernels = _attention(gpt_fast)
    t, _ = gpt_fast.kernels.kernel_us(kernel)
    assert gpt_fast.gpu.spec.roofline is None  # the A100's: the data-sheet roofline, its bytes at the rated rate
    assert t == gpt_fast.gpu.kernel_us(kernel.flops, kernel.bytes, kernel.dtype)[0]
    # the same case with the tables' kernel standing for gpt-fast's: the FlashAttention time, several times more
    table = Machine(load_scenario(LLAMA7B, AS_VALIDATED + [("runtime.unmeasured_kernels", {})]))
    assert table.kernels.kernel_us(kernel)[0] > 2 * t
    report = gpt_fast.kernels.report(kernels)
    assert report["source"].startswith("measured")
    assert report["families"]["attention"].startswith("roofline (the engine's own kernel, not the tables'")
    assert "Inductor" in report["families"]["attention"] and report["families"]["gemm"].startswith("measured")


def test_an_sglang_a100_decode_still_reads_the_flash_attention_table():
    sglang = Machine(load_scenario(LLAMA7B, [("engine.name", "sglang"), ("engine.version", "0.5.9")]))
    assert sglang.runtime.unmeasured_kernels == {}
    kernel, kernels = _attention(sglang)
    expected = _table_us(batch_size=1, num_heads=32, num_key_value_heads=32, step=255)  # 256 keys: step + 1
    assert sglang.kernels.kernel_us(kernel)[0] == pytest.approx(expected)
    assert sglang.kernels.report(kernels)["families"]["attention"] == "measured"


def test_a_timer_without_unmeasured_families_reads_the_table_and_one_with_attention_does_not():
    gpu = GPU(load_scenario(LLAMA7B).topology.gpu)
    kernel, _ = _attention(Machine(load_scenario(LLAMA7B)))
    assert KernelTimer(gpu, "measured").kernel_us(kernel)[0] == pytest.approx(
        _table_us(batch_size=1, num_heads=32, num_key_value_heads=32, step=255))
    own = KernelTimer(gpu, "measured", unmeasured={"attention": "its own"})
    assert own.kernel_us(kernel)[0] == gpu.kernel_us(kernel.flops, kernel.bytes, kernel.dtype)[0]


def test_transformers_keeps_the_table_as_its_attentions_stand_in():
    assert load_scenario(SPECBENCH).spec.runtime.unmeasured_kernels == {}
