"""A configuration mistake ends with exit status 2 and one line naming file, key path, problem and what is allowed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from simulator.cli import main
from conftest import ROOT, scenario_path

EAGLE3 = scenario_path("pcie8_eagle3.yaml")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_scenario(tmp_path, mutate=None, text: str | None = None) -> str:
    """A copy of pcie8_eagle3 in tmp_path (paths made absolute), optionally mutated."""
    with open(EAGLE3) as handle:
        data = yaml.safe_load(handle)
    data["topology"] = os.path.join(ROOT, "topologies", "pcie8_rtx_pro_6000.yaml")
    data["model"] = os.path.join(ROOT, "scenarios", "models", "kimi_k2_5.yaml")
    if mutate:
        mutate(data)
    path = tmp_path / "scenario.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(data))
    return str(path)


def assert_one_line(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


CASES = [
    # (id, mutate, cli extra args, expected fragments)
    ("unknown key", lambda d: d["runtime"].update(cuda_graph_verfy=True), [],
     ["runtime.cuda_graph_verfy", "unknown key", "allowed: cuda_graph_decode"]),
    ("wrong type", lambda d: d["workload"].update(requests="many"), [], ["workload.requests", "integer"]),
    ("zero draft tokens", lambda d: d["speculation"].update(draft_tokens=0), [],
     ["speculation.draft_tokens", "greater than 0", "allowed: > 0"]),
    ("probability above 1", lambda d: d["speculation"].update(acceptance={"kind": "iid", "alpha": 1.5}), [],
     ["speculation.acceptance", "alpha", "less than or equal to 1"]),
    ("unknown acceptance kind", lambda d: d["speculation"].update(acceptance={"kind": "magic"}), [],
     ["speculation.acceptance", "iid", "positional"]),
    ("tp does not divide gpus", lambda d: d["parallelism"].update(tp=3), [],
     ["parallelism.tp", "does not divide the 8 GPUs", "allowed: 1, 2, 4, 8"]),
    ("unknown topology file", lambda d: d.update(topology="no_such_machine.yaml"), [],
     ["topology", "file not found", "no_such_machine.yaml"]),
    ("missing model key", lambda d: d.pop("model"), [], ["model", "required key is missing"]),
    ("unknown allreduce", lambda d: d["runtime"].update(allreduce="carrier_pigeon"), [],
     ["runtime.allreduce", "allowed:", "nccl_ring"]),
    ("one-shot without P2P", lambda d: d["runtime"].update(allreduce="one_shot"), [],
     ["runtime.allreduce", "peer-to-peer"]),
    ("negative bandwidth via --set", None, ["--set", "topology.gpu.memory_bandwidth_GBps=-5"],
     ["pcie8_rtx_pro_6000.yaml", "gpu.memory_bandwidth_GBps", "greater than or equal to 0.001"]),
    ("zero GPUs via --set", None, ["--set", "topology.fabric.nodes=[{name: cpu0, kind: cpu}]", "--set",
                                   "topology.fabric.links=[]"], ["fabric", "zero GPUs"]),
    ("tp does not divide heads", None, ["--set", "model.attention.num_heads=12"],
     ["parallelism.tp", "12 attention heads"]),
    ("unknown engine", lambda d: d.update(engine={"name": "tgi", "version": "3.0"}), [],
     ["engine", "tgi", "sglang"]),
    ("engine version without a profile", None, ["--set", "engine.version=0.1.0"],
     ["engine.version", "no sglang profile for version '0.1.0'", "0.5.9"]),
    ("engine flag of another engine", lambda d: d.update(engine={"name": "vllm", "version": "0.8.5",
                                                                 "cuda_graph_max_bs": 8}), [],
     ["engine", "cuda_graph_max_bs", "unknown key"]),
    ("bad --set syntax", None, ["--set", "speculation.draft_tokens"], ["--set", "dotted.path=value"]),
    # runtime.speculative_host's inputs of the EAGLE tree path (engines/sglang/0.4.4.post2.yaml)
    ("tree mask bytes above the bound", None, ["--set", "runtime.speculative_host.tree_mask_bytes_per_entry=100"],
     ["pcie8_eagle3.yaml", "runtime.speculative_host.tree_mask_bytes_per_entry", "less than or equal to 64",
      "allowed: <= 64"]),
    ("negative step host time", None, ["--set", "runtime.speculative_host.step_host_us=-1"],
     ["runtime.speculative_host.step_host_us", "greater than or equal to 0", "allowed: >= 0"]),
    ("fractional ops behind the draft graph", None,
     ["--set", "runtime.speculative_host.eager_ops_behind_draft_graph=2.5"],
     ["runtime.speculative_host.eager_ops_behind_draft_graph", "valid integer", "allowed: int"]),
    ("zero point on fp4", None, ["--set", "model.weights.experts=fp4", "--set", "model.weights.quant_zero_point=true"],
     ["kimi_k2_5.yaml", "weights", "quant_zero_point is for int4 groups", "allowed: false"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_config_mistake_is_one_line_exit_2(tmp_path, capsys, case):
    _, mutate, extra, fragments = case
    path = write_scenario(tmp_path, mutate) if mutate else EAGLE3
    code, out, err = run_cli(capsys, path, *extra)
    assert code == 2
    assert out == ""
    assert_one_line(err, *fragments)


def test_bad_yaml_syntax(tmp_path, capsys):
    path = write_scenario(tmp_path, text="name: x\nruntime: {cuda_graph_decode: true\n")
    code, _, err = run_cli(capsys, path)
    assert code == 2
    assert_one_line(err, str(path), "YAML syntax error", "line")


def test_missing_scenario_file(capsys):
    code, _, err = run_cli(capsys, "does/not/exist.yaml")
    assert code == 2
    assert_one_line(err, "file not found")


def test_topology_file_error_names_that_file(tmp_path, capsys):
    topo = tmp_path / "topo.yaml"
    with open(os.path.join(ROOT, "topologies", "pcie8_rtx_pro_6000.yaml")) as handle:
        data = yaml.safe_load(handle)
    data["fabric"]["links"][0]["bandwidth_GBps"] = -1
    topo.write_text(yaml.safe_dump(data))
    path = write_scenario(tmp_path, lambda d: d.update(topology=str(topo)))
    code, _, err = run_cli(capsys, path)
    assert code == 2
    assert_one_line(err, str(topo), "fabric.links[0].bandwidth_GBps")


def test_unknown_command(capsys):
    code, _, err = run_cli(capsys, "frobnicate")
    assert code == 2
    assert_one_line(err, "unknown command")


def test_real_process_exit_status():
    """The installed entry point really exits 2 with one line on stderr (not a traceback)."""
    proc = subprocess.run([sys.executable, "-m", "simulator", EAGLE3, "--set", "parallelism.tp=5"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "parallelism.tp")


@pytest.mark.parametrize("overrides", [
    {"topology.host.eager_launch_us": 7.5, "topology.gpu.memory_bandwidth_GBps": 1500},
    {"model.num_layers": 40},
    {"topology.fabric.shm_hop_latency_us": 2.0, "model.hidden_size": 4096},
])
def test_overriding_machine_parts_alone_gives_what_a_rebuild_gives(overrides):
    """Overrides that reach only into the topology or the model card validate those parts again and keep the
    rest (a sweep over machines): the same scenario as rebuilding the whole document (forced here by also setting
    the seed to its own value), and the same one-line error for a bad value."""
    from simulator.config import load_scenario
    from simulator.config.errors import ConfigError

    base = load_scenario(scenario_path("pcie8_ngram.yaml"))
    fast = base.with_overrides(overrides)
    assert fast == base.with_overrides({**overrides, "seed": base.spec.seed})
    assert fast.overrides == tuple(overrides.items()) and fast.files == base.files
    bad = {**overrides, "topology.host.eager_launch_us": -1.0}
    errors = []
    for attempt in (bad, {**bad, "seed": base.spec.seed}):
        with pytest.raises(ConfigError) as caught:
            base.with_overrides(attempt)
        errors.append(caught.value.line())
    assert errors[0] == errors[1] and "eager_launch_us" in errors[0]


_BOTH_PARTS_BAD = """
from simulator.config import load_scenario
from simulator.config.errors import ConfigError
base = load_scenario({path!r})
bad = {{"model.num_layers": 0, "topology.host.eager_launch_us": -1.0}}
for attempt in (bad, {{**bad, "seed": base.spec.seed}}):
    try:
        base.with_overrides(attempt)
    except ConfigError as exc:
        print(exc.line())
