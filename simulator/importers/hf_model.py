"""A model card from a Hugging Face config.json: the shape, the stored dtypes and the eager kernel counts.

Families mapped (by `model_type`): Llama, Mistral, Qwen2, Qwen3 (dense GQA); Mixtral, Qwen3-MoE, gpt-oss (GQA + MoE);
DeepSeek-V2/V3 and Kimi-K2 (MLA + MoE, MTP modules); a multimodal wrapper's `text_config` (Kimi-K2.5) is read as
its language model. Every card field comes from a named config.json field or from a rule stated beside it; a field
the card cannot hold is one line naming it. Assumptions the card cannot take from config.json (MoE routing
locality, SGLang's shared-expert stream) are those of the shipped DeepSeek-V3 / Kimi-K2.5 cards, said so in the card.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ..config.base import validate
from ..config.errors import ConfigError
from ..config.model_card import ModelCard
from .hf_kernels import kernels
from .hf_quant import weight_dtypes

DENSE_GQA = ("llama", "mistral", "qwen2", "qwen3")
MOE_GQA = ("mixtral", "qwen3_moe", "gpt_oss")
MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2")
QK_NORM = ("qwen3", "qwen3_moe")
# Cohere, "Why MoE models get more from speculative decoding" (2026): adjacent tokens share ~0.4 of their experts,
# measured on Command MoE models; the shipped DeepSeek-V3 and Kimi-K2.5 cards assume it too (docs/sources.md)
ROUTING_LOCALITY = 0.4
MAX_CONFIG_BYTES = 10_000_000


def read_json(path: str, referrer: str | None = None, key: str = "model") -> dict:
    if not os.path.isfile(path):
        raise ConfigError(referrer or path, key, f"file not found: {path}", "a Hugging Face config.json")
    if os.path.getsize(path) > MAX_CONFIG_BYTES:
        raise ConfigError(path, "<file>", "larger than a config.json is", f"at most {MAX_CONFIG_BYTES:,} bytes")
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"line {exc.lineno}, column {exc.colno}", f"JSON syntax error: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "<file>", f"cannot read file: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "<root>", "expected a JSON object (a config.json)")
    return data


def card_from_file(path: str, name: str | None = None, referrer: str | None = None) -> tuple[dict, dict]:
    """(card mapping, a note per dotted key) of a config.json, reading hf_quant_config.json beside it if present."""
    config = read_json(path, referrer)
    beside = os.path.join(os.path.dirname(os.path.abspath(path)), "hf_quant_config.json")
    quant = read_json(beside) if os.path.isfile(beside) else None
    if name is None and config.get("_name_or_path"):
        name = os.path.basename(str(config["_name_or_path"]).rstrip("/")) or None
    if name is None:
        folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
        name = folder if os.path.basename(path) == "config.json" and folder else os.path.splitext(os.path.basename(path))[0]
    return card_from_config(config, name, path, quant)


def load_card(path: str, referrer: str | None = None) -> dict:
    """The card mapping a scenario's `model: .../config.json` stands for."""
    return card_from_file(path, referrer=referrer)[0]


def _get(config: dict, key: str, file: str, default: Any = None, required: bool = True) -> Any:
    value = config.get(key, default)
    if value is None and required:
        raise ConfigError(file, key, "missing: the card needs it")
    if required and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(file, key, f"expected an integer, got {value!r}")
    return value


