"""One cache, owned: no module outside simulator/cache keeps results of its own across runs.

What counts as a process-wide cache here (read from each module's syntax tree):
- `functools.lru_cache` / `functools.cache` (imported or called, by any name it or functools is imported under);
- a module-level or class-level name bound to a mutable container (a dict, list or set display or comprehension,
  or dict() / list() / set() / OrderedDict() / defaultdict() / deque() / Counter() / ChainMap() /
  WeakKeyDictionary() / WeakValueDictionary()) that is empty (it exists to be filled while the process runs, by
  whatever function it is handed to), or that a function writes: an item assigned or deleted, an augmented
  assignment, or a mutating method (setdefault, update, pop, popitem, clear, append, extend, insert, remove,
  discard, add, move_to_end, appendleft);
- the same defined under a module-level `if` / `try` / `with` or in an inner class, or written through a local alias
  (`m = _MEMO; m[k] = v`);
- a module-level object bound to any other call's value (a numpy array, a namespace, an instance) that a function
  writes through: an item or attribute assigned, or a mutating method (a shared array patched in place, a singleton);
- a `global` statement (a function rebinding module state: a lazily filled singleton);
- a mutable default argument (a dict, list or set display or constructor call), the classic memo in disguise.
Per-object memos too (a result kept on an object for a later call, which the run's store holds instead):
- a get-or-compute on a container that outlives the call (an attribute, a parameter, `self.__dict__`): a lookup of
  a key (`X.get(K)`, `K in X`, `X[K]` read) and a write of the same key (`X[K] = ...`, `X.setdefault(K, ...)`) in
  one function;
- hand-written eviction: a container emptied (`.clear()`) or popped under a test of its size (`len(X) >= N`);
- a method that stores into `self.__dict__` or `setattr(self, <a computed name>, ...)` (a memo decorator).
Containers that no function writes (tables of constants), a container filled within one call (a local dict), a
cached_property (one value per object, no key) and an object's running state (a request's tokens, a buffer of
rows: NOT_CACHES names them, each with why) are allowed.
"""
from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "simulator"
OWNER = PACKAGE / "cache"  # the one store

CONTAINER_CALLS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter", "ChainMap",
                   "WeakKeyDictionary", "WeakValueDictionary"}
MUTATORS = {"setdefault", "update", "pop", "popitem", "clear", "append", "extend", "insert", "remove", "discard",
            "add", "move_to_end", "appendleft", "__setitem__"}
ARRAY_MUTATORS = {"fill", "put", "itemset", "resize", "sort", "setflags"}  # a numpy array patched in place
MEMO_DECORATORS = {"lru_cache", "cache"}


def _is_empty(node: ast.AST | None) -> bool:
    """An empty container display or a container constructor called without arguments."""
    if isinstance(node, (ast.Dict, ast.List, ast.Set)):
        return not (node.keys if isinstance(node, ast.Dict) else node.elts)
    return isinstance(node, ast.Call) and _is_container(node) and not node.args and not node.keywords


def _is_container(node: ast.AST | None) -> bool:
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        return name in CONTAINER_CALLS
    return False


