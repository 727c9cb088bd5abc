"""Hypothesis strategies for whole scenarios: machines, model cards, runtimes, speculation, acceptance models.

Every strategy draws plain dicts (what a YAML file holds), so a test can change one field and rebuild the scenario;
`make_scenario` validates a dict into a Scenario with `simulator.config.build`. Shapes are kept small (a few layers,
hidden sizes of a few hundred) so a whole run takes milliseconds.

What they reach: PCIe trees and NVSwitch boards of 1-16 GPUs; GQA (KV heads sharded or replicated) and MLA models,
dense or MoE, bf16 / fp8 / int4-with-group-scales weights; EAGLE-3 heads, MTP modules, separate draft models and the
n-gram drafter; chains and every tree kind; i.i.d., positional, bursty, n-gram-context and trace acceptance; every
all-reduce the fabric permits (NCCL ring / tree, NVLS, one-shot and two-shot custom all-reduce); and, in
`served_scenarios`, length distributions, fixed-rate and Poisson arrivals, KV-cache pressure with queueing or
preemption, and every policy (static, hybrid, adaptive length, multi-drafter, batch threshold, batch table, goodput).
"""
from __future__ import annotations

import atexit
import copy
import os
import shutil
import tempfile
from collections import deque

from hypothesis import strategies as st

from simulator.config import build

TRACE_DIR = tempfile.mkdtemp(prefix="specsim-strategies-")  # acceptance traces written by `acceptances`
atexit.register(shutil.rmtree, TRACE_DIR, True)

# --- machines ----------------------------------------------------------------------------------------------------

# A small 2-GPU-class machine and dense model with an EAGLE-3 head, for tests that change a field or two.
TINY_GPU = {"name": "oracle-gpu", "memory_GB": 80.0, "memory_bandwidth_GBps": 2000.0, "memory_efficiency": 0.8,
            "peak_TFLOPS": {"bf16": 500.0}, "compute_efficiency": 0.7, "kernel_floor_us": 1.0}
TINY_HOST = {"eager_launch_us": 10.0, "launch_jitter_cv": 0.5, "rank_skew_cv": 0.1, "graph_launch_us": 20.0,
            "graph_node_us": 0.5, "step_overhead_us": 150.0, "sync_us": 15.0}
TINY_CARD = {"name": "oracle-dense", "num_layers": 2, "num_dense_layers": 2, "hidden_size": 512, "vocab_size": 32000,
            "attention": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 2, "head_dim": 32},
            "dense_intermediate_size": 1024, "weights": {"attention": "bf16", "dense_mlp": "bf16"},
            "kernels": {"attention": 7, "dense_mlp": 4, "per_pass": 10, "verify_per_pass": 20, "tree_attention": 4},
            "draft_head": {"num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "intermediate_size": 1024,
                            "draft_vocab_size": 32000}}


def _gpu_node(i: int) -> dict:
    return {"name": f"gpu{i}", "kind": "gpu"}


@st.composite
def gpu_specs(draw) -> dict:
    bf16 = draw(st.floats(100, 2000))
    return {
        "name": "gen-gpu",
        "memory_GB": draw(st.sampled_from([80.0, 96.0, 141.0, 192.0])),
        "memory_bandwidth_GBps": draw(st.floats(500, 8000)),
        "memory_efficiency": draw(st.floats(0.5, 0.9)),
        "peak_TFLOPS": {"bf16": bf16, "fp8": 2 * bf16},
        "compute_efficiency": draw(st.floats(0.5, 0.9)),
        "kernel_floor_us": draw(st.floats(0.5, 2.0)),
    }


@st.composite
def host_specs(draw, jitter: bool = True) -> dict:
    return {
        "eager_launch_us": draw(st.floats(2.0, 20.0)),
        "launch_jitter_cv": draw(st.floats(0.0, 0.6)) if jitter else 0.0,
        "rank_skew_cv": draw(st.floats(0.0, 0.2)) if jitter else 0.0,
        "graph_launch_us": draw(st.floats(5.0, 30.0)),
        "graph_node_us": draw(st.floats(0.0, 1.0)),
        "step_overhead_us": draw(st.floats(0.0, 200.0)),
        "sync_us": draw(st.floats(0.0, 30.0)),
    }


