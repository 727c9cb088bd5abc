"""dataclasses.dataclass with the methods it writes compiled once, into compiled/methods.py's bytecode, instead of at
every import: dataclass() builds each method (__init__, __repr__, __eq__, __hash__, a frozen class's __setattr__ and
__delattr__) as text and exec's it, parsing and compiling ~200 small functions for the package's classes on every
start (~25 ms of CPU, ~8% of the main command's instructions: issue 27's start-up). Here dataclass() runs as it is,
every field, default, check and attribute its own; only its text-to-function step (dataclasses._create_fn) is looked
up, by the step's whole input (the function's name, parameters, body lines and the names its closure binds), in the
functions methods.py holds, the same text written out as source (so the same bytecode; tests/test_compiled.py
compares it with what _create_fn compiles), and bound to the class's module as exec would. A step methods.py does
not hold (a class changed since it was generated, another Python), or a Python without _create_fn (3.13 builds its
methods otherwise), is left to dataclasses as before: slower, never different. `python -m simulator.compiled.gen`
rewrites methods.py; tests/test_compiled.py fails when the committed file is stale."""
from __future__ import annotations

import dataclasses
import hashlib
from types import FunctionType

from . import methods


def dataclass(cls=None, /, **options):
    """dataclasses.dataclass(cls, **options), its methods from methods.py where it holds them."""

    def wrap(cls):
        create = getattr(dataclasses, "_create_fn", None)
        if create is None:
            return dataclasses.dataclass(cls, **options)
        dataclasses._create_fn = _compiled(create)
        try:
            return dataclasses.dataclass(cls, **options)
        finally:
            dataclasses._create_fn = create

    return wrap if cls is None else wrap(cls)


def key_of(name: str, args, body, names, annotated: bool) -> str:
    """What makes a _create_fn call's function, as a digest (SHA-1 of its text): its name, parameters, body lines, the
    names of its closure's values (the locals it is given, in order) and whether it is annotated with _return_type."""
    text = repr((name, tuple(args), tuple(body), tuple(names), annotated))
    return hashlib.sha1(text.encode()).hexdigest()


def _compiled(create):
    """dataclasses._create_fn, taking the function from methods.py when it holds the call's text."""

    def _made(name, args, body, *, globals=None, locals=None, return_type=dataclasses.MISSING):
        if locals is None:
            locals = {}
        annotated = return_type is not dataclasses.MISSING
        if annotated:
            locals["_return_type"] = return_type  # as _create_fn does (it may mutate the caller's locals)
        factory = methods.FACTORIES.get(key_of(name, args, body, locals, annotated))
        if factory is None:
            if annotated:
                del locals["_return_type"]
            return create(name, args, body, globals=globals, locals=locals, return_type=return_type)
        # the factory's code under the globals exec would have run it in: the class's module (dataclasses' own
        # where none are given), so the method reads the same names and reports the same module
        scope = vars(dataclasses) if globals is None else globals
        return FunctionType(factory.__code__, scope)(**locals)

    return _made
