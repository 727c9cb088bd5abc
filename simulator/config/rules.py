"""The configuration's cross-field rules as plain functions of a model's values: the pydantic models run them as
their validators and the plain-class mirror (config/mirror.py) runs the same functions, so a rule cannot differ
between the two. Each takes the built object, raises ValueError with the user's message, and returns it."""
from __future__ import annotations

OLD_NAMES = {"concurrency": "max_running_requests"}  # workload keys renamed, old -> new (old files keep loading)


def renamed_concurrency(data, where: str):
    """A workload mapping with its old keys under their new names; both an old key and its new one: an error."""
    if not isinstance(data, dict) or not any(old in data for old in OLD_NAMES):
        return data
    data = dict(data)
    for old, new in OLD_NAMES.items():
        if old in data:
            if new in data:
                raise ValueError(f"{where}.{old} is the old name of {where}.{new}: give only {new}")
            data[new] = data.pop(old)
    return data


def workload_old_names(data):
    """`concurrency` was this key's name before the client's concurrency (max_concurrency) was modelled."""
    return renamed_concurrency(data, "workload")


def fabric_graph(self):
    """Unique node names; links between two different known nodes; at least one GPU; the machines' rules."""
    names = [n.name for n in self.nodes]
    if len(set(names)) != len(names):
        raise ValueError("node names must be unique")
    known = set(names)
    for link in self.links:
        for end in link.between:
            if end not in known:
                raise ValueError(f"link end {end!r} is not a node name")
        if link.between[0] == link.between[1]:
            raise ValueError(f"link joins {link.between[0]!r} to itself")
        if link.burst_bytes > 0 and (link.burst_GBps is None or link.burst_GBps < link.bandwidth_GBps):
            raise ValueError(f"link {link.between[0]}-{link.between[1]}: burst_bytes needs burst_GBps, at least "
                             f"its bandwidth_GBps ({link.bandwidth_GBps})")
    if not any(n.kind == "gpu" for n in self.nodes):
        raise ValueError("the fabric has no node of kind gpu (zero GPUs)")
    _check_machines(self)
    return self


def _check_machines(fabric) -> None:
    """Machines are joined only by network links, which start at a NIC; every node but a switch names its machine
    once any does."""
    nodes = {n.name: n for n in fabric.nodes}
    spans = any(n.machine is not None for n in fabric.nodes) or any(n.kind == "switch" for n in fabric.nodes)
    for node in fabric.nodes:
        if node.kind == "switch" and node.machine is not None:
            raise ValueError(f"node {node.name!r}: a network switch sits between machines, not in {node.machine!r}")
        if spans and node.kind != "switch" and node.machine is None:
            raise ValueError(f"node {node.name!r} names no machine, but the topology spans machines")
    for link in fabric.links:
        a, b = (nodes[end] for end in link.between)
        if link.kind == "network":
            if {a.kind, b.kind} - {"nic", "switch"}:
                raise ValueError(f"network link {a.name}-{b.name} must join nics and switches (a leaf to a spine)")
            if fabric.network is None:
                raise ValueError("network links need fabric.network (transport, gpudirect_rdma)")
        elif a.machine != b.machine or "switch" in (a.kind, b.kind):
            raise ValueError(f"{link.kind} link {a.name}-{b.name} joins two machines; only network links do")


def dynamic_tree_candidates(self):
    if self.num_draft_tokens - 1 > self.eagle_topk * self.num_steps:
        raise ValueError(f"{self.eagle_topk} x {self.num_steps} draft candidates cannot fill num_draft_tokens "
                         f"{self.num_draft_tokens}; allowed: num_draft_tokens <= eagle_topk x num_steps + 1")
    return self


def gqa_groups(self):
    if self.num_heads % self.num_kv_heads:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    return self


