"""What a validation case may state: only what its source states.

A case under scenarios/validation/ names the hardware (a topology and what-if fields of it), the model (a card and its
weight dtypes), the engine (name, version and its own flags), the parallelism it ran with, the workload, the
speculation the engine ran (method, draft tokens, chain or tree, a model-free drafter's flags but not its host costs)
and, where the source publishes one, the accept length to replay. Everything an engine decides itself (host costs, CUDA graphs and their batch sizes, launch costs,
efficiencies, all-reduce choice) comes from the engine profile, so no case can set it.
"""
from __future__ import annotations

import glob
import os
from typing import Any

import yaml

# a case scenario file's top-level keys, and within `speculation:` what the engine's launch flags say
SCENARIO_KEYS = {"name", "description", "topology", "model", "parallelism", "engine", "workload", "speculation",
                 "policy", "seed"}
# (a structural method's own settings, e.g. lookahead's window or SGLang's --speculative-eagle-topk, are launch flags)
SPECULATION_KEYS = {"method", "draft_tokens", "verify", "tree", "acceptance", "draft_model", "heads", "lookahead",
                    "dynamic_tree", "sparse_kv", "ngram", "suffix"}
# a model-free drafter's block mixes the engine's flags (which a case may state) with host costs (which it may not)
DRAFTER_FLAGS = {"ngram": {"algorithm", "branch_length", "min_match_window", "max_match_window", "min_bfs_breadth",
                           "max_bfs_breadth", "prompt_lookup_min", "prompt_lookup_max"},
                 "suffix": {"max_tree_depth", "max_spec_factor", "max_spec_offset", "min_token_prob", "cache_requests"}}
# a case's `set:` paths, by their first segments: the hardware's data-sheet figures and driver settings (not its
# efficiencies, launch or host costs, which are fitted or estimated), the model card, the engine and its flags, ...
SET_WHOLE = ("model", "engine")
SET_PREFIXES = ("topology.gpu.memory_GB", "topology.gpu.memory_bandwidth_GBps", "topology.gpu.read_bandwidth_GBps",
                "topology.gpu.peak_TFLOPS",
                "topology.gpu.num_sms", "topology.gpu.sm_version", "fabric.p2p_level", "topology.fabric.p2p_level",
                "model.", "engine.", "parallelism.", "workload.", "speculation.method", "speculation.draft_tokens",
                "speculation.verify", "speculation.tree", "speculation.acceptance", "speculation.draft_model",
                "speculation.heads", "speculation.lookahead", "speculation.dynamic_tree", "speculation.sparse_kv")


def scenario_problems(data: Any, where: str) -> list[str]:
    """The keys of one case scenario file (a mapping) that a validation case may not set."""
    if not isinstance(data, dict):
        return [f"{where}: not a mapping"]
    out = [f"{where}: {key}" for key in data if key not in SCENARIO_KEYS]
    speculation = data.get("speculation") or {}
    out += [f"{where}: speculation.{key}" for key in speculation if key not in SPECULATION_KEYS]
    out += [f"{where}: speculation.{block}.{key}" for block, flags in DRAFTER_FLAGS.items()
            for key in (speculation.get(block) or {}) if key not in flags]
    policy = data.get("policy")
    if policy is not None and policy != {"kind": "static"}:
        out.append(f"{where}: policy (only the engine's own, static, speculation)")
    out += [f"{where}: {key} (an inline mapping: name a shipped file)" for key in ("topology", "model")
            if isinstance(data.get(key), dict)]
    return out


def set_problems(overrides: dict, where: str) -> list[str]:
    """The paths of one case's `set:` that a validation case may not set."""
    flags = {f"speculation.{block}.{key}" for block, keys in DRAFTER_FLAGS.items() for key in keys}
    return [f"{where}: set.{path}" for path in overrides
            if path not in SET_WHOLE and not path.startswith(SET_PREFIXES) and path not in flags]


def problems(folder: str) -> list[str]:
    """Every disallowed key in the validation set under `folder` (its sources' cases and their scenario files)."""
    out: list[str] = []
    for path in sorted(glob.glob(os.path.join(folder, "cases", "*.yaml"))):
        with open(path, encoding="utf-8") as handle:
            out += scenario_problems(yaml.safe_load(handle), os.path.relpath(path, folder))
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        for index, case in enumerate(data.get("cases") or []):
            out += set_problems(case.get("set") or {}, f"{os.path.relpath(path, folder)}: cases[{index}]")
    return out
