"""The validation set: its shape (figures, independent sources), its separation from calibration, and its arithmetic."""
from __future__ import annotations

import glob
import os
import re

import pytest

from simulator.analysis import validate as v
from simulator.analysis.calibrate import calibrate
from simulator.config.errors import ConfigError
from conftest import ROOT

VALIDATION = os.path.join(ROOT, "scenarios", "validation")
MEASURED = os.path.join(ROOT, "scenarios", "measured")


@pytest.fixture(scope="module")
def validation_files():
    return [v.load(path) for path in v.files(VALIDATION)]


def test_at_least_25_figures_from_6_independent_sources(validation_files):
    cases = [c for f in validation_files for c in f.cases]
    organisations = {f.source.organisation for f in validation_files}
    assert len(cases) >= 25
    assert len({f.source.id for f in validation_files}) >= 6 and len(organisations) >= 6


def test_every_source_names_title_place_hardware_engine_and_date(validation_files):
    for f in validation_files:
        s = f.source
        assert all(str(x).strip() for x in (s.title, s.where, s.url, s.hardware, s.engine, s.date)), s.id
        assert s.url.startswith("https://")


def test_every_scenario_case_exists_and_no_case_reads_the_calibration_set(validation_files):
    for path, f in zip(v.files(VALIDATION), validation_files):
        for case in f.cases:
            target = case.scenario if case.kind == "scenario" else case.topology
            assert target and os.path.isfile(os.path.join(os.path.dirname(path), target)), (path, case.name)
            assert "measured" not in os.path.normpath(target).split(os.sep)


def test_calibrate_refuses_a_validation_file():
    with pytest.raises(ConfigError, match="validation"):
        calibrate(os.path.join(ROOT, "scenarios", "pcie8_eagle3.yaml"), v.files(VALIDATION)[0],
                  ["topology.host.eager_launch_us"])


def calibrated_parameters(path: str):
    """(line number, key, comment block) of every parameter whose comment says it was calibrated."""
    lines = open(path, encoding="utf-8").read().splitlines()
    param = re.compile(r"^\s*-?\s*\{?([\w.]+):\s*[^#\s].*?#(.*)$")
    for i, line in enumerate(lines):
        m = param.match(line)
        if not m or not re.search(r"\bcalibrated\b", m.group(2), re.IGNORECASE):
            continue
        block = [m.group(2)]
        for follow in lines[i + 1:]:
            if not re.match(r"^\s*#", follow):
                break
            block.append(follow)
        yield i + 1, m.group(1), " ".join(block)


def test_every_calibrated_parameter_names_a_calibration_measurement():
    """A topology or model-card parameter marked calibrated names a file of scenarios/measured/ that exists (or points to the
    parameter or topology that does: "see ...", topologies/X.yaml), and none names the validation set."""
    named = re.compile(r"(?:scenarios/measured|topologies)/[\w./-]+\.yaml")
    found = 0
    for path in glob.glob(os.path.join(ROOT, "topologies", "*.yaml")) + \
            glob.glob(os.path.join(ROOT, "scenarios", "models", "*.yaml")):
        for line, key, block in calibrated_parameters(path):
            found += 1
            assert "scenarios/validation" not in block, (path, line, key)
            refs = named.findall(block)
            assert refs or re.search(r"\bsee [\w.]+", block), (path, line, key)
            assert all(os.path.isfile(os.path.join(ROOT, ref)) for ref in refs), (path, line, key)
    assert found >= 3  # the reference machine's eager launch cost and host-memory step latency, the tree-mask launches


def test_measured_and_validation_sets_share_no_figure(validation_files):
    from simulator.analysis.calibrate import load_measured

    """No figure is in both sets: the same quantity (metric) with the same value. (A value alone is not a figure:
    Spec-Bench's Vicuna-33B PLD speedup, 1.40x, equals the reference n-gram run's accept length, 1.4 tokens.)"""
    validation = {(c.metric, round(c.measured, 6)) for f in validation_files for c in f.cases}
    for path in glob.glob(os.path.join(MEASURED, "*.yaml")):
        measured, _ = load_measured(path)
        assert not {(m.metric, round(m.value, 6)) for m in measured.measurements} & validation, path



def _acceptance(data: dict):
    return ((data.get("speculation") or {}).get("acceptance")) or None


