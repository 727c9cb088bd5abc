"""The recipes of the figures README shows: each runs the shipped scenarios through the Python API with overrides
(one request per run where that is enough; `quick` also shortens the requests and thins the sweeps, for tests) and
draws one figure from simulator/viz/figures.py.
"""
from __future__ import annotations

import os

NVLINK = "nvlink8_h200"  # a shipped topology, by name


def scenario(name: str) -> str:
    """A shipped scenario's file, wherever the package is installed."""
    from ..config.catalog import locate

    return locate(name, "scenario")


class Figures:
    """One method per figure; `short` holds the workload overrides every run shares."""

    def __init__(self, out: str, quick: bool):
        self.out = out
        self.quick = quick
        self.short = {"workload__requests": 1}
        if quick:
            self.short["workload__output_tokens"] = 256

    def run(self, name: str, **overrides):
        from ..api.run import run

        return run(scenario(name), **{**self.short, **overrides})

    def path(self, filename: str) -> str:
        return os.path.join(self.out, filename)

    def breakeven(self) -> str:
        """Speculative step throughput over (accept length, verify ms) on the reference machine, EAGLE-3 marked."""
        import numpy as np

        from .figures import breakeven_map

        r = self.run("pcie8_eagle3")
        verify, step, decode = r.step_ms.verify.mean, r.step_ms.step.mean, r.step_ms.baseline_decode.mean
        overhead = step - verify  # drafting, scheduler and synchronisation around the verify pass
        accept = np.linspace(1.0, 4.5, 36)
        verify_grid = np.linspace(5.0, 40.0, 36)
        throughput = 1e3 * accept[None, :] / (verify_grid[:, None] + overhead)
        return breakeven_map(accept, verify_grid, throughput, 1e3 / decode, point=(r.mean_accept_len, verify),
                             title=f"pcie8_eagle3: step throughput vs plain decode ({decode:.1f} ms per token)",
                             path=self.path("breakeven_pcie8_eagle3.png"))

    def throughput_vs_accept(self) -> str:
        """EAGLE-3 chain of 3 over i.i.d. acceptance, eager vs CUDA-graph verify, PCIe vs NVLink."""
        from .figures import throughput_vs_accept

        alphas = [0.3, 0.6, 0.9] if self.quick else [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
        variants = {"PCIe, eager verify": {}, "PCIe, CUDA-graph verify": {"runtime__cuda_graph_verify": True},
                    "NVLink H200, eager verify": {"topology": NVLINK},
                    "NVLink H200, CUDA-graph verify": {"topology": NVLINK, "runtime__cuda_graph_verify": True}}
        series = {label: [self.run("pcie8_eagle3", speculation__acceptance={"kind": "iid", "alpha": a}, **extra)
                          for a in alphas] for label, extra in variants.items()}
        return throughput_vs_accept(series, title="EAGLE-3 chain of 3, i.i.d. acceptance 0.3 to 0.9",
                                    path=self.path("throughput_vs_accept.png"))

    def pcie_vs_nvlink(self) -> str:
        from .figures import pcie_vs_nvlink

        methods = {"n-gram\ntree": ("pcie8_ngram", "nvlink8_h200_ngram", {}),
                   "EAGLE-3\nchain": ("pcie8_eagle3", "nvlink8_h200_eagle3", {}),
                   "EAGLE-3\ntree": ("pcie8_tree", "nvlink8_h200_tree", {}),
                   "EAGLE-3 chain,\ngraph verify": ("pcie8_eagle3", "nvlink8_h200_eagle3",
                                                    {"runtime__cuda_graph_verify": True})}
        pcie = {label: self.run(p, **extra) for label, (p, _, extra) in methods.items()}
        nvlink = {label: self.run(n, **extra) for label, (_, n, extra) in methods.items()}
        return pcie_vs_nvlink(pcie, nvlink, title="8x RTX PRO 6000 over PCIe vs 8x H200 over NVLink (Kimi-K2.5, TP8)",
                              path=self.path("pcie_vs_nvlink.png"))

    def chain_vs_tree(self, graph: bool) -> str:
        """Chains of 1..6 drafts against optimal trees of 2..16 nodes, the pcie8_tree head's acceptance."""
        from .figures import chain_vs_tree

        acceptance = {"kind": "positional", "probs": [0.75, 0.33, 0.2, 0.15], "sibling_decay": 0.5,
                      "repeat_last": True}
        common = {"speculation__acceptance": acceptance, "runtime__cuda_graph_verify": graph}
        chain_sizes = [1, 3, 6] if self.quick else [1, 2, 3, 4, 5, 6]
        tree_sizes = [2, 8, 16] if self.quick else [2, 4, 6, 8, 12, 16]
        chain = [self.run("pcie8_tree", speculation__verify="chain", speculation__draft_tokens=n, **common)
                 for n in chain_sizes]
        tree = [self.run("pcie8_tree", speculation__tree={"kind": "optimal"}, speculation__draft_tokens=n, **common)
                for n in tree_sizes]
        mode = "CUDA-graph" if graph else "eager"
        return chain_vs_tree(chain, tree, title=f"EAGLE-3 on 8x PCIe, {mode} verify: chain vs optimal tree",
                             path=self.path(f"chain_vs_tree_pcie8_{mode.lower().replace('-', '_')}.png"))

    def breakdown(self) -> str:
        from .figures import breakdown_stack

        return breakdown_stack(self.run("pcie8_eagle3"), title="pcie8_eagle3: where the time goes, per step kind",
                               path=self.path("breakdown_pcie8_eagle3.png"))

    def hybrid(self) -> str:
        from .figures import hybrid_timeline

        from ..api.run import resolve

        name = "pcie8_hybrid_bursty"
        policy = resolve(scenario(name)).spec.policy
        from ..api.run import run

        # the shipped workload, so the title's share and speedup are the figures the README quotes for this run
        r = self.run(name) if self.quick else run(scenario(name))
        return hybrid_timeline(r, ema_alpha=policy.ema_alpha, probe_alpha=policy.probe_alpha,
                               hysteresis=policy.hysteresis, path=self.path("hybrid_pcie8_bursty.png"))

    def tornado(self) -> str:
        """What would make EAGLE-3 pay on the reference machine: one lever at a time, throughput in tok/s."""
        from .figures import tornado

        from ..api.run import resolve

        r = self.run("pcie8_eagle3")
        host = resolve(scenario("pcie8_eagle3")).topology.host
        levers = {
            "CUDA-graph verify": {"runtime__cuda_graph_verify": True},
            "all-reduce fused with RMSNorm": {"runtime__fuse_allreduce_rmsnorm": True},
            "eager launches 2x cheaper": {"topology__host__eager_launch_us": host.eager_launch_us / 2},
            "no host skew between ranks": {"topology__host__rank_skew_cv": 0.0,
                                           "topology__host__launch_jitter_cv": 0.0},
            "drafter +0.1 per depth": {"speculation__acceptance": {"kind": "positional", "probs": [0.85, 0.43, 0.3]}},
            "2 drafts instead of 3": {"speculation__draft_tokens": 2},
            "top-2 tree, 8 drafts": {"speculation__draft_tokens": 8, "speculation__verify": "tree",
                                     "speculation__tree": {"kind": "topk", "k": 2, "depth": 4},
                                     "speculation__acceptance": {"kind": "positional", "probs": [0.75, 0.33, 0.2, 0.15],
                                                                 "sibling_decay": 0.5}},
        }
        values = [(label, self.run("pcie8_eagle3", baseline=False, **extra).throughput_tok_s)
                  for label, extra in levers.items()]
        return tornado(values, r.baseline_tok_s, r.throughput_tok_s, "throughput (tok/s)",
                       "pcie8_eagle3: one lever at a time (red dashed: plain decode)",
                       self.path("tornado_pcie8_eagle3.png"))

    def concurrency(self) -> str:
        """Llama-3.1-8B with EAGLE-3 on an H100: speculation's speedup as the batch grows (issue: load)."""
        from ..api.run import run
        from .figures import speedup_vs_concurrency

        levels = [1, 8, 64] if self.quick else [1, 2, 4, 8, 16, 32, 64]
        extra = {"workload__requests": 32, "workload__output_tokens": 128} if self.quick else {}
        rows = []
        for c in levels:
            r = run(scenario("nvlink8_h100_llama8b_eagle3"), workload__max_running_requests=c, **extra)
            rows.append({"concurrency": c, "throughput_tok_s": r.throughput_tok_s, "baseline_tok_s": r.baseline_tok_s,
                         "speedup": r.speedup, "breakeven_accept_len": r.breakeven_accept_len,
                         "mean_accept_len": r.mean_accept_len})
        return speedup_vs_concurrency(rows, title="Llama-3.1-8B, EAGLE-3 chain of 3, one H100: speedup vs batch",
                                      path=self.path("speedup_vs_concurrency_llama8b_h100.png"))

    def long_generations(self) -> str:
        """Open question 5: n-gram and suffix drafters over 50K generated tokens of chat and code (viz/long_accept.py)."""
        from .long_accept import LONG_TOKENS, WINDOW_TOKENS, accept_over_length, long_runs

        results = long_runs(self.run, self.quick)
        window = 256 if self.quick else WINDOW_TOKENS
        return accept_over_length(results, window, title=f"Kimi-K2.5 on 8x RTX PRO 6000 PCIe: accept length over "
                                  f"{LONG_TOKENS if not self.quick else 1024:,} generated tokens",
                                  path=self.path("accept_over_length_50k.png"))

    def summary(self) -> str:
        from .figures import run_summary

        return run_summary(self.run("pcie8_eagle3"), path=self.path("run_pcie8_eagle3.png"))

    def all(self):
        """(name, callable) for every figure, in the order README shows them."""
        return [("breakeven", self.breakeven), ("throughput_vs_accept", self.throughput_vs_accept),
                ("pcie_vs_nvlink", self.pcie_vs_nvlink), ("chain_vs_tree eager", lambda: self.chain_vs_tree(False)),
                ("chain_vs_tree graph", lambda: self.chain_vs_tree(True)), ("breakdown", self.breakdown),
                ("hybrid", self.hybrid), ("tornado", self.tornado), ("concurrency", self.concurrency),
                ("long generations", self.long_generations),
                ("run summary", self.summary)] + self.deployments()

    def deployments(self):
        """(name, callable) for each deployment question (viz/deployments.py): a figure and its rows as CSV."""
        from .deployments import QUESTIONS, answer

        return [(q.name, lambda q=q: answer(q, self.out, self.quick)) for q in QUESTIONS]
