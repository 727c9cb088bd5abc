"""The kernels SGLang launches per block when it runs a pass eagerly, derived from the architecture.

Each block is a list of named ops, counted from SGLang's model code (models/llama.py, qwen3.py, qwen3_moe.py,
mixtral.py, deepseek_v2.py, gpt_oss.py; the counts of the shipped hand-written cards, docs/sources.md); a feature of
the architecture adds or removes ops: Qwen3's per-head q/k RMSNorms, MLA's q LoRA, shared experts, and the
activation quantisation before every fp8 / fp4 (W8A8, W4A4) GEMM. Host-side counts of the engine that do not depend
on the model (per pass, per verify, the tree mask) are the shipped cards' figures.
"""
from __future__ import annotations

QUANTISED_ACTIVATIONS = ("fp8", "fp4")  # GEMMs whose activations are quantised on the fly: one kernel before each

GQA_OPS = ["input_norm", "qkv_proj", "rotary", "kv_write_k", "kv_write_v", "attention", "o_proj"]
QK_NORM_OPS = ["q_norm", "k_norm"]  # Qwen3 / Qwen3-MoE: RMSNorm per head of q and of k before the rotary
MLA_OPS_Q_LORA = ["input_norm", "qkv_a_proj", "q_a_norm", "kv_a_norm", "q_b_proj"]
MLA_OPS_NO_Q_LORA = ["input_norm", "q_proj", "kv_a_proj", "kv_a_norm"]
MLA_OPS_TAIL = ["w_kc_bmm", "cat_q", "cat_k", "rope", "kv_write", "decode_attention", "decode_reduce", "w_vc_bmm",
                "o_proj", "copy"]
MLA_BMMS = ["w_kc_bmm", "w_vc_bmm"]  # fp8 weights: a per-tensor quant of the bmm input each
DENSE_OPS = ["post_norm", "gate_up_proj", "act_and_mul", "down_proj"]
# fused_moe: router GEMM and top-k, 4 align/sort ops, the two grouped expert GEMMs with their activation, the top-k sum
MOE_ROUTED = ["post_norm", "router", "topk", "align_0", "align_1", "align_2", "align_3", "w13", "act", "w2", "topk_sum"]
MOE_FUSED = ["align_0", "align_1", "align_2", "align_3", "act", "topk_sum"]  # inside the fused_moe call
MOE_SHARED = ["shared_gate_up", "shared_act", "shared_down", "add_shared"]

# model-independent counts of SGLang's pass and speculative step, as the shipped cards have them (docs/sources.md)
PER_PASS = 10         # embedding, final norm, lm_head, logits processing, argmax/sampling, forward metadata
VERIFY_PER_PASS = 20  # organize drafts, build tree/positions, verify metadata, greedy tree walk (eagle_utils.py)
TREE_ATTENTION = 14   # the Kimi-K2.5 card's figure calibrated to the reference's 40-50 ms n-gram tree verify


def attention_ops(kind: str, qk_norm: bool, q_lora: bool, dtype: str) -> list[str]:
    quant = dtype in QUANTISED_ACTIVATIONS
    if kind == "gqa":
        ops = GQA_OPS[:3] + (QK_NORM_OPS if qk_norm else []) + GQA_OPS[3:]
        gemms = ["qkv_proj", "o_proj"]
    else:
        ops = (MLA_OPS_Q_LORA if q_lora else MLA_OPS_NO_Q_LORA) + MLA_OPS_TAIL
        gemms = ["qkv_a_proj", "q_b_proj", "o_proj"] if q_lora else ["q_proj", "kv_a_proj", "o_proj"]
        if quant:
            ops += [f"quant_{b}" for b in MLA_BMMS]
    return ops + ([f"act_quant_{g}" for g in gemms] if quant else [])


def dense_ops(dtype: str) -> list[str]:
    return DENSE_OPS + (["act_quant_gate_up", "act_quant_down"] if dtype in QUANTISED_ACTIVATIONS else [])


def moe_ops(shared: bool, experts_dtype: str, shared_dtype: str) -> tuple[list[str], list[str]]:
    """(every MoE launch, those inside the fused_moe call)."""
    ops, fused = list(MOE_ROUTED), list(MOE_FUSED)
    if experts_dtype in QUANTISED_ACTIVATIONS:
        ops += ["act_quant_w13", "act_quant_w2"]
        fused += ["act_quant_w13", "act_quant_w2"]
    if shared:
        ops += MOE_SHARED + (["act_quant_shared_gate_up", "act_quant_shared_down"]
                             if shared_dtype in QUANTISED_ACTIVATIONS else [])
    return ops, fused


def kernels(card: dict, qk_norm: bool) -> tuple[dict, dict]:
    """(the card's kernels mapping, a note per key naming the ops counted)."""
    att, w = card["attention"], card["weights"]
    a_ops = attention_ops(att["kind"], qk_norm, bool(att.get("q_lora_rank")), w["attention"])
    d_ops = dense_ops(w["dense_mlp"])
    out = {"attention": len(a_ops), "dense_mlp": len(d_ops), "moe": 0, "per_pass": PER_PASS,
           "verify_per_pass": VERIFY_PER_PASS, "tree_attention": TREE_ATTENTION}
    notes = {"kernels.attention": " ".join(a_ops), "kernels.dense_mlp": " ".join(d_ops),
             "kernels.per_pass": "SGLang, model-independent (the shipped cards' count)",
             "kernels.verify_per_pass": "SGLang eagle_utils.py, model-independent (the shipped cards' count)",
             "kernels.tree_attention": "calibrated on the reference machine (the Kimi-K2.5 card's), taken over"}
    if att["kind"] == "mla":
        out["attention_fused"] = 1
        notes["kernels.attention_fused"] = "decode_reduce: inside a measured MLA decode time"
    if card.get("moe"):
        m_ops, fused = moe_ops(card["moe"]["num_shared_experts"] > 0, w["experts"], w.get("shared_experts", "bf16"))
        out["moe"], out["moe_fused"] = len(m_ops), len(fused)
        notes["kernels.moe"] = " ".join(m_ops)
        notes["kernels.moe_fused"] = "inside fused_moe: " + " ".join(fused)
    else:
        notes["kernels.moe"] = "no MoE layers"
    return out, notes
