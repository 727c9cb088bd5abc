"""A verify's attention from the measured tables: q query tokens a request read the request's KV cache once per tile
of packed query rows, never less than decode reads it (simulator/kernels/measured.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.kernels import measured
from simulator.kernels.shapes import Attention, MLAttention

needs_data = pytest.mark.skipif(measured.data_root() is None, reason="aiconfigurator-core not installed")


def _fa3_rows(system: str = "h100_sxm"):
    """SGLang's FA3 decode rows (head_dim 128, bf16 cache, no window), each point's repeats averaged, read directly."""
    import pyarrow.parquet as pq
    path = measured.table_path(system, "attention", "generation_attention_perf")
    t = pq.read_table(path).to_pandas()
    t = t[(t.window_size == 0) & (t.kernel_source == "fa3") & (t.head_dim == 128) & (t.kv_cache_dtype == "bfloat16")]
    return t.groupby(["batch_size", "num_heads", "num_key_value_heads", "step"]).latency.mean()


@needs_data
def test_a_verify_of_3_tokens_over_one_kv_head_is_read_from_its_own_kv_head_count():
    """Llama-3.1-70B at TP8 (8 heads over 1 KV head), a chain of 2: 24 query rows, between the 16 and 32 heads the
    table measured over 1 KV head (24 heads were measured only over 8: a hole, once a roofline fallback)."""
    rows = _fa3_rows()
    expected = (rows[(1, 16, 1, 255)] + rows[(1, 32, 1, 255)]) / 2 * 1e3  # ms -> us; kv axis = step + 1 = 256
    got = measured.MeasuredKernels("h100_sxm").time_us(Attention(1, 3, 253, 8, 1, 128, "bf16"))
    assert got == pytest.approx(expected, rel=1e-9)


@needs_data
def test_a_verify_wider_than_one_tile_reads_the_cache_once_per_tile():
    """8 heads over 1 KV head, 32 tokens: 256 query rows, two 128-row tiles, each reading the 1,024-token cache: the
    table's decode of 2 requests with 128 heads over 1 KV head."""
    rows = _fa3_rows()
    got = measured.MeasuredKernels("h100_sxm").time_us(Attention(1, 32, 992, 8, 1, 128, "bf16"))
    assert got == pytest.approx(rows[(2, 128, 1, 1023)] * 1e3, rel=1e-9)


@needs_data
@pytest.mark.parametrize("batch, cached", [(32, 1200), (8, 1200), (64, 1000)])
@pytest.mark.parametrize("q", [5, 8, 17])
def test_a_verify_costs_at_least_the_decode_of_its_cache(batch, cached, q):
    """Llama-3.1-8B at TP1 (32 heads over 8): past 4 tokens q x 32 leaves the table's 128 heads. The verify still
    reads the whole cache (once: 5-17 tokens x 4 heads a KV head fit one 128-row tile), so it costs about a decode
    of it; the prefill difference ctx(L + q) - ctx(L) alone priced it at a fifth of that (14 against 66 us)."""
    kernels = measured.MeasuredKernels("h100_sxm")
    decode = kernels.time_us(Attention(batch, 1, cached, 32, 8, 128, "bf16"))
    verify = kernels.time_us(Attention(batch, q, cached, 32, 8, 128, "bf16"))
    assert 0.95 * decode <= verify < 1.5 * decode


@needs_data
@pytest.mark.parametrize("q", [2, 4])
def test_an_mla_verify_of_128_heads_costs_at_least_its_decode(q):
    """DeepSeek-V3 under DP-attention (128 heads a rank): q x 128 query rows over the latent cache, read once per
    128 rows, more than one decode's read."""
    kernels = measured.MeasuredKernels("h200_sxm")
    for batch in (1, 8, 32):
        decode = kernels.time_us(MLAttention(batch, 1, 2000, 128, "bf16"))
        assert kernels.time_us(MLAttention(batch, q, 2000, 128, "bf16")) >= decode


@needs_data
@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm"])
def test_requests_of_k_kv_heads_cost_what_k_times_the_requests_of_one_do(system):
    """_tiled's assumption, checked on the table: decode of b requests with h heads over K KV heads against b x K
    requests with h / K heads over 1, wherever both were measured (median within 5%, most within 30%)."""
    rows = _fa3_rows(system)
    one = {(b, h, s): v for (b, h, k, s), v in rows.items() if k == 1}
    ratios = np.array([one[(b * k, h // k, s)] / v for (b, h, k, s), v in rows.items()
                       if k > 1 and h % k == 0 and (b * k, h // k, s) in one])
    assert len(ratios) > 1000
    assert abs(math.log(np.median(ratios))) < math.log(1.05)
    assert np.mean(np.abs(np.log(ratios)) < math.log(1.3)) > 0.9
