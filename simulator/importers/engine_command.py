"""A scenario from the command line that launches SGLang (`python -m sglang.launch_server ...`) or vLLM
(`vllm serve MODEL ...`): the parallel split, the speculative settings, the runtime flags, the model mapped to a card.

What a launch command does not say (the machine unless --topology, the workload, the drafter's acceptance) is written
as a named placeholder in the scenario's header; every flag not mapped is listed (stderr and the header).
"""
from __future__ import annotations

import json
import os
import re
import shlex

from ..config.catalog import data_dir, names
from ..config.errors import ConfigError
from ..config.engine_profile import known_versions
from .engine_flags import NO_EFFECT, NOT_MODELLED, SGLANG, SWITCHES, VLLM

DEFAULT_TOPOLOGY = "pcie8_rtx_pro_6000"  # the reference machine, where --topology does not name one
PLACEHOLDER_ACCEPTANCE = {"kind": "iid", "alpha": 0.6}
PLACEHOLDER_WORKLOAD = {"requests": 8, "prompt_tokens": 1000, "output_tokens": 1024}
SGLANG_ALGORITHMS = {"EAGLE": "eagle3", "EAGLE3": "eagle3", "NEXTN": "mtp", "NGRAM": "ngram", "LOOKAHEAD": "ngram",
                     "STANDALONE": "draft_model"}
VLLM_METHODS = {"eagle": "eagle3", "eagle3": "eagle3", "mtp": "mtp", "deepseek_mtp": "mtp", "ngram": "ngram",
                "draft_model": "draft_model"}


def _engine(argv: list[str]) -> tuple[str, list[str]]:
    """('sglang' | 'vllm', the flags after the program)."""
    words = list(argv)
    for i, word in enumerate(words):
        if word in ("sglang.launch_server", "sglang.launch_server.py") or word.endswith("sglang/launch_server.py"):
            return "sglang", words[i + 1:]
        if os.path.basename(word) == "vllm" and i + 1 < len(words) and words[i + 1] == "serve":
            rest = words[i + 2:]
            return "vllm", (["--model", rest[0]] + rest[1:]) if rest and not rest[0].startswith("-") else rest
        if word == "vllm.entrypoints.openai.api_server":
            return "vllm", words[i + 1:]
    raise ConfigError("command line", "command", f"not an SGLang or vLLM launch: {shlex.join(words)[:80]}",
                      "python -m sglang.launch_server ..., vllm serve MODEL ...")


