"""Benchmark clients' result files as specsim measurements: `vllm bench serve --save-result` JSON and
`sglang.bench_serving` JSONL, read directly (docs/metrics.md: which figure is which, and how each client computes it).

A file gives the workload it ran (requests, mean prompt and output tokens, request rate, the client's
--max-concurrency) and the client's latency figures. Assumed: every request had the file's mean lengths (the
clients save totals, and per-request lengths only with --save-detailed / --output-details); a finite request rate
is a Poisson process (both clients' default, burstiness 1). The engine's own settings (batch cap, split, drafter)
are the scenario's: a client file does not record them.
"""
from __future__ import annotations

import json
import math
import os

from ..compiled import dataclass
from ..config.errors import ConfigError

# (figure, the client's key, specsim's result metric, unit); `itl` differs between the clients: vLLM keeps one gap
# per streamed chunk, SGLang's native backend splits a chunk's gap evenly over its tokens (docs/metrics.md)
def _figures(itl: str, itl_metric: str, e2e_key: str) -> tuple[tuple[str, str, str, str], ...]:
    """One client's figures: the same TTFT, TPOT and throughput keys, its own ITL definition and E2E key."""
    return (("mean TTFT", "mean_ttft_ms", "load.client.ttft_ms.mean", "ms"),
            ("median TTFT", "median_ttft_ms", "load.client.ttft_ms.median", "ms"),
            ("p99 TTFT", "p99_ttft_ms", "load.client.ttft_ms.p99", "ms"),
            ("mean TPOT", "mean_tpot_ms", "load.client.tpot_ms.mean", "ms"),
            ("median TPOT", "median_tpot_ms", "load.client.tpot_ms.median", "ms"),
            *((f"{stat} ITL ({itl})", f"{stat}_itl_ms", f"load.client.{itl_metric}.{stat}", "ms")
              for stat in ("mean", "median", "p99")),
            ("mean E2E latency", e2e_key, "load.client.e2e_latency_ms.mean", "ms"),
            ("output throughput", "output_throughput", "load.client.output_throughput_tok_s", "tok/s"))


FIGURES = {"vllm": _figures("per chunk", "itl_ms", "mean_e2el_ms"),
           "sglang": _figures("per token", "itl_per_token_ms", "mean_e2e_latency_ms")}
# figures a fit weighs by their standard error: (the client's mean key, its std key, how many values it averages)
FITTED = {"mean_ttft_ms": ("std_ttft_ms", "requests"), "mean_tpot_ms": ("std_tpot_ms", "requests"),
          "mean_itl_ms": ("std_itl_ms", "gaps")}


@dataclass(frozen=True)
class BenchFile:
    path: str
    client: str  # vllm or sglang
    data: dict
    overrides: dict  # the workload the client ran, as dotted scenario overrides

    def figures(self) -> list[tuple[str, float, str, str]]:
        """(name, measured value, specsim metric, unit) of every figure the file holds."""
        return [(name, float(self.data[key]), metric, unit) for name, key, metric, unit in FIGURES[self.client]
                if isinstance(self.data.get(key), (int, float)) and math.isfinite(self.data[key])]

    def measurements(self) -> list[dict]:
        """The fit's figures: the means of TTFT, TPOT and ITL, each with its standard error (std / sqrt(n)); a
        figure without spread (one request's TTFT) cannot be weighed and is left out."""
        out = []
        requests = self.data["completed"]
        gaps = max(1, self.data["total_output_tokens"] - requests)  # decode tokens after the first of each
        for name, key, metric, _ in FIGURES[self.client]:
            if key not in FITTED or not isinstance(self.data.get(key), (int, float)):
                continue
            std_key, count = FITTED[key]
            std = self.data.get(std_key)
            n = requests if count == "requests" else gaps
            if isinstance(std, (int, float)) and std > 0:
                out.append({"name": f"{name} ({self.client}, {os.path.basename(self.path)})", "metric": metric,
                            "value": float(self.data[key]), "sigma": float(std) / math.sqrt(n)})
        return out