def _targets(statement: ast.stmt) -> list[tuple[str, ast.AST | None]]:
    if isinstance(statement, ast.Assign):
        return [(t.id, statement.value) for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [(statement.target.id, statement.value)]
    return []


def _written_name(node: ast.AST) -> str | None:
    """The name (or attribute) a write inside a function goes to: X[...] = / del X[...] / X += / X.pop(...)."""
    def base(target: ast.AST) -> str | None:
        if isinstance(target, ast.Subscript):
            target = target.value
        if isinstance(target, ast.Name):
            return target.id
        if isinstance(target, ast.Attribute):
            return target.attr
        return None

    if isinstance(node, ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Subscript):
                return base(t)
    if isinstance(node, ast.Delete):
        for t in node.targets:
            if isinstance(t, ast.Subscript):
                return base(t)
    if isinstance(node, ast.AugAssign):
        return base(node.target)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        return base(node.func.value)
    return None


def _written_module_name(node: ast.AST) -> str | None:
    """The bare name a write inside a function goes through, an item or an attribute of it (X[0] = / X.a = /
    X[k] += / X.fill(...) / X.a.append(...)): what a module-level array or object patched in place looks like."""
    def name(target: ast.AST) -> str | None:
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        return target.id if isinstance(target, ast.Name) else None

    if isinstance(node, (ast.Assign, ast.Delete)):
        for t in node.targets:
            if isinstance(t, (ast.Subscript, ast.Attribute)):
                return name(t)
    if isinstance(node, ast.AugAssign) and isinstance(node.target, (ast.Subscript, ast.Attribute)):
        return name(node.target)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in MUTATORS | ARRAY_MUTATORS:
        return name(node.func.value)
    return None


def _base(node: ast.AST) -> str | None:
    """'self.x' / 'x' of the container an expression reads or writes (X in X.get(K), X[K])."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _base(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _memo_offences(function: ast.AST, where: str) -> list[str]:
    """Per-object memos in one function (see the module's docstring): get-or-compute on a container that outlives
    the call, eviction under a size test, stores into self.__dict__ or setattr with a computed name."""
    if isinstance(function, ast.Lambda):
        return []
    found: list[str] = []
    args = function.args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    rebound = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    # what outlives the call: the object's attributes, a parameter's container (a dict handed in to be filled)
    outlives = {p for p in params if p not in rebound}
    lookups: set[tuple[str, str]] = set()
    writes: dict[tuple[str, str], int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base, attr = _base(node.func.value), node.func.attr
            if base is not None and node.args:
                key = ast.dump(node.args[0])
                if attr == "get" and len(node.args) == 1:  # with a default it is a count read (X[K] = X.get(K, 0) + 1)
                    lookups.add((base, key))
                elif attr == "setdefault" and len(node.args) == 2 and not _is_container(node.args[1]) \
                        and not isinstance(node.args[1], ast.Constant):
                    writes[(base, key)] = node.lineno
                    lookups.add((base, key))
            if attr == "setdefault" and base is not None and base.endswith("__dict__"):
                found.append(f"{where}:{node.lineno}: {base}.setdefault, a memo on the object")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
            found.append(f"{where}:{node.lineno}: setattr with a computed name, a memo on the object")
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            base = _base(node.comparators[0])
            if base is not None:
                lookups.add((base, ast.dump(node.left)))
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript):
                    base = _base(t.value)
                    if base is not None:
                        writes[(base, ast.dump(t.slice))] = node.lineno
        elif isinstance(node, ast.If) and any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "len"
                                              for n in ast.walk(node.test)):
            for inner in node.body:
                for n in ast.walk(inner):
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                            n.func.attr in ("clear", "popitem"):
                        found.append(f"{where}:{n.lineno}: {_base(n.func.value)}.{n.func.attr}() under a size test, "
                                     "hand-written eviction")
    for (base, key), line in writes.items():
        if (base, key) in lookups and base.split(".")[0] in outlives:
            name = getattr(function, "name", "<lambda>")
            found.append(f"{where}:{line}: {base}, a memo {name} fills (get-or-compute by its key)")
    return found


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run at import, at module or class level: inside if / try / with / for blocks and nested
    classes too (a cache defined under `try:` or in an inner class is as process-wide), function bodies aside."""
    found: list[ast.stmt] = []
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        found.append(statement)
        for field in ("body", "orelse", "finalbody"):
            found += _module_level(getattr(statement, field, []))
        for handler in getattr(statement, "handlers", []):
            found += _module_level(handler.body)
    return found


def _local_names(function: ast.AST) -> set[str]:
    """Names a function binds for itself (parameters and assignments, unless declared global): a write to one of
    them is not a write to the module's object of that name."""
    args = function.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg] if a}
    names |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names - {name for n in ast.walk(function) if isinstance(n, ast.Global) for name in n.names}