def card_from_config(config: dict, name: str, file: str = "config.json", quant: dict | None = None
                     ) -> tuple[dict, dict]:
    architecture = (config.get("architectures") or [None])[0]  # the class an engine's registry builds (top level)
    if isinstance(config.get("text_config"), dict) and "num_hidden_layers" not in config:
        config = {**config["text_config"], **({"quantization_config": config["quantization_config"]}
                                              if "quantization_config" in config else {})}
        file = f"{file} (text_config)"
    model_type = config.get("model_type")
    if model_type not in DENSE_GQA + MOE_GQA + MLA:
        raise ConfigError(file, "model_type", f"{model_type!r} is not a mapped architecture",
                          ", ".join(DENSE_GQA + MOE_GQA + MLA))
    g = lambda key, **kw: _get(config, key, file, **kw)  # noqa: E731
    layers, hidden = g("num_hidden_layers"), g("hidden_size")
    heads = g("num_attention_heads")
    notes: dict[str, str] = {"name": f"model_type {model_type} ({', '.join(config.get('architectures') or [])})",
                             "num_layers": "num_hidden_layers", "hidden_size": "hidden_size",
                             "vocab_size": "vocab_size", "dense_intermediate_size": "intermediate_size"}
    card: dict[str, Any] = {"name": name, "num_layers": layers, "num_dense_layers": layers, "hidden_size": hidden,
                            "vocab_size": g("vocab_size")}
    if architecture:
        card["architecture"] = architecture
        notes["architecture"] = "architectures[0]"
    if model_type in MLA:
        card["attention"] = {"kind": "mla", "num_heads": heads, "q_lora_rank": g("q_lora_rank", required=False) or 0,
                             "kv_lora_rank": g("kv_lora_rank"), "qk_nope_head_dim": g("qk_nope_head_dim"),
                             "qk_rope_head_dim": g("qk_rope_head_dim"), "v_head_dim": g("v_head_dim")}
        notes["attention"] = "MLA: num_attention_heads, q_lora_rank (null: 0), kv_lora_rank, qk_*_head_dim, v_head_dim"
    else:
        head_dim = config.get("head_dim") or hidden // heads
        card["attention"] = {"kind": "gqa", "num_heads": heads,
                             "num_kv_heads": g("num_key_value_heads", default=heads), "head_dim": head_dim}
        notes["attention"] = "GQA: num_attention_heads, num_key_value_heads, head_dim" + (
            "" if config.get("head_dim") else " (hidden_size / num_attention_heads)")
    card["dense_intermediate_size"] = g("intermediate_size")
    mtp_layer = layers if model_type in MLA and config.get("num_nextn_predict_layers") else None
    weights, kv, quant_notes = weight_dtypes(config, quant, model_type, file, mtp_layer)
    notes.update(quant_notes)
    moe = _moe(config, model_type, file, g, notes)
    if moe is not None:
        card["num_dense_layers"], card["moe"] = moe
        notes["num_dense_layers"] = notes.pop("_dense")
    else:
        notes["num_dense_layers"] = "every layer has a dense MLP"
        for family in ("experts", "shared_experts", "router"):
            weights.pop(family)
    if card["num_dense_layers"] == 0:  # families the model does not have keep the checkpoint's dtype
        weights["dense_mlp"] = weights["embedding"]
    if moe is not None and moe[1]["num_shared_experts"] == 0:
        weights["shared_experts"] = weights["embedding"]
    card["weights"] = weights
    card["activation_dtype"] = "bf16" if weights["attention"] not in ("fp16", "fp32") else weights["attention"]
    card["kv_cache_dtype"] = kv if kv not in ("fp32",) else "bf16"
    notes["activation_dtype"] = "compute dtype of weight-only GEMMs and attention (the checkpoint's, bf16 for quantised)"
    notes.setdefault("kv_cache_dtype", "the engine's default KV dtype: the model's (kv-cache-dtype auto)")
    card["kernels"], kernel_notes = kernels(card, model_type in QK_NORM)
    notes.update(kernel_notes)
    if model_type in MLA:
        card["mtp_layers"] = config.get("num_nextn_predict_layers") or 0
        notes["mtp_layers"] = "num_nextn_predict_layers"
    for key in ("sliding_window",):
        if config.get(key) and (model_type == "gpt_oss" or config.get("use_sliding_window", True)):
            notes["_approximations"] = (f"{key} {config[key]}: not modelled, every layer attends to the whole "
                                        "context (attention and KV read times are upper bounds)")
    validate(ModelCard, card, file)  # the card holds: a field out of range names itself here
    return card, notes