def pcie_fabric(num_gpus: int, sockets: int = 2, gpus_per_switch: int = 0, p2p_level: str = "pcie_switch",
                pcie_GBps: float = 48.0, pcie_latency_us: float = 0.0, socket_GBps: float = 64.0,
                socket_latency_us: float = 0.2, shm_hop_latency_us: float = 1.5) -> dict:
    """A PCIe tree: GPUs on the sockets' root ports, or behind PCIe switches (gpus_per_switch > 0)."""
    sockets = max(1, min(sockets, num_gpus))
    nodes = [{"name": f"cpu{s}", "kind": "cpu"} for s in range(sockets)]
    links = []

    def pcie(a, b):
        links.append({"between": [a, b], "kind": "pcie", "bandwidth_GBps": pcie_GBps, "latency_us": pcie_latency_us})

    if sockets == 2:
        links.append({"between": ["cpu0", "cpu1"], "kind": "socket", "bandwidth_GBps": socket_GBps,
                      "latency_us": socket_latency_us})
    per_socket = -(-num_gpus // sockets)
    if gpus_per_switch:
        num_switches = -(-num_gpus // gpus_per_switch)
        for w in range(num_switches):
            nodes.append({"name": f"sw{w}", "kind": "pcie_switch"})
            pcie(f"sw{w}", f"cpu{min(sockets - 1, w * gpus_per_switch // per_socket)}")
    for i in range(num_gpus):
        nodes.append(_gpu_node(i))
        pcie(f"gpu{i}", f"sw{i // gpus_per_switch}" if gpus_per_switch else f"cpu{i // per_socket}")
    return {"nodes": nodes, "links": links, "p2p_level": p2p_level, "shm_hop_latency_us": shm_hop_latency_us,
            "nvls": False}


def nvswitch_fabric(num_gpus: int, nvlink_GBps: float = 450.0, nvlink_latency_us: float = 0.0, nvls: bool = True,
                    sockets: int = 2, pcie_GBps: float = 48.0, pcie_latency_us: float = 0.0,
                    socket_GBps: float = 64.0, socket_latency_us: float = 0.2, shm_hop_latency_us: float = 1.5) -> dict:
    """An HGX-style board: every GPU on one NVSwitch, and on its socket by PCIe."""
    fabric = pcie_fabric(num_gpus, sockets, 0, "pcie_switch", pcie_GBps, pcie_latency_us, socket_GBps,
                         socket_latency_us, shm_hop_latency_us)
    fabric["nodes"].append({"name": "nvs", "kind": "nvswitch"})
    fabric["links"] += [{"between": [f"gpu{i}", "nvs"], "kind": "nvlink", "bandwidth_GBps": nvlink_GBps,
                         "latency_us": nvlink_latency_us} for i in range(num_gpus)]
    fabric["nvls"] = nvls
    return fabric


def topology(fabric: dict, gpu: dict, host: dict, name: str = "gen") -> dict:
    return {"name": name, "gpu": gpu, "host": host, "fabric": fabric}


@st.composite
def pcie_fabrics(draw, num_gpus: int) -> dict:
    return pcie_fabric(
        num_gpus,
        sockets=draw(st.integers(1, 2)),
        gpus_per_switch=draw(st.sampled_from([0, 0, 1, 2, 4])),
        p2p_level=draw(st.sampled_from(["nvlink", "pcie_switch", "cpu", "system"])),
        pcie_GBps=draw(st.floats(16, 64)),
        pcie_latency_us=draw(st.floats(0, 1)),
        socket_GBps=draw(st.floats(32, 128)),
        socket_latency_us=draw(st.floats(0, 1)),
        shm_hop_latency_us=draw(st.floats(0, 5)),
    )


@st.composite
def nvswitch_fabrics(draw, num_gpus: int) -> dict:
    return nvswitch_fabric(
        num_gpus,
        nvlink_GBps=draw(st.floats(100, 900)),
        nvlink_latency_us=draw(st.floats(0, 1)),
        nvls=draw(st.booleans()),
        sockets=draw(st.integers(1, 2)),
        pcie_latency_us=draw(st.floats(0, 1)),
        shm_hop_latency_us=draw(st.floats(0, 5)),
    )


@st.composite
def topologies(draw, num_gpus: int | None = None, jitter: bool = True, kind: str | None = None) -> dict:
    """A PCIe tree (with or without switches and peer-to-peer) or an NVSwitch board of 1..16 GPUs."""
    n = num_gpus or draw(st.integers(1, 16))
    kind = kind or draw(st.sampled_from(["pcie", "nvswitch"]))
    fabric = draw(pcie_fabrics(n) if kind == "pcie" else nvswitch_fabrics(n))
    return topology(fabric, draw(gpu_specs()), draw(host_specs(jitter)), name=f"gen_{kind}{n}")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# --- model cards ---------------------------------------------------------------------------------------------------


@st.composite
def mla_attention(draw, tp: int) -> dict:
    """DeepSeek-style multi-head latent attention: heads sharded over tp, the latent KV cache replicated."""
    return {"kind": "mla", "num_heads": tp * draw(st.sampled_from([1, 2, 4])),
            "q_lora_rank": draw(st.sampled_from([0, 128, 384])), "kv_lora_rank": draw(st.sampled_from([64, 128, 512])),
            "qk_nope_head_dim": draw(st.sampled_from([32, 64, 128])), "qk_rope_head_dim": draw(st.sampled_from([16, 64])),
            "v_head_dim": draw(st.sampled_from([32, 64, 128]))}


@st.composite
def gqa_attention(draw, tp: int) -> dict:
    """Grouped-query attention: KV heads a multiple of tp (sharded) or a divisor of it (replicated on some ranks)."""
    kv_heads = draw(st.sampled_from([tp, 2 * tp] + [d for d in divisors(tp) if d < tp]))
    return {"kind": "gqa", "num_heads": max(kv_heads, tp) * draw(st.sampled_from([1, 2, 4])), "num_kv_heads": kv_heads,
            "head_dim": draw(st.sampled_from([32, 64, 128]))}


@st.composite
def model_cards(draw, tp: int, attention=("gqa", "mla")) -> dict:
    """A small decoder, dense or MoE, GQA or MLA, whose head count tp divides; with an EAGLE head and maybe an MTP
    layer; experts in bf16, fp8 or int4 with group scales, attention in bf16 or fp8."""
    kind = draw(st.sampled_from(list(attention)))
    attn = draw(mla_attention(tp) if kind == "mla" else gqa_attention(tp))
    head_dim = 64 if kind == "mla" else attn["head_dim"]
    hidden = draw(st.sampled_from([256, 512, 1024, 2048]))
    num_layers = draw(st.integers(1, 4))
    is_moe = draw(st.booleans())
    card = {
        "name": f"gen-{kind}-{'moe' if is_moe else 'dense'}",
        "num_layers": num_layers,
        "num_dense_layers": draw(st.integers(0, num_layers - 1)) if is_moe else num_layers,
        "hidden_size": hidden,
        "vocab_size": draw(st.sampled_from([1000, 32000, 128000])),
        "attention": attn,
        "dense_intermediate_size": draw(st.sampled_from([512, 1024, 4096])),
        "weights": {"attention": draw(st.sampled_from(["bf16", "bf16", "fp8"])), "dense_mlp": "bf16",
                    "embedding": "bf16", "lm_head": "bf16"},
        "kernels": {"attention": draw(st.integers(1, 16)), "dense_mlp": draw(st.integers(1, 8)),
                    "moe": draw(st.integers(0, 16)), "per_pass": draw(st.integers(0, 12)),
                    "verify_per_pass": draw(st.integers(0, 20)), "tree_attention": draw(st.integers(0, 8))},
        "mtp_layers": draw(st.integers(0, 1)),
        "draft_head": {"num_layers": 1, "num_heads": tp, "num_kv_heads": tp, "head_dim": head_dim,
                       "intermediate_size": 512, "draft_vocab_size": 1000},
    }
    if is_moe:
        experts = draw(st.sampled_from([4, 8, 16, 64]))
        card["moe"] = {"num_experts": experts, "experts_per_token": draw(st.integers(1, min(8, experts))),
                       "num_shared_experts": draw(st.integers(0, 1)),
                       "intermediate_size": draw(st.sampled_from([128, 256, 1024])),
                       "routing_locality": draw(st.floats(0.0, 0.9))}
        experts_dtype = draw(st.sampled_from(["bf16", "fp8", "int4"]))
        card["weights"]["experts"] = experts_dtype
        if experts_dtype == "int4":
            card["weights"]["quant_group_size"] = draw(st.sampled_from([0, 32, 128]))
    return card


@st.composite
def draft_model_cards(draw, tp: int) -> dict:
    """A separate small dense GQA draft model that the same tp ranks can shard."""
    num_layers = draw(st.integers(1, 2))
    return {"name": "gen-draft", "num_layers": num_layers, "num_dense_layers": num_layers,
            "hidden_size": draw(st.sampled_from([256, 512])), "vocab_size": 32000,
            "attention": {"kind": "gqa", "num_heads": 2 * tp, "num_kv_heads": tp, "head_dim": 64},
            "dense_intermediate_size": 1024, "weights": {"attention": "bf16", "dense_mlp": "bf16"},
            "kernels": {"attention": draw(st.integers(1, 8)), "dense_mlp": draw(st.integers(1, 4)), "per_pass": 4,
                        "verify_per_pass": 0}}


# --- runtime, speculation, acceptance ------------------------------------------------------------------------------


@st.composite
def runtimes(draw, allreduce=("auto", "nccl", "nccl_ring", "nccl_tree")) -> dict:
    return {"cuda_graph_decode": draw(st.booleans()), "cuda_graph_verify": draw(st.booleans()),
            "cuda_graph_draft": draw(st.booleans()), "allreduce": draw(st.sampled_from(list(allreduce))),
            "fuse_allreduce_rmsnorm": draw(st.booleans()), "overlap_schedule": draw(st.booleans())}


probability = st.floats(0.0, 1.0)
regimes = st.builds(lambda probs, decay: {"probs": probs, "sibling_decay": decay},
                    st.lists(probability, min_size=1, max_size=4), probability)


ACCEPTANCE_KINDS = ("iid", "positional", "bursty", "ngram_context", "trace")


def write_trace(lengths: list[int]) -> str:
    """A CSV of per-step accept lengths (bonus token included) in TRACE_DIR, named by its content."""
    path = os.path.join(TRACE_DIR, "trace_" + "_".join(map(str, lengths)) + ".csv")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("accept_len\n" + "".join(f"{n}\n" for n in lengths))
    return path


@st.composite
def acceptances(draw, kinds=ACCEPTANCE_KINDS) -> dict:
    kind = draw(st.sampled_from(list(kinds)))
    if kind == "iid":
        return {"kind": "iid", "alpha": draw(probability)}
    if kind == "positional":
        return {"kind": "positional", "probs": draw(st.lists(probability, min_size=1, max_size=6)),
                "sibling_decay": draw(probability), "repeat_last": True}
    if kind == "ngram_context":
        return {"kind": "ngram_context", "repetitiveness": draw(probability), "warmup_tokens": draw(st.floats(1.0, 5000.0)),
                "mean_copy_tokens": draw(st.floats(1.0, 300.0)), "novel_gain": draw(st.floats(0.0, 3.0)),
                "copying": draw(regimes), "novel": draw(regimes)}
    if kind == "trace":
        lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=12))
        return {"kind": "trace", "file": write_trace(lengths)}
    return {"kind": "bursty", "easy": draw(regimes), "hard": draw(regimes),
            "mean_easy_tokens": draw(st.floats(1.0, 500.0)), "mean_hard_tokens": draw(st.floats(1.0, 500.0)),
            "start_easy": draw(st.booleans())}


