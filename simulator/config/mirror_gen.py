"""Writes config/mirror.py, the plain-class mirror of the pydantic configuration models, from the models themselves
(model_fields: names, defaults, annotations, constraints, literal choices, tagged unions; their validators, which
are config/rules.py's functions). `python -m simulator.config.mirror_gen` rewrites it; tests/test_mirror.py fails
when the committed file differs. Anything the generator does not know is an error here, never a silent gap."""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from . import rules, surface
from .base import Strict
from .mirror_annotations import Checks

SURFACES = tuple(n for n in vars(surface) if n.endswith("Surface"))

OUT = os.path.join(os.path.dirname(__file__), "mirror.py")

# field validators the mirror knows, and what it does with the field: "none_only" takes only None (the validator's
# work left to pydantic: Runtime.host_slowdown's rank keys and factors), "no_library" declines a {library: ...}
# mapping (resolved by pydantic's validator from the acceptance library) and checks anything else as the field's type
FIELD_VALIDATORS = {("Runtime", "_rank_numbers"): "none_only", ("Runtime", "_positive_slowdown"): "none_only",
                    ("Speculation", "_library"): "no_library"}
# before-validators of whole models, and the shared function the mirror runs instead (the model's calls it too)
BEFORE = {("Strict", "_no_bool_for_numbers"): None,  # in Plain._load
          ("Workload", "_old_name"): "workload_old_names"}


def models() -> list[type[BaseModel]]:
    """Every Strict model of the configuration package, parents before children, in a fixed order."""
    package = importlib.import_module(__package__)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name not in ("mirror", "mirror_gen", "mirror_annotations"):
            importlib.import_module(f"{__package__}.{info.name}")
    out: list[type[BaseModel]] = []

    def walk(cls):
        for sub in sorted(cls.__subclasses__(), key=lambda c: (c.__module__, c.__qualname__)):
            if sub not in out and sub.__module__.startswith(__package__ + "."):  # not other packages' Strict models
                out.append(sub)
                walk(sub)

    walk(Strict)
    return out


def class_name(cls: type) -> str:
    """A Python name for a model (a parametrised generic Sourced[float] -> Sourced__float)."""
    return re.sub(r"\W+", "_", cls.__name__).strip("_").replace("__", "_") if "[" in cls.__name__ else cls.__name__


