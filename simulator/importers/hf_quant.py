"""Stored weight dtypes of a Hugging Face checkpoint, from config.json's quantization_config or the ModelOpt
hf_quant_config.json beside it.

Each weight family is stood for by one module name as the architecture's checkpoint names it, and a quantiser's
ignore / exclude list is matched against that name (compressed-tensors' `re:` patterns, ModelOpt's and mxfp4's
globs), so a list that keeps the attention in bf16 keeps the card's attention in bf16. The router (gate) and the
token embedding are never quantised by these formats (they are not the quantised Linear layers of the engines).
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any

from ..config.errors import ConfigError

TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}
FAMILIES = ("attention", "dense_mlp", "experts", "shared_experts", "router", "embedding", "lm_head")
# one module name per family, as the checkpoints of each naming scheme call it
_MODULES = {
    "default": {"attention": "model.layers.1.self_attn.o_proj", "dense_mlp": "model.layers.0.mlp.down_proj",
                "experts": "model.layers.1.mlp.experts.0.down_proj",
                "shared_experts": "model.layers.1.mlp.shared_experts.down_proj",
                "router": "model.layers.1.mlp.gate", "embedding": "model.embed_tokens", "lm_head": "lm_head"},
    "mixtral": {"experts": "model.layers.1.block_sparse_moe.experts.0.w2", "router": "model.layers.1.block_sparse_moe.gate"},
    "gpt_oss": {"experts": "model.layers.1.mlp.experts.down_proj", "router": "model.layers.1.mlp.router"},
}
NEVER_QUANTISED = ("router", "embedding")


def module_names(model_type: str) -> dict[str, str]:
    return {**_MODULES["default"], **_MODULES.get(model_type, {})}


def matches(name: str, pattern: str) -> bool:
    """A quantiser's ignore entry: `re:REGEX` (compressed-tensors), a glob, or a module prefix / suffix."""
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], name) is not None or re.match(pattern[3:], name) is not None
    return (fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*")
            or name == pattern or name.endswith("." + pattern))


def weight_dtypes(config: dict, quant_file: dict | None, model_type: str, file: str,
                  mtp_layer: int | None = None) -> tuple[dict, str, dict]:
    """(weights mapping, kv-cache dtype, notes per key) for the card. With `mtp_layer` (the MTP module's layer index,
    DeepSeek's model.layers.<num_hidden_layers>): where the ignore list keeps that whole layer unquantised (ModelOpt's
    NVFP4 DeepSeek checkpoints exclude "model.layers.61*"), weights.mtp is the checkpoint's own dtype."""
    base = TORCH_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), None)
    if base is None:
        raise ConfigError(file, "torch_dtype", f"unknown dtype {config.get('torch_dtype')!r}", ", ".join(TORCH_DTYPES))
    names = module_names(model_type)
    weights = {family: base for family in FAMILIES}
    notes = {"weights": f"torch_dtype {config.get('torch_dtype') or config.get('dtype') or 'bfloat16 (unset)'}"}
    kv = base
    scheme = _scheme(config.get("quantization_config"), quant_file, file)
    if scheme is None:
        notes["weights"] += ", no quantization_config"
        return {**weights, "quant_group_size": 0}, kv, notes
    dtype, group, scale, zero, ignore, kv_quant, what = scheme
    for family in FAMILIES:
        if family in NEVER_QUANTISED or any(matches(names[family], p) for p in ignore):
            continue
        weights[family] = dtype
    if kv_quant:
        kv = kv_quant
        notes["kv_cache_dtype"] = f"{what}: KV cache quantised to {kv_quant}"
    out: dict[str, Any] = {**weights, "quant_group_size": group if dtype in ("int4", "fp4") else 0}
    if dtype in ("int4", "fp4") and group:
        out["quant_scale_dtype"] = scale
        if zero:
            out["quant_zero_point"] = True
    if mtp_layer is not None:
        layer = {f: names[f].replace("model.layers.1.", f"model.layers.{mtp_layer}.", 1)
                 for f in ("attention", "experts", "shared_experts")}
        if all(weights[f] != base for f in layer) and all(any(matches(m, p) for p in ignore) for m in layer.values()):
            out["mtp"] = base
            notes["weights.mtp"] = f"{what}: the ignore list keeps the MTP layer (model.layers.{mtp_layer}) {base}"
    kept = [f for f in FAMILIES if weights[f] == base and f not in NEVER_QUANTISED]
    notes["weights"] = (f"{what}: {dtype}" + (f" group {group}" if out["quant_group_size"] else "")
                        + (f"; kept {base} by its ignore list: {', '.join(kept)}" if kept else "")
                        + f"; router and embedding stay {base}")
    return out, kv, notes