def _moe(config: dict, model_type: str, file: str, g, notes: dict) -> tuple[int, dict] | None:
    """(leading dense layers, the moe mapping) or None for a dense model."""
    if model_type in DENSE_GQA:
        return None
    if model_type in MLA:
        if config.get("moe_layer_freq", 1) != 1:
            raise ConfigError(file, "moe_layer_freq", f"{config['moe_layer_freq']}: MoE layers that are not every "
                              "layer after the dense ones are not modelled", "1")
        dense, experts, k = g("first_k_dense_replace", default=0), g("n_routed_experts"), g("num_experts_per_tok")
        shared, size = g("n_shared_experts", default=0), g("moe_intermediate_size")
        notes["_dense"] = "first_k_dense_replace"
        notes["moe"] = ("n_routed_experts, num_experts_per_tok, n_shared_experts, moe_intermediate_size; "
                        "shared_experts_overlap: SGLang DeepseekV2MoE's alternate stream (forward_normal_dual_stream)")
    else:
        experts_key = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts"}.get(model_type, "num_experts")
        experts, k, shared = g(experts_key), g("num_experts_per_tok"), 0
        size = g("moe_intermediate_size") if model_type == "qwen3_moe" else g("intermediate_size")
        dense = 0
        if model_type == "qwen3_moe":
            only = list(config.get("mlp_only_layers") or [])
            if config.get("decoder_sparse_step", 1) != 1 or only != list(range(len(only))):
                key = "decoder_sparse_step" if config.get("decoder_sparse_step", 1) != 1 else "mlp_only_layers"
                raise ConfigError(file, key, f"{config.get(key)!r}: dense layers other than the leading ones are "
                                  "not modelled", "decoder_sparse_step 1 and mlp_only_layers [0..k-1]")
            dense = len(only)
        notes["_dense"] = "mlp_only_layers" if model_type == "qwen3_moe" else "every layer is MoE"
        notes["moe"] = f"{experts_key}, num_experts_per_tok, " + (
            "moe_intermediate_size" if model_type == "qwen3_moe" else "intermediate_size (the expert's)")
        if model_type != "qwen3_moe":
            notes["dense_intermediate_size"] = "intermediate_size (unused: no dense layers)"
    notes["moe.routing_locality"] = "assumed, as the shipped DeepSeek-V3 / Kimi-K2.5 cards (Cohere 2026, docs/sources.md)"
    moe = {"num_experts": experts, "experts_per_token": k, "num_shared_experts": shared,
           "intermediate_size": size, "shared_experts_overlap": model_type in MLA and shared > 0,
           "routing_locality": ROUTING_LOCALITY}
    if model_type in MLA and (config.get("n_group") or 1) > 1:
        moe["num_expert_groups"], moe["groups_per_token"] = g("n_group"), g("topk_group")
        # noaux_tc ranks a group by its two best biased scores, group_limited_greedy by its best (DeepSeek-V3
        # inference/model.py Gate.forward; DeepSeek-V2's modeling_deepseek.py MoEGate)
        moe["group_score"] = "max" if config.get("topk_method") == "group_limited_greedy" else "top2_sum"
        notes["moe"] += "; num_expert_groups, groups_per_token, group_score: n_group, topk_group, topk_method"
    return dense, moe


def draft_head_from_file(path: str) -> tuple[dict, str]:
    """(draft_head mapping, note) of an EAGLE-style head's config.json (LlamaForCausalLMEagle3 and the like: one or a
    few Llama decoder layers; draft_vocab_size where the head scores a reduced vocabulary)."""
    config = read_json(path, key="--draft-head")
    g = lambda key, **kw: _get(config, key, path, **kw)  # noqa: E731
    heads, hidden = g("num_attention_heads"), g("hidden_size")
    head = {"num_layers": g("num_hidden_layers"), "num_heads": heads,
            "num_kv_heads": g("num_key_value_heads", default=heads), "head_dim": config.get("head_dim") or hidden // heads,
            "intermediate_size": g("intermediate_size"),
            "draft_vocab_size": g("draft_vocab_size", default=config.get("vocab_size"))}
    arch = ", ".join(config.get("architectures") or []) or "an EAGLE head"
    return head, (f"{os.path.basename(os.path.dirname(os.path.abspath(path)))} ({arch}): num_hidden_layers, "
                  "num_attention_heads, num_key_value_heads, head_dim (or hidden_size / heads), intermediate_size, "
                  "draft_vocab_size")