def offences(source: str, where: str = "<module>") -> list[str]:
    """Every process-wide cache in one module's source, as 'where:line: what'."""
    tree = ast.parse(source)
    found: list[str] = []
    memo_names = set(MEMO_DECORATORS)
    functools_names = {"functools"}  # what the functools module is imported as
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "functools":
            for alias in node.names:
                if alias.name in MEMO_DECORATORS:
                    memo_names.add(alias.asname or alias.name)
                    found.append(f"{where}:{node.lineno}: imports functools.{alias.name}")
        elif isinstance(node, ast.Import):
            functools_names |= {alias.asname for alias in node.names if alias.name == "functools" and alias.asname}
    shared: dict[str, int] = {}  # module- and class-level containers -> line
    bound: dict[str, int] = {}  # module- and class-level names bound to any other call's value (an array, an object)
    empty: set[str] = set()
    module_level = _module_level(tree.body)
    at_import = {id(s) for s in module_level if not any(s in getattr(c, "body", ()) for c in module_level
                                                        if isinstance(c, ast.ClassDef))}
    for s in module_level:
        for name, value in _targets(s):
            if _is_container(value):
                shared[name] = s.lineno
                if _is_empty(value):
                    empty.add(name)
            elif isinstance(value, ast.Call) and id(s) in at_import:  # a class's calls are its fields' defaults
                bound[name] = s.lineno
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    written: set[str] = set()
    written_by_name: set[str] = set()  # module-level names a function writes through, not attributes of that name
    for function in functions:
        local = _local_names(function) if not isinstance(function, ast.Lambda) else set()
        # a local alias of a module-level container (m = _MEMO; m[k] = v) writes the container
        aliases = {t.id: n.value.id for n in ast.walk(function) if isinstance(n, ast.Assign)
                   and isinstance(n.value, ast.Name) and n.value.id in shared for t in n.targets
                   if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                found.append(f"{where}:{node.lineno}: global {', '.join(node.names)}")
            name = _written_name(node)
            if name is not None:
                written.add(aliases.get(name, name))
            name = _written_module_name(node)
            if name is not None and name not in local:
                written_by_name.add(name)
        found += _memo_offences(function, where)
        if not isinstance(function, ast.Lambda):
            for default in function.args.defaults + [d for d in function.args.kw_defaults if d is not None]:
                if _is_container(default):
                    found.append(f"{where}:{default.lineno}: mutable default argument of {function.name}")
            for decorator in function.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
                if name in memo_names:
                    found.append(f"{where}:{decorator.lineno}: @{name} on {function.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in functools_names \
                and node.attr in MEMO_DECORATORS and not any(f"@{node.attr}" in line and f":{node.lineno}:" in line
                                                              for line in found):
            found.append(f"{where}:{node.lineno}: functools.{node.attr}")
    found += [f"{where}:{line}: {name}, a shared container {'filled at run time' if name in empty else 'a function writes'}"
              for name, line in shared.items() if name in written or name in empty]
    found += [f"{where}:{line}: {name}, a module- or class-level object a function writes"
              for name, line in bound.items() if name in written_by_name]
    return sorted(set(found))


# Module state that is not a result kept for reuse, each with why.
NOT_CACHES = {("simulator/experiments/memory.py", "_sweeping"): "a count of the sweep_gc contexts open in the process",
              ("simulator/serving/simulate.py", "ON_START"): "hooks a progress display registers while it is shown",
              ("simulator/cli/__init__.py", "log"): "the package's logger, whose propagation the command line sets",
              # an object's running state, which a get-or-compute shape does not make a memo
              ("simulator/model/split_layout.py", "self.index"): "the layout being built: each distinct segment's place",
              ("simulator/serving/steplog.py", "self._offsets"): "the log's layout: where each cost table's rows start",
              ("simulator/speculation/length_policies.py", "self.decisions"): "a policy's decisions, one per draft length "
              "drafted so far: handed out long-lived (the loop compares them by identity), built when first drafted",
              ("simulator/speculation/textual.py", "self._requests"): "each request's text and its own drafter",
              ("simulator/speculation/textual.py", "self._pending"): "inserts waiting for the batch's verify to end",
              ("simulator/timing/linkpass.py", "self.delay_us"): "each instance's contention delay, summed as it runs",
              ("simulator/timing/machine.py", "setattr with a computed name"): "a replica's Machine takes its "
              "scenario's parts (SCENARIO_PARTS) from another's"}


def package_offences(package: pathlib.Path = PACKAGE) -> list[str]:
    """Every process-wide cache in the package outside simulator/cache (the one store), NOT_CACHES aside."""
    owner = package / "cache"
    return [o for path in sorted(package.rglob("*.py")) if owner not in path.parents
            for o in offences(path.read_text(), str(path.relative_to(package.parent)))
            if _file_and_name(o) not in NOT_CACHES]


def _file_and_name(offence: str) -> tuple[str, str]:
    """('simulator/x.py', 'NAME') of an offence 'simulator/x.py:LINE: NAME, ...'."""
    where, _, what = offence.split(":", 2)
    return where, what.strip().split(",")[0]


def test_no_cache_outside_the_one_store():
    assert package_offences() == []


def test_the_check_sees_every_kind_of_cache():
    """Each kind is caught (the test can fail); a constant table and a per-object memo are not."""
    cases = {
        "from functools import lru_cache\n@lru_cache(maxsize=8)\ndef f(x):\n    return x\n": 2,
        "import functools\n@functools.cache\ndef f(x):\n    return x\n": 1,
        "_SEEN = {}\ndef f(k):\n    _SEEN[k] = 1\n": 1,
        "_SEEN = {}\ndef f(k):\n    return remember(_SEEN, k)\n": 1,
        "from collections import OrderedDict\n_C: 'OrderedDict' = OrderedDict()\ndef f(k):\n    _C.move_to_end(k)\n": 1,
        "_C = dict()\ndef f(k):\n    return _C.setdefault(k, 2)\n": 1,
        "class A:\n    _memo = {}\n    def f(self, k):\n        self._memo[k] = 1\n": 1,
        "_X = None\ndef f():\n    global _X\n    _X = 1\n": 1,
        "def f(k, _memo={}):\n    return _memo.get(k)\n": 1,
        # per-object memos: get-or-compute on an attribute or a container handed in, eviction, a memo decorator
        "class A:\n    def f(self, k):\n        v = self._m.get(k)\n        if v is None:\n"
        "            v = self._m[k] = k * 2\n        return v\n": 1,
        "class A:\n    def f(self, k):\n        if k not in self._m:\n            self._m[k] = k\n"
        "        return self._m[k]\n": 1,
        "def put(cache, k, build):\n    hit = cache.get(k)\n    if hit is None:\n        hit = cache[k] = build()\n"
        "    return hit\n": 1,
        "class A:\n    def f(self, k):\n        if len(self._m) >= 64:\n            self._m.clear()\n"
        "        self._m[k] = 1\n": 1,
        "class A:\n    def f(self, k):\n        return self._m.setdefault(k, self.g(k))\n": 1,
        "def memo(m):\n    def w(self, *a):\n        c = self.__dict__.setdefault('_c', {})\n        return m(self, *a)\n"
        "    return w\n": 1,
        # the same in disguise: functools under another name, called rather than applied; a container reached
        # through a local alias, defined under try / if or in an inner class; a module-level array or object
        # patched in place
        "import functools as ft\ndef g(k):\n    return k\nf = ft.lru_cache(maxsize=None)(g)\n": 1,
        "_M = {None: None}\ndef f(k):\n    m = _M\n    if k not in m:\n        m[k] = k\n    return m[k]\n": 1,
        "try:\n    _M = {}\nexcept ImportError:\n    _M = None\n": 1,
        "import os\nif os.name:\n    _M = dict()\n": 1,
        "class O:\n    class I:\n        _memo = {}\n": 1,
        "_M = dict.fromkeys(())\ndef f(k):\n    _M[k] = 1\n": 1,
        "import numpy as np\n_BUF = np.zeros(8)\ndef f(k):\n    _BUF[0] = k\n    return _BUF\n": 1,
        "import numpy as np\n_BUF = np.zeros(8)\ndef f(k):\n    _BUF.fill(k)\n": 1,
        "import types\n_NS = types.SimpleNamespace(v=None)\ndef f(k):\n    if _NS.v is None:\n        _NS.v = k\n"
        "    return _NS.v\n": 1,
    }
    for source, count in cases.items():
        assert len(offences(source)) == count, (source, offences(source))
    allowed = ("TABLE = {'a': 1}\ndef f(k):\n    return TABLE[k]\n"
               "class B:\n    def __init__(self):\n        self._state = {}\n    def f(self, k):\n"
               "        self._state[k] = 1\n"
               "def g(keys):\n    seen = {}\n    for k in keys:\n        if k not in seen:\n            seen[k] = 1\n"
               "    return seen\n"
               "class D:\n    def f(self, k):\n        self.n[k] = self.n.get(k, 0) + 1\n"
               "from functools import cached_property\nclass C:\n    @cached_property\n    def x(self):\n"
               "        return 1\n"
               # a module-level object only read, a dataclass field's default, a local of the same name written
               "import numpy as np\n_W = np.ones(3)\ndef h(x):\n    return _W @ x\n"
               "from dataclasses import dataclass, field\n@dataclass\nclass E:\n"
               "    rows: list = field(default_factory=list)\n"
               "    def f(self):\n        self.rows.append(1)\n"
               "def k(n):\n    _W = np.zeros(n)\n    _W[0] = 1\n    return _W\n")
    assert offences(allowed) == []