@st.composite
def verify_shapes(draw) -> tuple[int, str, dict]:
    """(draft_tokens, verify, tree) with draft_tokens consistent with the tree's size."""
    kind = draw(st.sampled_from(["chain", "chain", "topk", "k_ary", "optimal", "parents"]))
    if kind == "chain":
        return draw(st.integers(1, 5)), "chain", {"kind": "chain"}
    if kind == "topk":
        k, depth = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        return k * depth, "tree", {"kind": "topk", "k": k, "depth": depth}
    if kind == "k_ary":
        k, depth = draw(st.integers(1, 2)), draw(st.integers(1, 3))
        return sum(k**d for d in range(1, depth + 1)), "tree", {"kind": "k_ary", "k": k, "depth": depth}
    if kind == "optimal":
        return draw(st.integers(1, 8)), "tree", {"kind": "optimal"}
    size = draw(st.integers(2, 9))
    parents = [-1] + [draw(st.integers(0, node - 1)) for node in range(1, size)]
    return size - 1, "tree", {"kind": "parents", "parents": parents}


@st.composite
def speculations(draw, card: dict, acceptance=None, methods=("eagle3", "ngram", "mtp", "draft_model"),
                 tp: int = 1) -> dict:
    allowed = [m for m in methods if m != "mtp" or card.get("mtp_layers")]
    method = draw(st.sampled_from(allowed))
    draft_tokens, verify, tree = draw(verify_shapes())
    spec = {"method": method, "draft_tokens": draft_tokens, "verify": verify, "tree": tree,
            "acceptance": acceptance if acceptance is not None else draw(acceptances())}
    if method == "draft_model":
        spec["draft_model"] = {"model": draw(draft_model_cards(tp))}
    if method == "ngram":
        spec["ngram"] = {"host_us_per_step": draw(st.floats(0.0, 1000.0)),
                         "host_us_per_request": draw(st.floats(0.0, 300.0))}
    return spec


