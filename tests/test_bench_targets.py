"""bench's speed targets: the default benchmark measures each target's figure and prints one line each, holds or
not, from the medians over its runs (measure() replaced by rows of known figures: no run)."""
from __future__ import annotations

import os

import simulator.experiments.bench as bench
from simulator.cli import main as cli_main


def test_the_default_benchmark_prints_every_target(monkeypatch, capsys):
    def measure(scenario, fidelity, tokens, seed, repeats=1, max_work=None):
        # 2 simulated s and 4,000 tokens per run, CPU 1 s / 2 s / 3 s: medians over runs 1x real time (2, 1, 0.67),
        # 2,000 tok per CPU s;
        # tok/s 1,000 against a 5,000 timeouts/s floor: 0.2x
        return bench.BenchRow(scenario, fidelity, 4000, (1000.0,) * 3, (1.0,) * 3, (5000.0,) * 3, (1.0, 2.0, 3.0),
                              (2.0,) * 3, (4000,) * 3)

    monkeypatch.setattr(bench, "measure", measure)
    assert cli_main(["bench"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("target:")]
    assert len(lines) == len(bench.TARGETS)
    by_name = {line.split()[1]: line for line in lines}
    # the first run is the cold one: 2 / 1 s; the later ones' median: (2 / 2 + 2 / 3) / 2 (and 4,000 / CPU s the same way)
    assert by_name["pcie8_eagle3"].endswith("1.00 simulated seconds per CPU second (median; cold first run 2.00, "
                                            "warm later runs 0.83), at least 3.00: DOES NOT HOLD")
    assert by_name["nvlink8_h100_llama8b_eagle3"].endswith(
        "2,000 simulated tokens per CPU second (median; cold first run 4,000, warm later runs 1,667), at least 1,000: "
        "holds")
    assert "(shipped workload): 0.20 x the same-process SimPy floor" in by_name["pcie8_ngram"]
    assert by_name["pcie8_ngram"].endswith("at least 0.25: DOES NOT HOLD")
    assert all(os.sep not in name for name in by_name)
