"""Write a simulated run as a benchmark client's result file (the keys of vllm bench serve --save-result and of
sglang.bench_serving's output line), for tests and for the shipped test files in tests/data/bench/.

Usage: python tests/bench_writer.py SCENARIO CLIENT OUT [dotted.path=value ...]
"""
from __future__ import annotations

import json
import sys


def client_record(result, client: str, model_id: str = "test") -> dict:
    """The client's keys filled from the run's load.client figures (requests all at once, --max-concurrency)."""
    c, w = result.load["client"], result.run
    done = [r for r in w.requests if r.completed_at is not None]
    total_in, total_out = sum(r.prompt_tokens for r in done), sum(r.generated for r in done)
    duration = total_out / c["output_throughput_tok_s"]
    common = {"request_rate": "inf" if client == "vllm" else float("inf"), "max_concurrency": c["max_concurrency"],
              "duration": duration, "completed": len(done), "total_input_tokens": total_in,
              "total_output_tokens": total_out, "request_throughput": len(done) / duration,
              "output_throughput": total_out / duration}
    stats = {"ttft": c["ttft_ms"], "tpot": c["tpot_ms"],
             "itl": c["itl_ms"] if client == "vllm" else c["itl_per_token_ms"], "e2el": c["e2e_latency_ms"]}
    for name, s in stats.items():
        key = "e2e_latency" if client == "sglang" and name == "e2el" else name
        common.update({f"mean_{key}_ms": s["mean"], f"median_{key}_ms": s["median"], f"std_{key}_ms": s["std"],
                       f"p99_{key}_ms": s["p99"]})
    if client == "vllm":
        return {"date": "20260101-000000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
                "model_id": model_id, "tokenizer_id": model_id, "num_prompts": len(done), "burstiness": 1.0,
                **common, "failed": 0, "request_goodput": None,
                "total_token_throughput": (total_in + total_out) / duration}
    return {"backend": "sglang", "dataset_name": "random", "sharegpt_output_len": None,
            "random_input_len": total_in // len(done), "random_output_len": total_out // len(done),
            "random_range_ratio": 0.0, **common, "total_output_tokens_retokenized": total_out,
            "input_throughput": total_in / duration, "concurrency": c["e2e_latency_ms"]["mean"] * len(done) / 1e3
            / duration, "accept_length": result.mean_accept_len}


def main(argv: list[str]) -> None:
    from simulator.config import parse_override
    from simulator.api.run import run

    scenario, client, out, *overrides = argv
    result = run(scenario, **{k.replace(".", "__"): v for k, v in map(parse_override, overrides)})
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(client_record(result, client)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