"""


@pytest.mark.parametrize("hash_seed", ["0", "3"])
def test_overrides_bad_in_both_parts_report_what_a_rebuild_reports(hash_seed):
    """Bad values in both the topology and the model card: the fast path names the topology's, as a rebuild does
    (build() validates the topology first), whatever order Python's string hashing gives a set of the parts (a
    fresh process per hash seed: 0 and 3 put the parts in either order)."""
    code = _BOTH_PARTS_BAD.format(path=scenario_path("pcie8_ngram.yaml"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": ROOT})
    fast, slow = proc.stdout.splitlines()
    assert fast == slow and "(topology): host.eager_launch_us" in fast, proc.stderr


def test_overriding_a_whole_part_through_a_trailing_dot_loads_it_as_a_rebuild_does():
    """'topology.' names the whole topology (split_path drops the empty key): a file or shipped name to load, as
    the whole document's rebuild loads it, not a mapping to validate in place."""
    from simulator.config import load_scenario

    base = load_scenario(scenario_path("pcie8_ngram.yaml"))
    assert base.with_overrides({"topology.": "nvlink8_h200"}) == base.with_overrides(
        {"topology.": "nvlink8_h200", "seed": base.spec.seed})


def test_a_topology_replaced_whole_is_loaded_as_such_not_a_what_if_of_the_one_before():
    """A sweep over topology files (with_overrides of `topology`) runs the new file's GPU as loaded, as --set does:
    not a what-if of the replaced topology's GPU (whose roofline would rescale the new GPU's measured kernels)."""
    from simulator.config import load_scenario

    path, h200 = scenario_path("nvlink8_h100_llama8b_eagle3.yaml"), os.path.join(ROOT, "topologies", "nvlink8_h200.yaml")
    base = load_scenario(path)
    swept = base.with_overrides({"topology": h200})
    assert swept.gpu_as_loaded is None and swept == load_scenario(path, [("topology", h200)])
    # after a what-if of the replaced GPU too
    what_if = base.with_overrides({"topology.gpu.memory_bandwidth_GBps": 1000})
    assert what_if.gpu_as_loaded == base.topology.gpu
    assert what_if.with_overrides({"topology": h200}) == swept
    # a new file and a key inside it in one call (a sweep with a topology axis and a topology.gpu.* axis), as --set
    both = [("topology", h200), ("topology.gpu.memory_bandwidth_GBps", 9600)]
    at_once = base.with_overrides(dict(both))
    assert at_once == load_scenario(path, both) and at_once.topology.name == swept.topology.name
    assert at_once.gpu_as_loaded is not None and at_once.gpu_as_loaded.memory_bandwidth_GBps == 4800


