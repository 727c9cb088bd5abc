"""The house: every import inside the package points down the layers, never up.

cache / compiled / config / importers / corpora -> hardware / model / kernels / speculation -> timing (what a pass and a
step cost) -> serving (the processes: the serving loop, admission, requests, router, deployment, KV transfer, the event
fidelity's ranks) -> results (figures from a run's records) -> api (simulator.run and its figure table) -> analysis /
experiments / viz -> cli; the one store (cache), dataclasses compiled once (compiled), outside files -> configuration
(importers) and shipped token streams (corpora) sit beside config. A module may import its own layer or any lower one;
anything else is a wrong-way arrow and fails here. docs/design.md names the same layers in the same order (checked
below).
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "simulator"
LAYERS = {"cache": 0, "compiled": 0, "config": 0, "importers": 0, "corpora": 0, "hardware": 1, "model": 1, "kernels": 1,
          "speculation": 1, "timing": 2, "serving": 3, "results": 4, "api": 5,
          "analysis": 6, "experiments": 6, "viz": 6, "cli": 7}
TOP = 8  # simulator/__init__.py and __main__.py: the public face may import anything


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in ("__init__", "__main__"):
        return TOP
    if parts[1] not in LAYERS:
        raise AssertionError(f"{module}: module outside the layered folders (allowed: {sorted(LAYERS)})")
    return LAYERS[parts[1]]


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import of a simulator module in the file, nested imports included."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("simulator"):
                if target.count(".") == 0:  # from simulator import x / from . import x: the names are modules
                    found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
                else:
                    found.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names if alias.name.startswith("simulator"))
    return found


def package_files() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_top_level_holds_only_folders():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == [], f"modules at the package's top level (each belongs in a folder): {loose}"


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_wrong_way_import(path):
    own = layer_of(module_name(path))
    for line, target in imports_of(path):
        if target.split(".")[-1] in ("__init__",):
            continue
        assert layer_of(target) <= own, f"{path.relative_to(PACKAGE)}:{line} imports {target} from a higher layer"


def test_the_walker_sees_a_wrong_way_arrow(tmp_path):
    """The check can fail: a timing module importing the serving loop is caught."""
    bad = PACKAGE / "timing" / "_probe_wrong_way.py"
    bad.write_text("from ..serving.simulate import simulate\n")
    try:
        (target,) = [t for _, t in imports_of(bad)]
        assert target == "simulator.serving.simulate"
        assert layer_of(target) > layer_of(module_name(bad))
    finally:
        bad.unlink()


# What results may read of the serving layer: the step log's named records, and the entry points of a whole run
# (a deployment's simulation and its start check, the arrivals file, the hook a progress bar polls); never the
# serving loop's parts (server, admission, router, walks, the event fidelity's ranks and steps).
RESULTS_READ_OF_SERVING = {"simulator.serving.records", "simulator.serving.deployment", "simulator.serving.requests",
                           "simulator.serving.simulate"}


def serving_internals(path: pathlib.Path) -> list[str]:
    return [f"{path.relative_to(PACKAGE)}:{line} imports {target}" for line, target in imports_of(path)
            if target.startswith("simulator.serving") and target not in RESULTS_READ_OF_SERVING]


def test_results_read_serving_only_through_its_records_and_entry_points():
    found = [hit for path in sorted((PACKAGE / "results").rglob("*.py")) for hit in serving_internals(path)]
    assert found == [], found


def test_the_walker_sees_results_reaching_into_the_serving_loop():
    bad = PACKAGE / "results" / "_probe_internal.py"
    bad.write_text("from ..serving.server import Server\n")
    try:
        assert serving_internals(bad) == ["results/_probe_internal.py:1 imports simulator.serving.server"]
    finally:
        bad.unlink()


DESIGN = PACKAGE.parent / "docs" / "design.md"


def documented_layers(text: str) -> dict[str, int]:
    """The layers design.md's import line names ("a / b -> c -> ..." after "Imports point one way"): folder -> rank."""
    block = re.search(r"Imports point one way[^\n]*\n(?:[^\n]*\n)*?\n((?: {4}[^\n]*\n)+)", text)
    assert block, "docs/design.md: no indented import line after 'Imports point one way'"
    line = " ".join(block.group(1).split())
    return {name.strip(): rank for rank, group in enumerate(line.split("->")) for name in group.split("/")}


def test_design_md_names_the_layers_this_test_enforces():
    assert documented_layers(DESIGN.read_text()) == LAYERS


def test_the_design_check_sees_a_missing_or_misplaced_layer():
    good = "Imports point one way:\n\n    a / b -> c\n    -> d\n\nmore\n"
    assert documented_layers(good) == {"a": 0, "b": 0, "c": 1, "d": 2}
    assert documented_layers(good.replace("a / b", "a")) != {"a": 0, "b": 0, "c": 1, "d": 2}
    assert documented_layers(good.replace("-> c", "/ c")) != {"a": 0, "b": 0, "c": 1, "d": 2}