@st.composite
def workloads(draw, max_requests: int = 2) -> dict:
    requests = draw(st.integers(1, max_requests))
    return {"requests": requests, "prompt_tokens": draw(st.integers(1, 2000)),
            "output_tokens": draw(st.integers(64, 512)), "concurrency": draw(st.integers(1, requests))}


def permitted_allreduce(topo: dict, tp: int) -> list[str]:
    """The runtime.allreduce choices this fabric permits for the first tp GPUs (forced NVLS needs an NVSwitch with
    multicast joining them by NVLink; forced custom all-reduce needs peer-to-peer between all of them)."""
    choices = ["auto", "nccl", "nccl_ring", "nccl_tree"]
    if tp < 2:
        return choices
    from simulator.config.topology import Topology
    from simulator.hardware.collectives import AllReduce, NotPermitted
    from simulator.hardware.interconnect import Fabric

    fabric = Fabric(Topology.model_validate(topo))
    for forced in ("nvls", "one_shot", "two_shot"):
        try:
            AllReduce(fabric, tp, forced)
        except NotPermitted:
            continue
        choices.append(forced)
    return choices


@st.composite
def scenarios(draw, jitter: bool = True, speculate: bool = True, fabric: str | None = None, min_tp: int = 1) -> dict:
    """A whole scenario dict with an inline topology and model card, static policy, one fixed-length workload;
    `fabric` forces pcie or nvswitch, `min_tp` a TP group of at least that many GPUs."""
    topo = draw(topologies(num_gpus=draw(st.integers(max(1, min_tp), 16)), jitter=jitter, kind=fabric))
    n = len([x for x in topo["fabric"]["nodes"] if x["kind"] == "gpu"])
    tp = draw(st.sampled_from([d for d in divisors(n) if d >= min_tp]))
    card = draw(model_cards(tp))
    raw = {"name": "gen", "topology": topo, "model": card, "parallelism": {"tp": tp},
           "runtime": draw(runtimes(allreduce=permitted_allreduce(topo, tp))),
           "workload": draw(workloads()), "seed": draw(st.integers(0, 2**32 - 1)), "policy": {"kind": "static"}}
    if speculate:
        raw["speculation"] = draw(speculations(card, tp=tp))
    return raw