def test_a_what_if_gpu_is_the_same_whether_its_overrides_come_at_once_or_one_by_one():
    """gpu_as_loaded holds what the measured kernel times depend on (the physical fields as loaded): an efficiency
    set in an earlier call (a sweep's `set`) and the bandwidth in a later one (its axis) give the scenario that --set
    gives for both, the same machine key."""
    from simulator.config import load_scenario

    path = scenario_path("nvlink8_h100_llama8b_eagle3.yaml")
    eff, bw = ("topology.gpu.memory_efficiency", 0.7), ("topology.gpu.memory_bandwidth_GBps", 1000)
    together = load_scenario(path, [eff, bw])
    assert together.gpu_as_loaded is not None
    assert load_scenario(path, [eff]).with_overrides(dict([bw])) == together
    base = load_scenario(path)
    assert base.with_overrides(dict([eff])).with_overrides(dict([bw, ("seed", base.spec.seed)])) == together


def test_a_stated_read_bandwidth_scales_the_data_sheet_figure_once_however_it_comes():
    """A board's measured read peak stated away from the topology's (a power-limited A100) runs the data-sheet
    bandwidth scaled by their ratio, a what-if of the loaded GPU; the same through --set, one call after another,
    and a second statement (from the first's board, not compounded); a stated data-sheet figure wins."""
    from simulator.config import load_scenario

    path = os.path.join(ROOT, "scenarios", "validation", "cases", "a100_llama2_decode.yaml")
    base = load_scenario(path)
    loaded = base.topology.gpu
    read = ("topology.gpu.read_bandwidth_GBps", loaded.read_bandwidth_GBps / 2)
    board = load_scenario(path, [read])
    assert board.topology.gpu.memory_bandwidth_GBps == loaded.memory_bandwidth_GBps / 2
    assert board.gpu_as_loaded.memory_bandwidth_GBps == loaded.memory_bandwidth_GBps  # the measured kernels' GPU
    assert base.with_overrides(dict([read])) == board
    quarter = board.with_overrides({"topology.gpu.read_bandwidth_GBps": loaded.read_bandwidth_GBps / 4})
    assert quarter.topology.gpu.memory_bandwidth_GBps == loaded.memory_bandwidth_GBps / 4
    both = load_scenario(path, [read, ("topology.gpu.memory_bandwidth_GBps", 1000)])
    assert both.topology.gpu.memory_bandwidth_GBps == 1000