def _scheme(qc: Any, quant_file: dict | None, file: str):
    """(dtype, group size, scale dtype, zero point, ignore patterns, kv dtype or None, description) or None."""
    if quant_file is not None and (qc is None or qc.get("quant_method") == "modelopt"):
        return _modelopt(quant_file.get("quantization", quant_file), file)
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise ConfigError(file, "quantization_config", "expected a mapping")
    method = qc.get("quant_method")
    if method == "fp8":
        ignore = list(qc.get("modules_to_not_convert") or qc.get("ignored_layers") or []) + ["lm_head"]
        block = qc.get("weight_block_size")
        return "fp8", 0, "bf16", False, ignore, None, f"quantization_config fp8 {qc.get('fmt', 'e4m3')}" + (
            f", block scales {block} (fp32 per block: negligible bytes)" if block else "")
    if method == "mxfp4":  # OCP MX: 32 fp4 weights share one 8-bit (E8M0) scale, stored as one byte like fp8
        return "fp4", 32, "fp8", False, list(qc.get("modules_to_not_convert") or []), None, \
            "quantization_config mxfp4 (E8M0 scale per 32 weights, one byte: counted as fp8)"
    if method == "compressed-tensors":
        return _compressed_tensors(qc, file)
    if method in ("gptq", "awq"):
        bits, group = qc.get("bits", qc.get("w_bit")), qc.get("group_size", qc.get("q_group_size", 128))
        if bits != 4:
            raise ConfigError(file, "quantization_config.bits", f"{bits}-bit {method} is not modelled", "4")
        zero = bool(qc.get("zero_point", True)) if method == "awq" else not qc.get("sym", True)
        return "int4", int(group), "fp16", zero, list(qc.get("modules_to_not_convert") or []) + ["lm_head"], None, \
            f"quantization_config {method} int4 group {group}"
    if method == "modelopt":
        return _modelopt(qc, file)
    raise ConfigError(file, "quantization_config.quant_method", f"{method!r} is not mapped to weight dtypes",
                      "fp8, mxfp4, compressed-tensors, gptq, awq, modelopt (or hf_quant_config.json beside it)")


def _compressed_tensors(qc: dict, file: str):
    groups = list((qc.get("config_groups") or {}).values())
    if len(groups) != 1 or not isinstance(groups[0].get("weights"), dict):
        raise ConfigError(file, "quantization_config.config_groups", f"{len(groups)} groups; one weight scheme is modelled",
                          "one config group")
    w = groups[0]["weights"]
    kind, bits = w.get("type"), w.get("num_bits")
    dtype = {("int", 4): "int4", ("int", 8): "int8", ("float", 8): "fp8", ("float", 4): "fp4"}.get((kind, bits))
    if dtype is None:
        raise ConfigError(file, "quantization_config.config_groups.weights", f"{kind} {bits}-bit weights are not mapped",
                          "int 4/8, float 4/8")
    group = int(w.get("group_size") or 0) if w.get("strategy") == "group" else 0
    kv = qc.get("kv_cache_scheme")
    kv_dtype = "fp8" if isinstance(kv, dict) and kv.get("num_bits") == 8 else None
    return dtype, group, "bf16", not w.get("symmetric", True), list(qc.get("ignore") or []), kv_dtype, \
        f"quantization_config compressed-tensors {kind}{bits}" + (f" group {group}" if group else "")


def _modelopt(q: dict, file: str):
    algo = str(q.get("quant_algo") or "").upper()
    if algo not in ("FP8", "NVFP4"):
        raise ConfigError(file, "quantization.quant_algo", f"{algo or 'nothing'} is not mapped", "FP8, NVFP4")
    kv = "fp8" if str(q.get("kv_cache_quant_algo") or "").upper() == "FP8" else None
    ignore = list(q.get("exclude_modules") or [])
    if algo == "FP8":
        return "fp8", 0, "bf16", False, ignore, kv, "hf_quant_config.json (ModelOpt) FP8"
    group = int(q.get("group_size") or 16)  # NVFP4: an E4M3 scale per 16 fp4 weights
    return "fp4", group, "fp8", False, ignore, kv, f"hf_quant_config.json (ModelOpt) NVFP4 group {group}"