# --- serving: lengths, arrivals, memory pressure, policies --------------------------------------------------------

MAX_OUTPUT = 256  # longest output a served workload draws (keeps a run to milliseconds at fast fidelity)


@st.composite
def lengths(draw, low: int, high: int) -> tuple[object, int]:
    """(a workload length: a number, fixed, uniform or lognormal; the longest it can be)."""
    kind = draw(st.sampled_from(["int", "fixed", "uniform", "lognormal"]))
    if kind == "int":
        value = draw(st.integers(low, high))
        return value, value
    if kind == "fixed":
        value = draw(st.integers(low, high))
        return {"kind": "fixed", "value": value}, value
    if kind == "uniform":
        a, b = sorted((draw(st.integers(low, high)), draw(st.integers(low, high))))
        return {"kind": "uniform", "low": a, "high": b}, b
    top = draw(st.integers(low, high))
    return {"kind": "lognormal", "median": draw(st.floats(low, top)), "sigma": draw(st.floats(0.05, 1.5)), "max": top}, top


@st.composite
def served_workloads(draw, max_requests: int = 4, max_output: int = MAX_OUTPUT) -> tuple[dict, int]:
    """(a workload with length distributions, all-at-once / fixed-rate / Poisson arrivals, chunked prefill and a KV
    overflow mode; the longest request it can hold in the KV cache, prompt plus output)."""
    requests = draw(st.integers(1, max_requests))
    prompt, prompt_max = draw(lengths(1, 2000))
    output, output_max = draw(lengths(2, max_output))  # 1: see test_properties (multi-drafter, one token)
    arrival = draw(st.sampled_from(["all_at_once", "fixed_rate", "poisson"]))
    workload = {"requests": requests, "prompt_tokens": prompt, "output_tokens": output,
                "concurrency": draw(st.integers(1, requests)), "max_prefill_tokens": draw(st.sampled_from([64, 512, 8192])),
                "kv_overflow": draw(st.sampled_from(["queue", "preempt"])), "seed_offset": draw(st.integers(0, 3)),
                "arrival": {"kind": arrival} if arrival == "all_at_once" else
                           {"kind": arrival, "rate_per_s": draw(st.floats(0.5, 500.0))}}
    return workload, prompt_max + output_max