def looks_like_bench(path: str) -> bool:
    """A client's result file: JSON or JSONL whose first object has the clients' figures."""
    if not path.endswith((".json", ".jsonl")) or not os.path.isfile(path):
        return False
    try:
        return "mean_ttft_ms" in _objects(path)[-1]
    except (ValueError, IndexError, ConfigError):
        return False


def _objects(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        loaded = json.loads(text)
        objects = loaded if isinstance(loaded, list) else [loaded]
    except json.JSONDecodeError:  # JSONL: --append-result (vLLM) or sglang.bench_serving's output file
        try:
            objects = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ConfigError(path, f"line {exc.lineno}", "neither JSON nor JSON lines",
                              "a vllm bench serve --save-result file or an sglang.bench_serving output file") from None
    if not objects or not all(isinstance(o, dict) for o in objects):
        raise ConfigError(path, "<root>", "no result object", "one JSON object per benchmark run")
    return objects


def read_bench(path: str, run: int = -1) -> BenchFile:
    """One run of a client's result file (the last by default: both clients append)."""
    objects = _objects(path)
    data = objects[run]
    client = "sglang" if "mean_e2e_latency_ms" in data else "vllm" if "mean_e2el_ms" in data or "num_prompts" in data \
        else None
    if client is None:
        raise ConfigError(path, "<root>", "not a vllm bench serve or sglang.bench_serving result",
                          "a file with mean_ttft_ms and mean_e2el_ms (vLLM) or mean_e2e_latency_ms (SGLang)")
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        if not isinstance(data.get(key), int) or data[key] < 1:
            raise ConfigError(path, key, "missing or not a positive whole number", "the client's result keys")
    if data.get("burstiness", 1.0) != 1.0:
        raise ConfigError(path, "burstiness", f"{data['burstiness']} (gamma arrivals) is not modelled",
                          "1.0 (Poisson arrivals)")
    return BenchFile(path, client, data, workload_overrides(data, path))


def workload_overrides(data: dict, path: str) -> dict:
    """The workload of the client's run as scenario overrides."""
    n = data["completed"]
    rate = data.get("request_rate", "inf")
    rate = float("inf") if rate in ("inf", None) else float(rate)
    arrival = {"kind": "all_at_once"} if math.isinf(rate) else {"kind": "poisson", "rate_per_s": rate}
    out = {"workload.requests": n, "workload.prompt_tokens": max(1, round(data["total_input_tokens"] / n)),
           "workload.output_tokens": max(1, round(data["total_output_tokens"] / n)), "workload.arrival": arrival}
    concurrency = data.get("max_concurrency")
    if concurrency is not None:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(path, "max_concurrency", f"{concurrency!r} is not a positive whole number", "null or >= 1")
        out["workload.max_concurrency"] = concurrency
    return out


def evaluate(path: str, scenario_path: str, set_args: list[str] | None = None) -> list:
    """Every figure of a client's result file against one run of the scenario under the file's workload."""
    from ..api.run import resolve, run
    from .calibrate import metric
    from .validate import Case, Outcome, Source

    bench = read_bench(path)
    scenario = resolve(scenario_path, {k.replace(".", "__"): v for k, v in bench.overrides.items()}, set_args)
    result = run(scenario).to_dict()
    engine = {"vllm": "vLLM (vllm bench serve)", "sglang": "SGLang (sglang.bench_serving)"}[bench.client]
    source = Source(id=os.path.splitext(os.path.basename(path))[0], title=f"{engine} result file", where=path,
                    url="", hardware=scenario.topology.name, engine=engine, date=str(bench.data.get("date", "")),
                    organisation="the user")
    shown = ", ".join(f"{k.split('.', 1)[1]}={v if not isinstance(v, dict) else v['kind']}"
                      for k, v in bench.overrides.items())
    return [Outcome(source, Case(name=name, measured=value, unit=unit, metric=key, note=f"workload: {shown}"),
                    metric(result, key, path), path)
            for name, value, key, unit in bench.figures() if value != 0]