def _same_estimate(used: dict, shipped: dict) -> bool:
    """The same acceptance model; a positional one may use a prefix of the shipped depths (a shorter chain)."""
    if used.get("kind") == shipped.get("kind") == "positional":
        rest = {k: v for k, v in used.items() if k != "probs"}
        return shipped["probs"][:len(used["probs"])] == used["probs"] and \
            all(shipped.get(k) == v for k, v in rest.items() if k != "kind")
    return used == shipped


def test_a_case_without_the_sources_accept_length_runs_a_shipped_estimate(validation_files):
    """A speculative case whose source prints no accept length may not carry an acceptance of its own (one could be
    tuned to the figure): it runs an acceptance model a shipped scenario (scenarios/*.yaml) already uses, a
    published one from the acceptance library (each entry names its source), or none (n-gram / suffix drafters run
    over a corpus's text)."""
    from simulator.config.acceptance_library import entries
    from simulator.config.loader import read_yaml
    from simulator.api.run import resolve

    shipped = [a for path in glob.glob(os.path.join(ROOT, "scenarios", "*.yaml"))
               if (a := _acceptance(read_yaml(path)))]
    library = entries()
    checked = 0
    for path, f in zip(v.files(VALIDATION), validation_files):
        for case in f.cases:
            if case.kind != "scenario" or case.accept_len is not None:
                continue
            target = os.path.join(os.path.dirname(path), case.scenario)
            spec = resolve(target, {k.replace(".", "__"): val for k, val in case.set.items()}).spec
            if spec.speculation.method == "none":
                continue
            used = case.set.get("speculation.acceptance") or _acceptance(read_yaml(target))
            if used is None:  # a model-free drafter run over a corpus's text: nothing to tune (docs/corpora.md)
                assert spec.speculation.method in ("ngram", "suffix") and spec.workload.corpus, (path, case.name)
            elif "library" in used:  # a published acceptance of the drafter (scenarios/acceptance/library.yaml)
                assert used["library"] in library, (path, case.name, used)
            else:
                assert "speculation.acceptance" not in case.set, (path, case.name)
                assert any(_same_estimate(used, a) for a in shipped), (path, case.name, used)
            checked += 1
    assert checked >= 5  # eagle3_sglang_batch.yaml: nine batch sizes on the shipped EAGLE-3 estimate


def test_every_validation_source_is_listed_in_the_sources_doc(validation_files):
    doc = open(os.path.join(ROOT, "docs", "sources.md"), encoding="utf-8").read()
    for f in validation_files:
        assert f"`{f.source.id}`" in doc and f.source.url in doc, f.source.id

@pytest.mark.parametrize("accept_len", [1.0, 1.75, 2.82, 4.34, 5.99])
def test_accept_trace_has_the_published_mean_in_every_window(accept_len):
    trace = v.accept_trace(accept_len)
    assert sum(trace) / len(trace) == pytest.approx(accept_len, abs=0.005)
    assert max(trace) - min(trace) <= 1
    halves = sum(trace[:50]) / 50, sum(trace[50:]) / 50
    assert abs(halves[0] - halves[1]) <= 0.03


def test_collective_cases_and_summary_arithmetic():
    outcomes = v.evaluate(os.path.join(VALIDATION, "nccl_tests_h100_nvls.yaml"))
    assert len(outcomes) == 1
    o = outcomes[0]
    assert o.error == pytest.approx(o.simulated / 480 - 1)
    assert abs(o.error) < 0.10  # nccl-tests#212: ~480 GB/s on 8 x H100
    s = v.summary(outcomes + outcomes)
    assert s["figures"] == 2 and s["sources"] == 1 and s["max_abs_error"] == pytest.approx(abs(o.error))


def test_validate_command_prints_every_case_and_the_errors(capsys):
    from simulator.cli import main

    assert main(["validate", os.path.join(VALIDATION, "nccl_tests_272_h200.yaml"),
                 os.path.join(VALIDATION, "sglang_eagle3_h100.yaml")]) == 0
    out = capsys.readouterr().out
    assert "nccl-tests-272" in out and "sglang-docs-eagle3" in out
    assert "2 figures from 2 sources" in out and "mean absolute error" in out
    assert "  plain decode    1 figures" in out and "  collectives     1 figures" in out and "speculative" not in out


