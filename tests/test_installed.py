"""A plain (non-editable) install works from anywhere and writes only where the user runs it.

The package is built from a copy of the source (so the checkout gets no build/ folder) with the installed
setuptools and wheel (no network, no build isolation), installed into a target folder, and its console script is
run from an empty directory with only that folder on the path: `specsim run pcie8_ngram`, `specsim list models`,
`specsim plots --out ./figs --quick`. Nothing may appear outside that directory (the package folder and the
checkout are compared before and after; HOME is a fresh folder where only matplotlib's font cache may appear).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

SOURCES = ("pyproject.toml", "setup.py", "README.md", "simulator", "topologies", "scenarios", "engines")


def snapshot(folder: str) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            stat = os.stat(path)
            out[os.path.relpath(path, folder)] = (stat.st_size, stat.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("installed")
    src, site = base / "src", base / "site"
    src.mkdir()
    for name in SOURCES:
        origin = os.path.join(ROOT, name)
        if os.path.isdir(origin):
            shutil.copytree(origin, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(origin, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return base, site


def specsim(base, site, cwd, *argv) -> subprocess.CompletedProcess:
    home = base / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site), "HOME": str(home), "MPLBACKEND": "Agg"}
    script = [sys.executable, str(site / "bin" / "specsim")]
    return subprocess.run(script + list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_wheel_ships_the_data(installed):
    base, site = installed
    data = site / "simulator" / "data"
    assert (data / "topologies" / "pcie8_rtx_pro_6000.yaml").is_file()
    assert (data / "scenarios" / "models" / "kimi_k2_5.yaml").is_file()
    assert (data / "scenarios" / "pcie8_ngram.yaml").is_file() and (site / "simulator" / "py.typed").is_file()
    assert (data / "engines" / "sglang" / "0.5.9.yaml").is_file()
    # every module of the source is installed (a folder without __init__.py included)
    source = {os.path.relpath(os.path.join(d, f), ROOT) for d, _, files in os.walk(os.path.join(ROOT, "simulator"))
              for f in files if f.endswith(".py")}
    shipped = {os.path.relpath(os.path.join(d, f), site) for d, _, files in os.walk(site / "simulator")
               for f in files if f.endswith(".py")}
    assert source <= shipped, sorted(source - shipped)


def test_commands_run_from_an_empty_directory_and_write_only_there(installed, tmp_path):
    base, site = installed
    work = tmp_path / "work"
    work.mkdir()
    before_site, before_repo = snapshot(str(site)), snapshot(os.path.join(ROOT, "plots"))
    which = specsim(base, site, work, "--version")
    assert which.returncode == 0 and which.stdout.startswith("specsim ")
    where = subprocess.run([sys.executable, "-c", "import simulator; print(simulator.__file__)"], cwd=work,
                           env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "")}, capture_output=True,
                           text=True)
    assert where.stdout.strip().startswith(str(site)), where.stdout  # the installed copy, not the checkout

    ran = specsim(base, site, work, "run", "pcie8_ngram")
    assert ran.returncode == 0, ran.stderr
    assert "pcie8_ngram" in ran.stdout and "throughput" in ran.stdout
    models = specsim(base, site, work, "list", "models")
    assert models.returncode == 0 and "kimi_k2_5" in models.stdout
    plots = specsim(base, site, work, "plots", "--out", "./figs", "--quick", "--only", "breakeven")
    assert plots.returncode == 0, plots.stderr

    assert sorted(os.listdir(work)) == ["figs"]
    assert [f for f in os.listdir(work / "figs") if f.endswith(".png")] == ["breakeven_pcie8_eagle3.png"]
    assert snapshot(str(site)) == before_site  # nothing written into the package
    assert snapshot(os.path.join(ROOT, "plots")) == before_repo  # nor into the checkout's figures
    home = base / "home"
    left = {os.path.relpath(os.path.join(d, f), home) for d, _, files in os.walk(home) for f in files}
    assert all(p.startswith((".cache/matplotlib", ".config/matplotlib", ".matplotlib")) for p in left), left


def test_the_imports_run_from_an_empty_directory(installed, tmp_path):
    """import topology / model / command against the installed data, then run what they wrote (docs/imports.md)."""
    base, site = installed
    data = site / "simulator" / "data"
    smi, qwen = data / "topologies" / "nvidia_smi", data / "scenarios" / "models" / "hf" / "qwen3_32b"
    work = tmp_path / "work"
    work.mkdir()
    steps = [["import", "topology", str(smi / "l40s_pcie_4gpu.txt"), "--query", str(smi / "l40s_pcie_4gpu.csv"),
              "-o", "box.yaml"],
             ["import", "model", str(qwen / "config.json"), "-o", "card.yaml"],
             ["import", "command", "--topology", "box.yaml", "-o", "s.yaml", "--", "python", "-m",
              "sglang.launch_server", "--model-path", str(qwen), "--tp", "4", "--speculative-algorithm", "NGRAM",
              "--port", "30000"],
             ["run", "s.yaml", "--set", "workload.requests=1", "--set", "workload.output_tokens=32"]]
    for argv in steps:
        done = specsim(base, site, work, *argv)
        assert done.returncode == 0, (argv[:2], done.stderr)
    assert "--port 30000" in done.stderr or "--port 30000" in (work / "s.yaml").read_text()
    assert "throughput" in done.stdout
    assert sorted(os.listdir(work)) == ["box.yaml", "card.yaml", "s.yaml"]


SHORT = ["--set", "workload.requests=1", "--set", "workload.output_tokens=32", "--set", "workload.prompt_tokens=64"]


def test_plan_and_validate_find_the_shipped_data_from_an_empty_directory(installed, tmp_path):
    """`plan` finds the shipped NVLink board and `validate` the shipped validation set, from any folder."""
    base, site = installed
    work = tmp_path / "empty"
    work.mkdir()
    plan = specsim(base, site, work, "plan", "pcie8_eagle3", *SHORT)
    assert plan.returncode == 0, plan.stderr
    assert "not found" not in plan.stdout and "NVLink board (8x H200)" in plan.stdout
    one = specsim(base, site, work, "validate", "nccl_tests_272_h200")
    assert one.returncode == 0 and "1 figures from 1 sources" in one.stdout, one.stderr
    assert os.listdir(work) == []


def test_pareto_from_an_empty_directory_writes_only_there(installed, tmp_path):
    base, site = installed
    work = tmp_path / "pareto"
    work.mkdir()
    ran = specsim(base, site, work, "pareto", "nvlink8_h100_llama8b_eagle3", "--gpus", "1", "--users", "1",
                  "--prompt-tokens", "64", "--output-tokens", "16", "--workers", "1")
    assert ran.returncode == 0, ran.stderr
    assert "frontier (no speculation)" in ran.stdout
    name = "pareto_nvlink8_h100_llama8b_eagle3"
    written = sorted(f for f in os.listdir(work) if not f.endswith(".lock"))  # the sweep store's lock stays
    assert written == [f"{name}.csv", f"{name}.png", f"{name}.results.csv"]
