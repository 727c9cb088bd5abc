"""Calibration: fitting named parameters recovers known values, refuses ill-posed fits, fits the reference."""
from __future__ import annotations

import pytest
import yaml

import simulator
from simulator.analysis.calibrate import calibrate
from simulator.cli import main
from conftest import scenario_path

EAGLE3 = scenario_path("pcie8_eagle3.yaml")
SHORT = {"workload.requests": 1, "workload.output_tokens": 512}
FIGURES = [  # (name, metric, extra overrides for that figure's run)
    ("plain decode step", "step_ms.baseline_decode.mean", {}),
    ("eager verify pass", "step_ms.verify.mean", {}),
    ("all-reduce per verify (profile)", "allreduce_ms_per_pass.verify.profiled_rank", {}),
    ("eager plain decode", "step_ms.decode.mean", {"runtime.cuda_graph_decode": False, "speculation.method": "none"}),
]
TRUE = {"topology.host.eager_launch_us": 15.0, "topology.fabric.shm_hop_latency_us": 1.1}


def measured_file(tmp_path, values: dict) -> str:
    """Figures the simulator itself produces with `values`, written as a measured file (1% uncertainty)."""
    measurements = []
    for name, metric, extra in FIGURES:
        result = simulator.run(EAGLE3, set_args=[f"{k}={v}" for k, v in {**SHORT, **values, **extra}.items()])
        value = simulator.analysis.calibrate.metric(result.to_dict(), metric)
        measurements.append({"name": name, "metric": metric, "value": value, "sigma": 0.01 * value, "set": extra})
    path = tmp_path / "measured.yaml"
    path.write_text(yaml.safe_dump({"scenario": EAGLE3, "set": SHORT, "measurements": measurements}))
    return str(path)


def test_calibration_recovers_perturbed_parameters(tmp_path):
    path = measured_file(tmp_path, TRUE)
    fit = calibrate(EAGLE3, path, list(TRUE))  # starts from the shipped values: 13.0 us and 1.58 us
    for name, value in zip(fit.names, fit.values):
        assert value == pytest.approx(TRUE[name], rel=0.05), (name, value)
    assert all(abs(p - m.value) < 3 * m.sigma for p, m in zip(fit.predicted, fit.measurements))


def test_more_unknowns_than_measurements_is_refused(tmp_path, capsys):
    measured = tmp_path / "m.yaml"
    measured.write_text(yaml.safe_dump({"scenario": EAGLE3, "measurements": [
        {"name": "decode", "metric": "step_ms.baseline_decode.mean", "value": 12.2, "sigma": 0.3}]}))
    code = main(["calibrate", EAGLE3, "--measured", str(measured),
                 "--fit", "topology.host.eager_launch_us,topology.fabric.shm_hop_latency_us"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "underdetermined" in err[-1]


def test_unidentifiable_parameter_is_refused(tmp_path, capsys):
    """Device memory moves no measured timing: the fit cannot say anything about it."""
    measured = tmp_path / "m.yaml"
    measured.write_text(yaml.safe_dump({"scenario": EAGLE3, "set": SHORT, "measurements": [
        {"name": "decode", "metric": "step_ms.baseline_decode.mean", "value": 12.2, "sigma": 0.3},
        {"name": "verify", "metric": "step_ms.verify.mean", "value": 30.0, "sigma": 1.0}]}))
    code = main(["calibrate", EAGLE3, "--measured", str(measured),
                 "--fit", "topology.host.eager_launch_us,topology.gpu.memory_GB"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "unidentifiable" in err[-1] and "memory_GB" in err[-1]


def test_reference_measurements_fit_with_printed_residuals(capsys):
    code = main(["calibrate", EAGLE3, "--measured", scenario_path("measured/reference.yaml"),
                 "--fit", "topology.host.eager_launch_us,topology.fabric.shm_hop_latency_us"])
    out = capsys.readouterr().out
    assert code == 0 and "resid/sigma" in out and "eager verify pass" in out
    fitted = [line for line in out.splitlines() if "eager_launch_us" in line][0].split()
    assert 11.0 < float(fitted[2]) < 15.0  # within PyTorch's 5-20 us per op, near the shipped 12.87


def test_copies_of_the_reference_calibration_are_the_reference_values():
    """A topology whose host or SHM figure says it is taken over from (or calibrated on) the reference machine carries
    the reference topology's current value, so a recalibration cannot leave a stale copy behind."""
    import pathlib

    topologies = pathlib.Path(scenario_path("pcie8_baseline.yaml")).parent.parent / "topologies"
    reference = yaml.safe_load((topologies / "pcie8_rtx_pro_6000.yaml").read_text())
    copies = 0
    for path in sorted(topologies.glob("*.yaml")):
        if path.name == "pcie8_rtx_pro_6000.yaml":
            continue
        for line in path.read_text().splitlines():
            key = line.split(":")[0].strip()
            if key in ("eager_launch_us", "shm_hop_latency_us") and "reference" in line:
                section = "host" if key == "eager_launch_us" else "fabric"
                value = yaml.safe_load(path.read_text())[section][key]
                assert value == reference[section][key], f"{path.name}: {key} {value} != {reference[section][key]}"
                copies += 1
    assert copies >= 7  # four NVLink machines', two two-machine topologies' launch costs and one SHM hop