def _flags(words: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            out.append(("<argument>", word))
            i += 1
            continue
        if "=" in word:
            flag, value = word.split("=", 1)
            out.append((flag, value))
            i += 1
            continue
        values = []
        while i + 1 + len(values) < len(words) and not words[i + 1 + len(values)].startswith("--") \
                and word not in SWITCHES:
            values.append(words[i + 1 + len(values)])
            if word not in ("--cuda-graph-bs", "--cuda-graph-sizes"):
                break
        out.append((word.replace("_", "-"), " ".join(values) if values else None))
        i += 1 + len(values)
    return out


def model_for(path: str, base: str | None, flag: str) -> str:
    """The card a model path stands for: a local folder's config.json, or a shipped card / config.json by name."""
    local = path if path.endswith(".json") else os.path.join(path, "config.json")
    if os.path.isfile(local):
        return os.path.abspath(local)
    stem = os.path.basename(path.rstrip("/")).lower().removeprefix("meta-")
    candidates = [stem]  # Llama-3.1-8B-Instruct, Mixtral-8x7B-v0.1: then without the release suffixes, one by one
    while (shorter := re.sub(r"[-_](instruct|chat|hf|base|v\d+(\.\d+)*)$", "", candidates[-1])) != candidates[-1]:
        candidates.append(shorter)
    cards = names("model")
    for candidate in (re.sub(r"[^a-z0-9]+", "_", c) for c in candidates):
        if candidate in cards:
            return candidate
        target = os.path.join(data_dir("model"), "hf", candidate, "config.json")
        if os.path.isfile(target):
            return os.path.relpath(target, base) if base else target
    raise ConfigError("command line", flag, f"{path!r}: no config.json there and no shipped model of that name",
                      "a folder holding config.json, or one of " + ", ".join(sorted(cards)))


def _speculation(spec: dict, engine: str, base: str | None, notes: list[str]) -> dict | None:
    if engine == "vllm" and spec.get("vllm_config"):
        try:
            cfg = json.loads(spec["vllm_config"])
        except json.JSONDecodeError as exc:
            raise ConfigError("command line", "--speculative-config", f"not JSON: {exc.msg}", "a JSON object") from None
        method = cfg.get("method") or ("draft_model" if cfg.get("model") else None)
        algorithm, steps = VLLM_METHODS.get(str(method)), int(cfg.get("num_speculative_tokens") or 1)
        spec.update(algorithm_key=method, steps=steps, topk=1, draft_tokens=steps + 1, draft=cfg.get("model"))
        for key in sorted(set(cfg) - {"method", "model", "num_speculative_tokens"}):
            spec.setdefault("unmodelled", []).append(f"--speculative-config {key}={cfg[key]!r}: not modelled")
    elif spec.get("algorithm"):
        method = spec["algorithm"].upper()
        algorithm = SGLANG_ALGORITHMS.get(method)
        spec["algorithm_key"] = method
    else:
        return None
    if algorithm is None:
        allowed = ", ".join(VLLM_METHODS if engine == "vllm" else SGLANG_ALGORITHMS)
        raise ConfigError("command line", "--speculative-config" if engine == "vllm" else "--speculative-algorithm",
                          f"{spec['algorithm_key']!r} is not modelled", allowed)
    steps = spec.get("steps", 3)
    topk = spec.get("topk", 1)
    tokens = spec.get("draft_tokens", steps + 1 if topk == 1 else steps * topk + 1)
    if "steps" not in spec:
        notes.append("speculative steps not given: 3 assumed (SGLang chooses per model when unset)")
    out: dict = {"method": algorithm, "draft_tokens": max(1, tokens - 1), "verify": "chain" if topk == 1 else "tree"}
    if topk > 1:
        out["tree"] = {"kind": "topk", "k": topk, "depth": steps}
    if algorithm == "eagle3" and method == "EAGLE" and not spec.get("draft"):
        out["method"] = "mtp"  # SGLang: EAGLE without a draft model on a model with MTP modules runs them (NEXTN)
    if algorithm == "draft_model":
        if not spec.get("draft"):
            raise ConfigError("command line", "--speculative-draft-model-path", "a draft model is needed",
                              "the draft model's path or name")
        out["draft_model"] = {"model": model_for(spec["draft"], base, "--speculative-draft-model-path")}
    elif spec.get("draft") and algorithm == "eagle3":
        notes.append(f"draft head {spec['draft']}: the model card's draft_head stands for it (its shape: "
                     "specsim import model CONFIG --draft-head HEAD/config.json)")
    out["acceptance"] = dict(PLACEHOLDER_ACCEPTANCE)
    return out


def import_command(argv: list[str], topology: str | None, name: str | None, base: str | None,
                   engine_version: str | None = None) -> tuple[dict, list[str], list[str]]:
    """(scenario mapping, header lines, one line per flag not modelled)."""
    engine, words = _engine(argv)
    table = SGLANG if engine == "sglang" else VLLM
    s: dict = {}
    unmodelled: list[str] = []
    for flag, value in _flags(words):
        shown = flag + (f" {value}" if value is not None else "")
        if flag in table:
            try:
                table[flag](s, value)
            except (ValueError, KeyError, TypeError):
                raise ConfigError("command line", flag, f"cannot read {value!r}") from None
        elif flag in NO_EFFECT:
            unmodelled.append(f"{shown}: no effect on simulated figures")
        elif flag in NOT_MODELLED:
            unmodelled.append(f"{shown}: not modelled ({NOT_MODELLED[flag]})")
        else:
            unmodelled.append(f"{shown}: unknown to the importer, not modelled")
    spec = s.pop("_spec", {})
    if "target" not in spec:
        raise ConfigError("command line", "--model-path" if engine == "sglang" else "--model", "no model given",
                          "the model's path or Hugging Face name")
    vllm = s.pop("_vllm", {})
    if engine == "vllm":
        tp, dp = vllm.get("tp", 1), vllm.get("dp", 1)
        par = s.setdefault("parallelism", {})
        par["tp"] = tp * dp  # vLLM's data parallelism of an MoE model: attention groups inside the MoE's ranks
        if dp > 1:
            par.update(dp=dp, dp_attention=True)
        if vllm.get("ep"):
            par["ep"] = tp * dp
    s.setdefault("parallelism", {}).setdefault("tp", 1)
    notes: list[str] = []
    speculation = _speculation(spec, engine, base, notes)
    unmodelled += spec.get("unmodelled", [])
    flags = s.pop("_engine", {})
    versions = sorted(known_versions(engine), key=lambda v: [int(x) for x in re.findall(r"\d+", v)])
    version = engine_version or (versions[-1] if versions else None)
    if version not in versions:
        raise ConfigError("command line", "--engine-version", f"no {engine} profile for {version!r}",
                          ", ".join(versions) or "none shipped")
    model = model_for(spec["target"], base, "--model-path" if engine == "sglang" else "--model")
    label = os.path.basename(spec["target"].rstrip("/"))
    scenario = {"name": name or re.sub(r"[^a-z0-9]+", "_", f"{engine}_{label}_{(speculation or {}).get('method', 'plain')}".lower()),
                "description": f"{label} as launched with {engine} ({(speculation or {}).get('method', 'no speculation')}, "
                               f"tp {s['parallelism']['tp']}; imported from its launch command)",
                "topology": topology or DEFAULT_TOPOLOGY, "model": model, **s}
    scenario["workload"] = {**PLACEHOLDER_WORKLOAD, **s.get("workload", {})}
    if speculation:
        scenario["speculation"] = speculation
    scenario["engine"] = {"name": engine, "version": version, **flags}
    header = [f"Imported by `specsim import command` from: {shlex.join(argv)}",
              "Not in the command, set here as placeholders to replace with your own:",
              f"  - topology: {scenario['topology']}" + ("" if topology else " (the reference machine; --topology NAME)"),
              f"  - engine.version: {version}" + ("" if engine_version else f" (the newest {engine} profile shipped; "
                                                  "--engine-version V)"),
              f"  - workload: {PLACEHOLDER_WORKLOAD} (your requests' lengths and count)"]
    if speculation:
        header.append(f"  - speculation.acceptance: {PLACEHOLDER_ACCEPTANCE} (*placeholder*: your drafter's measured "
                      "acceptance)")
    header += [f"Note: {n}" for n in notes] + [f"Flag not mapped: {line}" for line in unmodelled]
    return scenario, header, unmodelled
