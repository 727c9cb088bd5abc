"""Hypothesis strategies for whole scenarios: machines, model cards, runtimes, speculation, acceptance models.

Every strategy draws plain dicts (what a YAML file holds), so a test can change one field and rebuild the scenario;
`make_scenario` validates a dict into a Scenario with `simulator.config.build`. Shapes are kept small (a few layers,
hidden sizes of a few hundred) so a whole run takes milliseconds.
"""
from __future__ import annotations

import copy
from collections import deque

from hypothesis import strategies as st

from simulator.config import build

# --- machines ----------------------------------------------------------------------------------------------------


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
def topologies(draw, num_gpus: int | None = None, jitter: bool = True) -> dict:
    """A PCIe tree (with or without switches and peer-to-peer) or an NVSwitch board of 1..16 GPUs."""
    n = num_gpus or draw(st.integers(1, 16))
    kind = draw(st.sampled_from(["pcie", "nvswitch"]))
    fabric = draw(pcie_fabrics(n) if kind == "pcie" else nvswitch_fabrics(n))
    return topology(fabric, draw(gpu_specs()), draw(host_specs(jitter)), name=f"gen_{kind}{n}")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# --- model cards ---------------------------------------------------------------------------------------------------


@st.composite
def model_cards(draw, tp: int) -> dict:
    """A small GQA decoder, dense or MoE, whose head count tp divides; with an EAGLE head and maybe an MTP layer."""
    kv_heads = tp * draw(st.sampled_from([1, 2]))
    num_heads = kv_heads * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([32, 64, 128]))
    hidden = draw(st.sampled_from([256, 512, 1024, 2048]))
    num_layers = draw(st.integers(1, 4))
    is_moe = draw(st.booleans())
    card = {
        "name": "gen-moe" if is_moe else "gen-dense",
        "num_layers": num_layers,
        "num_dense_layers": draw(st.integers(0, num_layers - 1)) if is_moe else num_layers,
        "hidden_size": hidden,
        "vocab_size": draw(st.sampled_from([1000, 32000, 128000])),
        "attention": {"kind": "gqa", "num_heads": num_heads, "num_kv_heads": kv_heads, "head_dim": head_dim},
        "dense_intermediate_size": draw(st.sampled_from([512, 1024, 4096])),
        "weights": {"attention": "bf16", "dense_mlp": "bf16", "embedding": "bf16", "lm_head": "bf16"},
        "kernels": {"attention": draw(st.integers(1, 16)), "dense_mlp": draw(st.integers(1, 8)),
                    "moe": draw(st.integers(0, 16)), "per_pass": draw(st.integers(0, 12)),
                    "verify_per_pass": draw(st.integers(0, 20)), "tree_attention": draw(st.integers(0, 8))},
        "mtp_layers": draw(st.integers(0, 1)),
        "draft_head": {"num_layers": 1, "num_heads": num_heads, "num_kv_heads": kv_heads, "head_dim": head_dim,
                       "intermediate_size": 512, "draft_vocab_size": 1000},
    }
    if is_moe:
        experts = draw(st.sampled_from([4, 8, 16, 64]))
        card["moe"] = {"num_experts": experts, "experts_per_token": draw(st.integers(1, min(8, experts))),
                       "num_shared_experts": draw(st.integers(0, 1)),
                       "intermediate_size": draw(st.sampled_from([128, 256, 1024])),
                       "routing_locality": draw(st.floats(0.0, 0.9))}
        if draw(st.booleans()):
            card["weights"].update(experts="int4", quant_group_size=32)
    return card


# --- runtime, speculation, acceptance ------------------------------------------------------------------------------


@st.composite
def runtimes(draw, allreduce=("auto", "nccl", "nccl_ring", "nccl_tree")) -> dict:
    return {"cuda_graph_decode": draw(st.booleans()), "cuda_graph_verify": draw(st.booleans()),
            "cuda_graph_draft": draw(st.booleans()), "allreduce": draw(st.sampled_from(list(allreduce))),
            "fuse_allreduce_rmsnorm": draw(st.booleans()), "overlap_schedule": draw(st.booleans())}


probability = st.floats(0.0, 1.0)
regimes = st.builds(lambda probs, decay: {"probs": probs, "sibling_decay": decay},
                    st.lists(probability, min_size=1, max_size=4), probability)


@st.composite
def acceptances(draw, kinds=("iid", "positional", "bursty")) -> dict:
    kind = draw(st.sampled_from(list(kinds)))
    if kind == "iid":
        return {"kind": "iid", "alpha": draw(probability)}
    if kind == "positional":
        return {"kind": "positional", "probs": draw(st.lists(probability, min_size=1, max_size=6)),
                "sibling_decay": draw(probability), "repeat_last": True}
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
def speculations(draw, card: dict, acceptance=None, methods=("eagle3", "ngram", "mtp")) -> dict:
    allowed = [m for m in methods if m != "mtp" or card.get("mtp_layers")]
    method = draw(st.sampled_from(allowed))
    draft_tokens, verify, tree = draw(verify_shapes())
    return {"method": method, "draft_tokens": draft_tokens, "verify": verify, "tree": tree,
            "acceptance": acceptance if acceptance is not None else draw(acceptances())}


@st.composite
def workloads(draw, max_requests: int = 2) -> dict:
    requests = draw(st.integers(1, max_requests))
    return {"requests": requests, "prompt_tokens": draw(st.integers(1, 2000)),
            "output_tokens": draw(st.integers(64, 512)), "concurrency": draw(st.integers(1, requests))}


@st.composite
def scenarios(draw, jitter: bool = True, speculate: bool = True) -> dict:
    """A whole scenario dict with an inline topology and model card, static policy."""
    topo = draw(topologies(jitter=jitter))
    n = len([x for x in topo["fabric"]["nodes"] if x["kind"] == "gpu"])
    tp = draw(st.sampled_from(divisors(n)))
    card = draw(model_cards(tp))
    raw = {"name": "gen", "topology": topo, "model": card, "parallelism": {"tp": tp}, "runtime": draw(runtimes()),
           "workload": draw(workloads()), "seed": draw(st.integers(0, 2**32 - 1)), "policy": {"kind": "static"}}
    if speculate:
        raw["speculation"] = draw(speculations(card))
    return raw


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