SGLANG_CASE = "validation/cases/h100x8_llama70b_sglang_mtbench.yaml"


def broken_sglang_profile(tmp_path, monkeypatch, old: str, new: str):
    """The shipped sglang 0.4.4.post2 profile with its one `old` text made `new`, written under tmp_path and loaded
    in its place for this test; returns the broken file's path."""
    import simulator.config.engine_profile as engine_profile

    shipped = engine_profile.profile_path("sglang", "0.4.4.post2")
    with open(shipped, encoding="utf-8") as handle:
        text = handle.read()
    assert text.count(old) == 1
    broken = tmp_path / "0.4.4.post2.yaml"
    broken.write_text(text.replace(old, new))
    original = engine_profile.profile_path
    monkeypatch.setattr(engine_profile, "profile_path", lambda name, version: str(broken) if (
        name, version) == ("sglang", "0.4.4.post2") else original(name, version))
    return broken


def test_an_engine_profiles_host_input_out_of_bounds_is_one_line_naming_the_profile(tmp_path, capsys, monkeypatch):
    """An engine profile's speculative_host value outside what the runtime allows (tree_mask_bytes_per_entry <= 64)
    is the profile file's mistake: one line naming that file and the key, exit 2 (not an internal error)."""
    broken = broken_sglang_profile(tmp_path, monkeypatch, "      value: 2.375\n", "      value: 100\n")
    case = scenario_path(SGLANG_CASE)
    code, out, err = run_cli(capsys, case, "--set", "workload.requests=1")
    assert code == 2 and out == ""
    assert_one_line(err, str(broken), "speculative_host.default.tree_mask_bytes_per_entry", "less than or equal to 64",
                    "allowed: <= 64")


def test_an_engine_profiles_runtime_value_out_of_bounds_names_the_profile_not_the_scenario(tmp_path, capsys,
                                                                                           monkeypatch):
    """Any runtime value the profile gives (here scheduler_step_us, >= 0) outside the runtime's bounds is the profile
    file's mistake: one line naming that file, exit 2; a scenario's own runtime value stays the scenario's."""
    broken = broken_sglang_profile(tmp_path, monkeypatch, "scheduler_step_us:\n  value: null\n",
                                   "scheduler_step_us:\n  value: -5.0\n")
    case = scenario_path(SGLANG_CASE)
    code, out, err = run_cli(capsys, case, "--set", "workload.requests=1")
    assert code == 2 and out == ""
    assert_one_line(err, str(broken), "runtime.scheduler_step_us", "from this engine profile", "allowed: >= 0")
    code, out, err = run_cli(capsys, case, "--set", "workload.requests=1", "--set", "runtime.step_eager_ops=-1")
    assert code == 2 and out == ""
    assert_one_line(err, case, "runtime.step_eager_ops")
    assert str(broken) not in err
