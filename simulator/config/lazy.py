"""Names a package exports, imported on first use (PEP 562): `specsim --help` loads no numerics."""
from __future__ import annotations

import importlib
from typing import Callable


def lazy_names(package: str, where: dict[str, str], namespace: dict) -> Callable[[str], object]:
    """A module `__getattr__` that imports `name` from the relative module `where[name]` when first asked for."""
    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name], package), name)
        namespace[name] = value
        return value

    return __getattr__