POLICY_KINDS = ("static", "hybrid", "adaptive_length", "batch_threshold", "batch_table", "goodput", "multi_drafter",
                "assistant_heuristic", "dynamic_length")


@st.composite
def policies_for(draw, raw: dict, kind: str | None = None) -> dict:
    """A policy the scenario's speculation admits (multi-drafter: n-gram first, a drafter the model has as fallback);
    `kind` forces one (a multi-drafter turns the scenario's drafter into the n-gram one)."""
    if kind == "multi_drafter" and raw["speculation"]["method"] != "ngram":
        raw["speculation"]["method"] = "ngram"
        raw["speculation"].pop("draft_model", None)
    if kind == "assistant_heuristic" and raw["speculation"]["verify"] != "chain":
        raw["speculation"].update(verify="chain", tree={"kind": "chain"})
    if kind is None:
        kinds = [k for k in POLICY_KINDS if (k != "multi_drafter" or raw["speculation"]["method"] == "ngram")
                 and (k != "assistant_heuristic" or raw["speculation"]["verify"] == "chain")]
        kind = draw(st.sampled_from(kinds))
    if kind == "hybrid":
        return {"kind": "hybrid", "estimator": draw(st.sampled_from(["ema", "window"])),
                "hysteresis": draw(st.floats(0, 0.5)), "probe_every": draw(st.integers(1, 16))}
    if kind == "adaptive_length":
        return {"kind": "adaptive_length", "choices": draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))}
    if kind == "batch_threshold":
        return {"kind": "batch_threshold", "max_batch": draw(st.integers(1, 4))}
    if kind == "batch_table":
        bounds = sorted(draw(st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True)))
        return {"kind": "batch_table", "table": [{"max_batch": b, "draft_tokens": draw(st.integers(0, 4))} for b in bounds]}
    if kind == "goodput":
        return {"kind": "goodput", "choices": draw(st.lists(st.integers(0, 4), min_size=1, max_size=4, unique=True)),
                "prior_acceptance": draw(probability), "prior_weight": draw(st.floats(0.1, 10.0))}  # 0: see test_robustness
    if kind == "multi_drafter":
        fallbacks = ["eagle3"] + (["mtp"] if raw["model"].get("mtp_layers") else [])
        draft_tokens, verify, tree = draw(verify_shapes())
        return {"kind": "multi_drafter", "min_match_tokens": draw(st.integers(1, 6)),
                "fallback": {"method": draw(st.sampled_from(fallbacks)), "draft_tokens": draft_tokens, "verify": verify,
                             "tree": tree, "acceptance": draw(acceptances(("iid", "positional")))}}
    if kind == "dynamic_length":  # goodput's fields, tiers up to SGLang's default top (7) and one past it
        return {"kind": "dynamic_length", "choices": draw(st.lists(st.integers(0, 8), min_size=1, max_size=4, unique=True)),
                "prior_acceptance": draw(probability), "prior_weight": draw(st.floats(0.0, 10.0)),
                "memory": draw(st.integers(1, 512)),
                "max_graph_tokens": draw(st.one_of(st.none(), st.integers(1, 16)))}
    if kind == "assistant_heuristic":
        return {"kind": "assistant_heuristic", "num_assistant_tokens": draw(st.integers(1, 8)),
                "max_new_tokens": draw(st.integers(2, 64))}
    return {"kind": "static"}