class Gen:
    def __init__(self):
        self.models = models()
        self.names = {cls: class_name(cls) for cls in self.models}
        if len(set(self.names.values())) != len(self.names):
            raise ValueError("two models share a mirror name")
        self.checks = Checks(self.names)  # annotations -> checker expressions (config/mirror_annotations.py)

    # -- defaults ----------------------------------------------------------------------------------------------------
    def value(self, value: Any) -> str:
        if isinstance(value, Strict):
            cls = type(value)
            fields = ", ".join(f"{f!r}: {self.value(getattr(value, f))}" for f in cls.model_fields)
            return f"{self.names[cls]}._make({{{fields}}}, {sorted(value.model_fields_set)!r})"
        if type(value) in (list, tuple):
            items = ", ".join(self.value(v) for v in value)
            return f"[{items}]" if type(value) is list else f"({items}{',' if len(value) == 1 else ''})"
        if type(value) is dict:
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in value.items()) + "}"
        if value is None or type(value) in (bool, int, float, str):
            if type(value) is float and value != value:
                raise ValueError("a NaN default")
            return repr(value)
        raise ValueError(f"the mirror does not know the default {value!r}")

    def default(self, info: FieldInfo) -> tuple[str, str]:
        if info.default_factory is not None:
            return "_MISSING", f"lambda: {self.value(info.default_factory())}"
        if info.default is PydanticUndefined:
            return "_MISSING", "None"
        text = self.value(info.default)
        if isinstance(info.default, (list, dict)):  # a fresh one per object, as pydantic copies a mutable default
            return "_MISSING", f"lambda: {text}"
        return text, "None"

    # -- the module --------------------------------------------------------------------------------------------------
    def mixins(self, cls) -> list[str]:
        """The plain mixins (config/surface.py) a model inherits its methods from; any other member is an error."""
        known = set(cls.model_fields) | {"model_config", "_abc_impl"}
        known |= set(cls.__pydantic_decorators__.model_validators) | set(cls.__pydantic_decorators__.field_validators)
        for name, value in vars(cls).items():
            if not (name.startswith("__") or name in known or name.startswith("model_")):
                raise ValueError(f"{cls.__name__}.{name}: a member outside config/surface.py's mixins")
        out = []
        for base in cls.__bases__:
            if base.__module__ == surface.__name__:
                out.append(base.__name__)
            elif not (issubclass(base, BaseModel) or base is typing.Generic or base.__module__ == "typing"):
                raise ValueError(f"{cls.__name__}: a base {base} the mirror does not know")
        return out

    def validators(self, cls) -> tuple[list[str], str | None, dict[str, str]]:
        decorators = cls.__pydantic_decorators__
        after, before = [], None
        for name, dec in decorators.model_validators.items():
            owner = next(c for c in cls.__mro__ if name in c.__dict__).__name__
            if dec.info.mode == "after":
                func = dec.func
                if getattr(func, "__module__", None) != rules.__name__ or getattr(rules, func.__name__) is not func:
                    raise ValueError(f"{cls.__name__}.{name}: an after-validator not in config/rules.py")
                after.append(func.__name__)
            elif (owner, name) in BEFORE:
                if BEFORE[(owner, name)] is not None:
                    before = BEFORE[(owner, name)]
            else:
                raise ValueError(f"{cls.__name__}.{name}: a {dec.info.mode}-validator the mirror does not know")
        fields: dict[str, str] = {}
        for name, dec in decorators.field_validators.items():
            owner = next(c for c in cls.__mro__ if name in c.__dict__).__name__
            what = FIELD_VALIDATORS.get((owner, name))
            if what is None:
                raise ValueError(f"{cls.__name__}.{name}: a field validator the mirror does not know")
            for field in dec.info.fields:
                fields[field] = what
        return after, before, fields

    def source(self) -> str:
        lines = [
            '"""The configuration models as plain slotted classes: GENERATED by config/mirror_gen.py from the pydantic',
            'models (`python -m simulator.config.mirror_gen`); do not edit (tests/test_mirror.py fails when stale)."""',
            "# flake8: noqa",
            "from .mirror_base import _MISSING, Plain",
            "from .mirror_checks import (AnyJSON, Bool, Dict, Either, Float, Int, List, Lit, Model, NoneOnly, Str, Tagged,",
            "                            Tuple, NoLibrary)",
            "from . import rules",
            "from .surface import " + ", ".join(sorted(SURFACES)),
            "",
        ]
        for cls in self.models:
            config = cls.model_config
            if not (config.get("frozen") and config.get("extra") == "forbid" and config.get("strict")
                    and config.get("allow_inf_nan") is False):
                raise ValueError(f"{cls.__name__}: not frozen, strict, extra=forbid, finite")
            if any(f.alias or f.validation_alias for f in cls.model_fields.values()):
                raise ValueError(f"{cls.__name__}: an alias")
            parent = next((b for b in cls.__bases__ if b in self.names), None)
            origin = cls.__pydantic_generic_metadata__.get("origin")
            base = self.names[origin] if origin is not None else self.names[parent] if parent is not None else "Plain"
            mixins = self.mixins(cls)
            fields = tuple(cls.model_fields)
            lines += [f"class {self.names[cls]}({''.join(m + ', ' for m in mixins)}{base}):",
                      f"    __slots__ = {tuple(f for f in fields if not _inherited(f, base, self, cls))!r}",
                      f"    _fields = {fields!r}",
                      f"    model_fields = dict.fromkeys(_fields)",
                      f"    _pydantic = ({cls.__module__!r}, {cls.__qualname__!r})", ""]
        lines += ["", "NS = {"] + [f"    {self.names[c]!r}: {self.names[c]}," for c in self.models] + ["}", ""]
        for cls in self.models:
            name = self.names[cls]
            after, before, special = self.validators(cls)
            if any(isinstance(info.annotation, typing.TypeVar) for info in cls.model_fields.values()):
                lines.append(f"{name}._checks = None  # a generic's unparametrised origin: pydantic's")
                continue
            lines.append(f"{name}._checks = (")
            for field, info in cls.model_fields.items():
                check = self.checks.field_check(info)
                if special.get(field) == "none_only":
                    check = "NoneOnly()"
                elif special.get(field) == "no_library":
                    check = f"NoLibrary({check})"
                default, factory = self.default(info)
                lines.append(f"    ({field!r}, {check}, {default}, {factory}),")
            lines.append(")")
            lines.append(f"{name}._rules = ({''.join(f'rules.{r}, ' for r in after)})")
            lines.append(f"{name}._before = {'staticmethod(rules.' + before + ')' if before else 'None'}")
        lines += ["", "BY_PYDANTIC = {(c._pydantic): c for c in NS.values()}", ""]
        return "\n".join(lines)


def _inherited(field: str, base: str, gen: Gen, cls) -> bool:
    """Whether a parent mirror class already has the slot."""
    for parent in cls.__mro__[1:]:
        if parent in gen.names and field in parent.model_fields:
            return True
    return False


def main() -> None:
    text = Gen().source()
    with open(OUT, "w") as fh:
        fh.write(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
