"""simulator.compiled.dataclass: dataclasses.dataclass with its methods from compiled/methods.py's bytecode. The
committed methods.py is what the generator writes now; each factory compiles to the bytecode dataclasses._create_fn
makes of the same call; the package's classes take their methods from it (bound to their own module) and behave as
dataclasses; a class methods.py does not hold is left to dataclasses; _create_fn is restored after each class."""
from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
import types

import pytest

from simulator import compiled
from simulator.compiled import gen, methods

from conftest import ROOT

SAME_PYTHON = tuple(sys.version_info[:2]) == methods.PYTHON


def _generated() -> tuple[str, dict]:
    """The generator's text and calls, from a fresh process (it imports the package's modules afresh: here it would
    replace the classes other tests hold)."""
    out = subprocess.run([sys.executable, "-c", "from simulator.compiled import gen; calls = gen.calls(); "
                          "print(repr((gen.render(calls), calls)))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return ast.literal_eval(out)


@pytest.mark.skipif(not SAME_PYTHON, reason="methods.py is generated for another Python; there it is only unused")
def test_the_committed_methods_are_what_the_generator_writes_now():
    with open(gen.OUT) as fh:
        assert fh.read() == _generated()[0], "stale: run python -m simulator.compiled.gen"


def _code_parts(code: types.CodeType) -> tuple:
    """What a code object does (not where its text was: file, line numbers and qualified name aside)."""
    consts = tuple(_code_parts(c) if isinstance(c, types.CodeType) else (type(c), c) for c in code.co_consts)
    return (code.co_name, code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
            code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags, code.co_stacksize)


@pytest.mark.skipif(not SAME_PYTHON or not hasattr(dataclasses, "_create_fn"), reason="another Python")
def test_each_factory_compiles_as_dataclasses_does():
    calls = _generated()[1]
    assert len(calls) == len(methods.FACTORIES) > 100
    for (name, args, body, names, annotated), classes in calls.items():
        factory = methods.FACTORIES[compiled.key_of(name, args, body, names, annotated)]
        values = {n: None for n in names}
        ours = factory(**values)
        plain = {n: None for n in names if n != "_return_type"}
        theirs = dataclasses._create_fn(name, args, body, globals={}, locals=plain,
                                        return_type=None if annotated else dataclasses.MISSING)
        assert _code_parts(ours.__code__) == _code_parts(theirs.__code__), (name, classes)


def _dataclass_methods(cls) -> list[types.FunctionType]:
    """The methods dataclass() wrote for cls (not those its class body defines)."""
    own = sys.modules[cls.__module__].__file__
    out = [cls.__dict__[n] for n in ("__init__", "__eq__", "__hash__", "__setattr__", "__delattr__")
           if isinstance(cls.__dict__.get(n), types.FunctionType)]
    out += [cls.__repr__.__wrapped__] if hasattr(cls.__repr__, "__wrapped__") else []
    return [fn for fn in out if fn.__code__.co_filename != own]


@pytest.mark.skipif(not SAME_PYTHON or not hasattr(dataclasses, "_create_fn"), reason="another Python")
def test_the_package_classes_take_their_methods_from_methods_py():
    from simulator.model.cost import PassShape
    from simulator.serving.records import StepRecord
    from simulator.serving.requests import Request
    from simulator.speculation.trees import Tree
    from simulator.timing.stepspec import StepSpec

    for cls in (PassShape, StepRecord, Request, Tree, StepSpec):
        made = _dataclass_methods(cls)
        assert cls.__init__ in made, cls
        for fn in made:
            assert fn.__code__.co_filename == methods.__file__, (cls, fn)
            assert fn.__globals__ is sys.modules[cls.__module__].__dict__, (cls, fn)  # as exec in its module
            assert fn.__module__ == cls.__module__
        assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"


def test_a_package_class_is_a_dataclass_as_before():
    from simulator.model.cost import PassShape

    names = [f.name for f in dataclasses.fields(PassShape)]
    assert names[:2] == ["tokens", "batch"] and dataclasses.is_dataclass(PassShape)
    assert PassShape.__dataclass_params__.frozen and PassShape.__dataclass_params__.eq
    a = PassShape(tokens=8, batch=2, context=100)
    b = dataclasses.replace(a, context=200)
    assert (b.tokens, b.batch, b.context) == (8, 2, 200) and a.context == 100
    assert a == PassShape(tokens=8, batch=2, context=100) != b
    assert hash(a) == hash(PassShape(tokens=8, batch=2, context=100))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.tokens = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del a.tokens
    with pytest.raises(TypeError):
        PassShape(1, 2, 3, 4, 5, 6, 7, 8, 9)  # eight fields


def _class_of(decorate):
    @decorate(frozen=True)
    class Pair:
        left: int
        right: list = dataclasses.field(default_factory=list)
        tag: str = "x"
    return Pair


def test_a_class_methods_py_does_not_hold_is_made_by_dataclasses():
    ours, plain = _class_of(compiled.dataclass), _class_of(dataclasses.dataclass)
    assert ours.__init__.__code__.co_filename == plain.__init__.__code__.co_filename != methods.__file__
    a, b = ours(1), plain(1)
    assert (a.left, a.right, a.tag) == (b.left, b.right, b.tag) == (1, [], "x")
    assert repr(a) == repr(b).replace(plain.__qualname__, ours.__qualname__)
    assert a == ours(1) and a != ours(2) and a != b  # another class: not equal, as dataclasses has it
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.left = 2


def test_create_fn_is_restored_after_each_class_even_a_refused_one():
    create = getattr(dataclasses, "_create_fn", None)
    _class_of(compiled.dataclass)
    assert getattr(dataclasses, "_create_fn", None) is create
    with pytest.raises(TypeError, match="non-default argument"):
        @compiled.dataclass
        class Bad:
            a: int = 1
            b: int
    assert getattr(dataclasses, "_create_fn", None) is create


@pytest.mark.skipif(not SAME_PYTHON or not hasattr(dataclasses, "_create_fn"), reason="another Python")
def test_the_main_command_compiles_no_dataclass_method():
    """pcie8_ngram's run: every dataclass it makes is the package's, found in methods.py (no exec of their text)."""
    script = ("import dataclasses, io, contextlib, runpy, sys\n"
              "made = []\n"
              "real = dataclasses._create_fn\n"
              "def counting(*a, **k):\n"
              "    made.append(a[0])\n"
              "    return real(*a, **k)\n"
              "dataclasses._create_fn = counting\n"
              "sys.argv = ['simulator', 'scenarios/pcie8_ngram.yaml']\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              "    try:\n"
              "        runpy.run_module('simulator', run_name='__main__')\n"
              "    except SystemExit:\n"
              "        pass\n"
              "print(len(made))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0"