@st.composite
def served_scenarios(draw, max_output: int = MAX_OUTPUT, policy: str | None = None, squeeze: bool | None = None) -> dict:
    """A scenario under load: length distributions, arrivals, a policy (any, or `policy`), and, half the time (or
    as `squeeze` says), every request running at once in a KV cache squeezed to between 1.05 longest requests and all
    of them, all arriving at once, so requests queue for memory or are preempted."""
    raw = draw(scenarios())
    raw["workload"], longest = draw(served_workloads(max_output=max_output))
    raw["policy"] = draw(policies_for(raw, policy))
    if squeeze if squeeze is not None else draw(st.booleans()):
        workload = raw["workload"]
        workload["requests"] = workload["concurrency"] = max(2, workload["requests"])
        workload["arrival"] = {"kind": "all_at_once"}
        raw["runtime"]["memory_fraction"] = squeezed_memory_fraction(raw, longest, draw(st.floats(0.0, 0.2)))
    return raw


def squeezed_memory_fraction(raw: dict, longest: int, squeeze: float) -> float:
    """runtime.memory_fraction leaving KV room for between 1.05 longest requests (+ drafts) and all of them."""
    from simulator.timing.machine import Machine

    machine = Machine(make_scenario(raw))
    memory = machine.memory
    policy = raw.get("policy", {})
    # a policy's longest draft: the server reserves KV for it
    longest_draft = (policy["max_new_tokens"] if policy.get("kind") == "assistant_heuristic" else
                     max(policy["choices"]) if policy.get("kind") in ("goodput", "dynamic_length") else 0)
    lookahead = max(raw.get("speculation", {}).get("draft_tokens", 0), longest_draft) + 8
    need_one = 1.05 * (longest + lookahead)
    need_all = max(need_one, raw["workload"]["requests"] * (longest + lookahead))
    tokens = need_one + squeeze * (need_all - need_one)
    total_GB = raw["topology"]["gpu"]["memory_GB"]
    fraction = (memory["weights_GB"] + tokens * memory["kv_bytes_per_token"] / 1e9) / total_GB
    return min(1.0, fraction * (1 + 1e-9))


def make_scenario(raw: dict):
    """Validate a scenario dict (inline topology and model) into a Scenario; a deep copy, so `raw` may be reused."""
    return build(copy.deepcopy(raw), "<hypothesis>", ".")


def gpu_count(raw: dict) -> int:
    return sum(1 for node in raw["topology"]["fabric"]["nodes"] if node["kind"] == "gpu")


# --- flow sets on small graphs (hardware/flows.py) ------------------------------------------------------------------

CAPACITIES = st.one_of(st.sampled_from([12.5, 24.0, 25.0, 48.0, 50.0, 64.0]), st.floats(1.0, 400.0))


@st.composite
def flow_sets(draw, max_flows: int = 8):
    """A random connected graph of 2-6 nodes (both directions of every edge a link with its own capacity), and
    flows between random node pairs along BFS routes, some with their own limit."""
    n = draw(st.integers(2, 6))
    edges = {(i, draw(st.integers(0, i - 1))) for i in range(1, n)}  # a random tree keeps the graph connected
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=6))
    edges |= {(a, b) for a, b in extra if a != b and (b, a) not in edges}
    capacity = {}
    for a, b in edges:
        capacity[(a, b)] = draw(CAPACITIES)
        capacity[(b, a)] = draw(CAPACITIES)
    flows = []
    for _ in range(draw(st.integers(1, max_flows))):
        src, dst = draw(st.sampled_from([(a, b) for a in range(n) for b in range(n) if a != b]))
        limit = draw(st.one_of(st.none(), CAPACITIES))
        flows.append((_bfs_route(capacity, src, dst), limit))
    return capacity, flows


def _bfs_route(capacity, src, dst):
    previous = {src: None}
    queue = deque([src])
    while queue:
        node = queue.popleft()
        for a, b in sorted(capacity):
            if a == node and b not in previous:
                previous[b] = a
                queue.append(b)
    route, node = [], dst
    while previous[node] is not None:
        route.append((previous[node], node))
        node = previous[node]
    return route[::-1]