def moe_top_k(self):
    if self.experts_per_token > self.num_experts:
        raise ValueError("experts_per_token exceeds num_experts")
    groups, chosen = self.num_expert_groups, self.groups_per_token
    if self.num_experts % groups or chosen > groups:
        raise ValueError(f"num_expert_groups {groups} must divide num_experts {self.num_experts} and be at least "
                         f"groups_per_token {chosen}")
    size = self.num_experts // groups
    if self.experts_per_token > chosen * size:
        raise ValueError(f"groups_per_token {chosen} of {size} experts each cannot hold experts_per_token "
                         f"{self.experts_per_token}")
    if groups > 1 and self.group_score == "top2_sum" and size < 2:
        raise ValueError(f"group_score top2_sum needs 2 experts a group, num_expert_groups {groups} leaves {size}; "
                         "allowed: max")
    return self


def weights_zero_point(self):
    stored = {self.attention, self.dense_mlp, self.experts, self.shared_experts, self.router, self.embedding,
              self.lm_head} | ({self.mtp} if self.mtp else set())
    if self.quant_zero_point and ("fp4" in stored or "int4" not in stored):
        raise ValueError(f"quant_zero_point is for int4 groups; these weights are {', '.join(sorted(stored))} (a "
                         "float format's groups carry a scale only); allowed: false, or int4 weights without fp4")
    return self


def card_layers(self):
    if self.num_dense_layers > self.num_layers:
        raise ValueError("num_dense_layers exceeds num_layers")
    if self.num_dense_layers < self.num_layers and self.moe is None:
        raise ValueError("layers past num_dense_layers need a moe block")
    return self


def table_sorted(self):
    bounds = [row.max_batch for row in self.table]
    if bounds != sorted(bounds):
        raise ValueError("table rows must be sorted by max_batch")
    return self


def choices_non_negative(self):
    if any(c < 0 for c in self.choices):
        raise ValueError("draft lengths must be >= 0")
    return self


def ngram_windows(self):
    if not self.min_match_window <= self.max_match_window < self.branch_length:
        raise ValueError("need min_match_window <= max_match_window < branch_length")
    if self.min_bfs_breadth > self.max_bfs_breadth or self.prompt_lookup_min > self.prompt_lookup_max:
        raise ValueError("need min_bfs_breadth <= max_bfs_breadth and prompt_lookup_min <= prompt_lookup_max")
    return self


def speculation_consistent(self):
    if self.method not in ("none", "ngram", "suffix") and self.acceptance is None:
        raise ValueError("a speculation method needs an acceptance model (ngram and suffix compute theirs from "
                         "workload.corpus)")
    if self.method == "draft_model" and self.draft_model is None:
        raise ValueError("method draft_model needs speculation.draft_model.model")
    _speculation_structure(self)
    return self


def _speculation_structure(self):
    """Methods whose verify shape follows from their own settings: draft_tokens must match them."""
    la, dt = self.lookahead, self.dynamic_tree
    need = {"lookahead": (la.guesses * (la.ngram - 1), "lookahead.guesses x (lookahead.ngram - 1)"),
            "eagle2": (dt.num_draft_tokens - 1, "dynamic_tree.num_draft_tokens - 1")}.get(self.method)
    if need is not None and self.draft_tokens != need[0]:
        raise ValueError(f"method {self.method} verifies {need[1]} = {need[0]} drafts; draft_tokens is "
                         f"{self.draft_tokens}; allowed: draft_tokens: {need[0]}")
    if self.method in ("lookahead", "eagle2") and self.verify != "tree":
        raise ValueError(f"method {self.method} verifies a token tree; allowed: verify: tree")


def uniform_order(self):
    if self.high < self.low:
        raise ValueError("high is below low")
    return self


def engine_profile_default(self):
    if "default" not in self.speculative_host:
        raise ValueError("speculative_host needs a `default` entry (a model drafter's step)")
    return self


MAX_SPAN_S = 1e8  # simulated seconds a workload may span: float64 microseconds stay finer than 1 us below ~9e9 s


def workload_span(self):
    rate = getattr(self.arrival, "rate_per_s", None)
    if rate is not None and self.requests / rate > MAX_SPAN_S:
        raise ValueError(f"{self.requests} requests at {rate:g} per second arrive over {self.requests / rate:.3g} "
                         f"s, more than {MAX_SPAN_S:.0e} s (simulated microseconds lose their resolution beyond)")
    return self