def test_the_summary_groups_cases_by_what_they_test():
    from simulator.analysis.validate import Case, Outcome, Source, summary

    source = Source(id="s", title="t", where="w", url="u", hardware="h", engine="e", date="2026-01", organisation="o")
    cases = [("collective", "time_us", 11.0), ("scenario", "baseline_tok_s", 8.0), ("scenario", "speedup", 13.0),
             ("scenario", "speedup", 7.0)]
    outcomes = [Outcome(source, Case(name="c", measured=10.0, unit="x", kind=kind, metric=metric), simulated, "f")
                for kind, metric, simulated in cases]
    groups = summary(outcomes)["groups"]
    assert groups["collectives"] == {"figures": 1, "mean_abs_error": pytest.approx(0.1), "max_abs_error": pytest.approx(0.1)}
    assert groups["plain decode"]["figures"] == 1 and groups["plain decode"]["max_abs_error"] == pytest.approx(0.2)
    assert groups["speculative"]["figures"] == 2 and groups["speculative"]["mean_abs_error"] == pytest.approx(0.3)


def test_gpt_fast_int4_cases_carry_its_quantize_py_format(validation_files):
    """gpt-fast's int4 (quantize.py at the README's benchmark commit d2c5d82, 2023-11-30) stores per group of 32 weights
    a bf16 scale and a bf16 zero point (`scales_and_zeros`, in_features / 32 x out_features x 2, bfloat16) for every
    linear layer, the output layer included: 0.5 + 4/32 bytes per weight. The format comes from the code, not from a
    fit to the case's figure."""
    from simulator.model.cards import bytes_per_param
    from simulator.api.run import resolve

    path = os.path.join(VALIDATION, "gpt_fast.yaml")
    cases = [c for c in v.load(path).cases if "int4" in c.name]
    assert len(cases) == 3  # 7B and 70B on one GPU, 70B at TP8
    for case in cases:
        scenario = resolve(os.path.join(VALIDATION, case.scenario),
                           {k.replace(".", "__"): value for k, value in case.set.items()})
        weights = scenario.model.weights
        assert (weights.attention, weights.dense_mlp, weights.lm_head) == ("int4",) * 3
        assert bytes_per_param(scenario.model, "int4") == 0.5 + 4 / 32


def test_the_set_covers_what_the_engine_issue_asks(validation_files):
    """Issue 22's validation set: >= 70 figures from >= 15 sources, >= 25 speculative ones covering a chain, a tree,
    an n-gram drafter, MTP and a draft model, >= 10 of them at batch >= 4 (counted from the files, nothing run)."""
    from simulator.api.run import resolve

    cases = [(path, c) for path, f in zip(v.files(VALIDATION), validation_files) for c in f.cases]
    assert len(cases) >= 70 and len({f.source.id for f in validation_files}) >= 15
    kinds, batched, speculative = set(), 0, 0
    for path, case in cases:
        if case.kind != "scenario" or case.metric.startswith("baseline"):
            continue
        spec = resolve(os.path.join(os.path.dirname(path), case.scenario),
                       {k.replace(".", "__"): val for k, val in case.set.items()}).spec
        if spec.speculation.method == "none":
            continue
        speculative += 1
        kinds |= {spec.speculation.method, spec.speculation.verify}
        batched += spec.workload.max_running_requests >= 4
    assert speculative >= 25 and batched >= 10
    assert {"chain", "tree", "ngram", "mtp", "draft_model"} <= kinds


def test_decode_speedup_is_tokens_a_step_over_the_steps_time_ratio():
    """Hand-worked: 1.875 tokens a speculative step of 10 ms against 8 ms plain steps is 1.875 x 8 / 10 = 1.5x; the
    prefill (not in either step) does not enter."""
    result = {"mean_accept_len": 1.875, "step_ms": {"baseline_decode": {"mean": 8.0}, "step": {"mean": 10.0}},
              "speedup": 1.2}
    assert v.decode_speedup(result) == pytest.approx(1.5, rel=1e-12)


def test_the_sglang_deepseek_mtp_statement_is_compared_as_decoding_speed():
    """SGLang's docs state "the decoding speed" gain, and the tool they name (bench_speculative.py) times decode steps
    alone: both cases compare decode steps, not whole runs with a prefill the doc does not state."""
    doc = v.load(os.path.join(VALIDATION, "sglang_docs_deepseek_mtp.yaml"))
    assert [c.metric for c in doc.cases] == ["decode_speedup", "decode_speedup"]
