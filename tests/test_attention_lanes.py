"""Which measured attention kernel a lookup reads (kernels/tables.py LANES, measured_attention.gqa_attention): the
engine's lanes name every kernel_source label the package's attention tables hold but the two left out on purpose,
the A100's SGLang tables (FlashAttentionBackend, `flash_attention`) answer, and decode and prefill each take the
engine's first lane that holds them. Expected times are the Parquet rows themselves, read with pandas here."""
from __future__ import annotations

import pytest

from simulator.cache import Store, held
from simulator.kernels import measured, measured_attention
from simulator.kernels.shapes import Attention

if measured.data_root() is None:
    pytest.skip("aiconfigurator-core is not installed (the measured extra)", allow_module_level=True)
import pyarrow.parquet as pq  # noqa: E402 (the measured extra's)

# read by no lane, and why: tables.py LANES
UNLISTED = {("sglang", "trtllm_mha"),  # SGLang 0.5.14's Blackwell default: its place in the order depends on the GPU
            ("vllm", "vllm_flash_attn_fa4")}  # not in vLLM 0.8's FLASH_ATTN


def _row_us(system: str, table: str, engine: str, source: str, **columns) -> float:
    """The one row's latency (us) of the engine's table at these column values (window_size 0, bf16 KV)."""
    frame = measured.read_table(system, "attention", table, engine)
    rows = frame[(frame.kernel_source == source) & (frame.head_dim == 128) & (frame.kv_cache_dtype == "bfloat16")]
    for column, value in columns.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1
    return 1e3 * float(rows.latency.iloc[0])


def test_every_attention_label_the_package_ships_is_in_its_engines_lane():
    labels = set()
    for path in measured.data_root().glob("*/attention/*/*/*_attention_perf.parquet"):
        engine = path.parts[-3]
        if engine in measured.LANES:
            labels |= {(engine, label) for label in set(pq.read_table(path, columns=["kernel_source"])
                                                        .column("kernel_source").to_pylist())}
    listed = {(engine, label) for engine, lanes in measured.LANES.items() for label in lanes.get("attention", ())}
    assert labels - listed == UNLISTED
    assert ("sglang", "flash_attention") in labels and ("vllm", "vllm_flash_attn_fa2") in labels


def test_the_a100s_sglang_tables_time_decode_and_prefill():
    """SGLang and transformers (a stand-in) read SGLang 0.5.14's tables, on the A100 its 0.5.10 folder, which
    measured only FlashAttentionBackend (`flash_attention`): before it was in SGLang's lane the roofline timed A100
    attention."""
    a100 = measured.MeasuredKernels("a100_sxm")
    decode = _row_us("a100_sxm", "generation_attention_perf", "sglang", "flash_attention", batch_size=1,
                     num_heads=32, num_key_value_heads=32, step=255)  # 256 keys: step + 1
    assert a100.answer(Attention(1, 1, 255, 32, 32, 128, "bf16")) == (pytest.approx(decode), "sglang 0.5.10")
    prefill = _row_us("a100_sxm", "context_attention_perf", "sglang", "flash_attention", batch_size=1, isl=1024,
                      num_heads=32, num_key_value_heads=32)
    assert a100.answer(Attention(1, 1024, 0, 32, 32, 128, "bf16")) == (pytest.approx(prefill), "sglang 0.5.10")
    assert a100.filled_from(Attention(1, 1024, 0, 32, 32, 128, "bf16")) is None


def test_a_lane_without_a_prefill_table_takes_the_engines_next_lane_for_prefill(monkeypatch):
    """vLLM 0.24.0's B200 tables hold FlashInfer's TensorRT-LLM decode kernel (trtllmdecode) without head-128 prefill
    rows, and its prefill kernel (trtllmprefill) without decode rows: with the decode lane first, prefill still comes
    from vLLM's own next lane, not from SGLang's tables."""
    lanes = {**measured.LANES, "vllm": {**measured.LANES["vllm"], "attention": (
        "vllm_flashinfer_trtllmdecode", "vllm_flashinfer_trtllmprefill")}}
    monkeypatch.setattr(measured_attention, "LANES", lanes)  # where attention reads its lanes
    with held(Store()):
        b200 = measured.MeasuredKernels("b200_sxm", "vllm", "0.24.0")
        decode = _row_us("b200_sxm", "generation_attention_perf", "vllm", "vllm_flashinfer_trtllmdecode",
                         batch_size=1, num_heads=32, num_key_value_heads=8, step=255)
        assert b200.answer(Attention(1, 1, 255, 32, 8, 128, "bf16")) == (pytest.approx(decode), "vllm 0.24.0")
        prefill = _row_us("b200_sxm", "context_attention_perf", "vllm", "vllm_flashinfer_trtllmprefill",
                          batch_size=1, isl=1024, num_heads=32, num_key_value_heads=8)
        shape = Attention(1, 1024, 0, 32, 8, 128, "bf16")
        assert b200.answer(shape) == (pytest.approx(prefill), "vllm 0.24.0")
        assert b200.filled_from(shape) is None
