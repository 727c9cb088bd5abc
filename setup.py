"""Package layout for setuptools (metadata is in pyproject.toml).

The shipped topologies, scenarios (model cards, measurements and example scenarios included) and engine profiles
stay at the repository's top level, where users and the README find them, and are installed as the packages
simulator.data.topologies, simulator.data.scenarios[.*] and simulator.data.engines.*; simulator.config.catalog looks
in both places.
"""
import os

from setuptools import find_namespace_packages, setup

DATA = {"topologies": "simulator.data.topologies", "scenarios": "simulator.data.scenarios",
        "engines": "simulator.data.engines"}
DATA_FILES = ["*.yaml", "*.yml", "*.csv", "*.json", "*.md", "*.txt"]

# namespace packages too: a folder such as simulator/results needs no __init__.py to be shipped
packages = find_namespace_packages(include=["simulator", "simulator.*"], exclude=["*.__pycache__", "simulator.data*"])
package_dir = {}
package_data = {"simulator": ["py.typed"], "simulator.corpora": ["data/*.npz"]}
for folder, package in DATA.items():
    package_dir[package] = folder
    for dirpath, dirnames, _ in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        name = package + dirpath[len(folder):].replace(os.sep, ".")
        packages.append(name)
        package_data[name] = DATA_FILES

setup(packages=packages, package_dir=package_dir, package_data=package_data, include_package_data=False)
