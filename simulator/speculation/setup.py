"""Assembles a scenario's speculation: drafters with their acceptance models and verify trees, and the policy."""
from __future__ import annotations


from ..compiled import dataclass
from ..config.errors import ConfigError
from ..config.typical import typical_context
from .acceptance import AcceptanceModel
from .models import build_acceptance, typical_table
from .drafters import build_drafter
from .policies import build_policy
from .protocols import Drafter, Policy
from .trees import Tree


@dataclass(frozen=True)
class DrafterSlot:
    """A drafter, the acceptance model of its proposals, and the verify tree it drafts by default."""

    method: str
    drafter: Drafter
    acceptance: AcceptanceModel
    tree: Tree


def build_tree(config, draft_tokens: int, verify: str, acceptance: AcceptanceModel, file: str, key: str) -> Tree:
    """The verify tree a speculation config describes (a chain unless verify is tree)."""
    if verify == "chain" or config.kind == "chain":
        return Tree.chain(draft_tokens)
    try:
        if config.kind == "parents":
            if not config.parents:
                raise ConfigError(file, f"{key}.parents", "a parents tree needs its parents list", "e.g. [-1, 0, 0, 1]")
            tree = Tree.from_parents(config.parents)
        elif config.kind == "k_ary":
            depth = config.depth or 1
            nodes = depth + 1 if config.k == 1 else (config.k ** (depth + 1) - 1) // (config.k - 1)
            if nodes != draft_tokens + 1:  # checked before building: a k-ary tree grows exponentially
                drafts = f"{nodes - 1:,}" if nodes < 10**9 else f"about 10^{len(str(nodes - 1)) - 1}"
                raise ConfigError(file, key, f"a {config.k}-ary tree of depth {depth} has {drafts} drafts but "
                                  f"speculation.draft_tokens is {draft_tokens}", "matching k, depth and draft_tokens")
            tree = Tree.k_ary(config.k, depth)
        elif config.kind == "topk":
            depth = config.depth or max(1, draft_tokens // config.k)
            if config.k * depth != draft_tokens:
                raise ConfigError(file, key, f"a top-{config.k} tree of depth {depth} has {config.k * depth} drafts "
                                  f"but speculation.draft_tokens is {draft_tokens}", f"draft_tokens: {config.k * depth}")
            tree = Tree.topk(config.k, depth, typical_table(acceptance, depth))
        else:  # optimal
            if draft_tokens > 64:  # the dynamic program costs O(depth x size^3)
                raise ConfigError(file, "speculation.draft_tokens", f"{draft_tokens} drafts are too many for the "
                                  "optimal tree's dynamic program", "at most 64 with tree kind optimal")
            depth = config.depth or draft_tokens
            tree = Tree.optimal(typical_table(acceptance, depth), draft_tokens + 1, depth)
    except ValueError as exc:
        allowed = {"parents": "a list where node 0 has parent -1 and every other node's parent is an earlier node",
                   "k_ary": "k >= 1 and depth >= 0", "topk": "k >= 1 and depth >= 1",
                   "optimal": "a depth that leaves room for draft_tokens + 1 nodes"}[config.kind]
        raise ConfigError(file, key, str(exc).rstrip("."), allowed) from None
    if tree.num_drafts != draft_tokens:
        raise ConfigError(file, f"{key}", f"this {config.kind} tree has {tree.num_drafts} drafts but "
                          f"speculation.draft_tokens is {draft_tokens}", f"draft_tokens: {tree.num_drafts}")
    return tree


def method_tree(s, acceptance: AcceptanceModel, file: str) -> Tree | None:
    """The verify tree a structural method fixes (lookahead's candidates, EAGLE-2's selection), else None; a head
    method's tree may be no deeper than its heads."""
    from .methods import dynamic_tree, lookahead_tree
    if s.method == "lookahead":
        return lookahead_tree(s.lookahead)
    if s.method == "eagle2":
        d = s.dynamic_tree
        return dynamic_tree(typical_table(acceptance, d.num_steps), d.eagle_topk, d.num_steps, d.num_draft_tokens)
    if s.method in ("medusa", "hydra"):
        tree = build_tree(s.tree, s.draft_tokens, s.verify, acceptance, file, "speculation.tree")
        if tree.depth > s.heads.num_heads:
            raise ConfigError(file, "speculation.heads.num_heads", f"a tree of depth {tree.depth} needs as many "
                              f"heads; {s.heads.num_heads} given", f"num_heads >= {tree.depth} (or a shallower tree)")
        return tree
    return None


def computed_acceptance(spec, file: str) -> AcceptanceModel:
    """A model-free drafter's acceptance, computed over the workload's corpus (speculation/textual.py)."""
    s, work = spec.speculation, spec.workload
    if work.corpus is None:
        raise ConfigError(file, "workload.corpus", f"method {s.method} without speculation.acceptance computes its "
                          "acceptance from text, and the workload names no corpus",
                          "workload.corpus: chat or code (or an acceptance model, e.g. kind: ngram_context)")
    from ..corpora import Corpus
    from .textual import TextAcceptance
    return TextAcceptance(s.method, s.ngram if s.method == "ngram" else s.suffix, Corpus(work.corpus),
                          work.corpus_stream)


@dataclass(frozen=True)
class SpeculationSetup:
    """The drafters (slot 0 the scenario's, slot 1 a multi-drafter policy's fallback) and the policy choosing."""

    slots: list[DrafterSlot]
    policy: Policy

    @property
    def lookahead(self) -> int:
        """The KV cache a request may need beyond its context in one step: the largest verify tree (root included)
        among the drafters' trees and every tree the policy may choose (a dynamic length's longest, not the
        scenario's draft_tokens); 0 without speculation."""
        return max((tree.size for tree in (*(slot.tree for slot in self.slots), *self.policy.trees)), default=0)


def build_speculation(scenario, speculate: bool = True) -> SpeculationSetup:
    spec = scenario.spec
    s = spec.speculation
    base_dir = scenario.base_dir
    file = scenario.source
    if not speculate or s.method == "none":
        return SpeculationSetup([], build_policy(spec.policy, None))
    work = spec.workload
    typical_seen = typical_context(work)  # the mean history of a step
    acceptance = computed_acceptance(spec, file) if s.acceptance is None else \
        build_acceptance(s.acceptance, base_dir, file, typical_seen)
    tree = method_tree(s, acceptance, file) or build_tree(s.tree, s.draft_tokens, s.verify, acceptance, file,
                                                          "speculation.tree")
    slots = [DrafterSlot(s.method, build_drafter(s.method, s, spec.runtime), acceptance, tree)]
    fallback_tree = None
    policy_cfg = spec.policy
    if policy_cfg.kind == "multi_drafter":
        fb = policy_cfg.fallback
        fb_acceptance = build_acceptance(fb.acceptance, base_dir, file, typical_seen)
        fallback_tree = build_tree(fb.tree, fb.draft_tokens, fb.verify, fb_acceptance, file, "policy.fallback.tree")
        slots.append(DrafterSlot(fb.method, build_drafter(fb.method, s, spec.runtime), fb_acceptance, fallback_tree))

    def make_tree(k: int) -> Tree:
        if s.verify == "tree" and s.tree.kind == "optimal":
            return build_tree(s.tree, k, s.verify, acceptance, file, "speculation.tree")
        return Tree.chain(k)

    return SpeculationSetup(slots, build_policy(policy_cfg, tree, make_tree, fallback_tree))
