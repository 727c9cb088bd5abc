"""Names for the shipped machines, model cards and scenarios, and where their files are.

`topology: nvlink8_h100`, `model: kimi_k2_5` and `specsim run pcie8_ngram` name a file by its stem. A name is looked up
in the package's own data first, then in the user's folders (./topologies, ./scenarios/models, ./scenarios under
the current directory, and the same folders beside the scenario that names it). Anything that looks like a path
(a folder separator or a .yaml suffix) is a path, relative to the scenario file that names it.

The data lives at the repository's top level (topologies/, scenarios/) in a source checkout and inside the package
(simulator/data/...) once installed from a wheel; `data_dir` finds whichever is there.
"""
from __future__ import annotations

import os

from ..compiled import dataclass
from .errors import ConfigError

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUFFIXES = (".yaml", ".yml")

# kind -> (folder under the data root, the word users see, folder names a user keeps beside their work)
KINDS = {
    "topology": (os.path.join("topologies"), "topology", ("topologies",)),
    "model": (os.path.join("scenarios", "models"), "model card", (os.path.join("scenarios", "models"), "models")),
    "scenario": (os.path.join("scenarios"), "scenario", ("scenarios",)),
    "engine": (os.path.join("engines"), "engine profile", ("engines",)),
}
PLURALS = {"topologies": "topology", "models": "model", "scenarios": "scenario"}


def data_dir(kind: str) -> str:
    """The shipped folder of one kind: inside the installed package, else the source checkout's top level."""
    sub = KINDS[kind][0]
    installed = os.path.join(PACKAGE_DIR, "data", sub)
    if os.path.isdir(installed):
        return installed
    return os.path.join(os.path.dirname(PACKAGE_DIR), sub)


def search_dirs(kind: str, base_dir: str | None = None) -> list[str]:
    """Folders a name of this kind is looked up in, in order: the package's, then the user's."""
    user = [os.path.join(os.getcwd(), folder) for folder in KINDS[kind][2]]
    if base_dir:
        user += [os.path.join(base_dir, folder) for folder in KINDS[kind][2]]
        user += [os.path.join(base_dir, os.pardir, folder) for folder in KINDS[kind][2]]
    out: list[str] = []
    for folder in [data_dir(kind), *user]:
        folder = os.path.normpath(folder)
        if folder not in out:
            out.append(folder)
    return out


def is_name(text: str) -> bool:
    """A bare name (no folder, no suffix), as opposed to a path."""
    return bool(text) and os.sep not in text and "/" not in text and not text.endswith(SUFFIXES)


def names(kind: str, base_dir: str | None = None) -> dict[str, str]:
    """name -> file for every entry of a kind that can be found (earlier folders win)."""
    found: dict[str, str] = {}
    for folder in search_dirs(kind, base_dir):
        if not os.path.isdir(folder):
            continue
        for entry in sorted(os.listdir(folder)):
            stem, suffix = os.path.splitext(entry)
            path = os.path.join(folder, entry)
            if suffix in SUFFIXES and os.path.isfile(path) and stem not in found:
                found[stem] = path
    return found


def suggest(word: str, choices) -> str:
    """' (did you mean X?)' for the closest choice, or ''."""
    import difflib  # here: only a mistake asks (off the start-up path, issue 27)

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def locate(value: str, kind: str, referrer: str | None = None, base_dir: str | None = None) -> str:
    """The file a `topology:` / `model:` value (or a scenario argument) refers to.

    A path is taken relative to `base_dir`; a bare name is looked up in `search_dirs`. Raises a one-line ConfigError
    naming what was looked for, where, and the closest known name.
    """
    key = "scenario" if kind == "scenario" else kind
    word = KINDS[kind][1]
    if not is_name(value):
        path = os.path.normpath(os.path.join(base_dir or "", os.path.expanduser(value)))
        if os.path.isdir(path):
            raise ConfigError(referrer or path, key, f"{path} is a directory, not a {word} file",
                              f"a {word} YAML file or name")
        if os.path.isfile(path):
            return path
        if os.path.exists(path):
            raise ConfigError(referrer or path, key, f"{path} is not a regular file", f"a {word} YAML file or name")
        stem = os.path.splitext(os.path.basename(value))[0]
        known = names(kind, base_dir)
        hint = suggest(stem, known) if stem not in known else f"; the shipped {word} {stem!r} is {known[stem]}"
        raise ConfigError(referrer or path, key, f"file not found: {path}{hint}")
    known = names(kind, base_dir)
    if value in known:
        return known[value]
    shown = ", ".join(sorted(known)) or "none found"
    raise ConfigError(referrer or "command line", key, f"no {word} named {value!r}{suggest(value, known)}",
                      f"a path, or one of {shown}")


# the keys that give a file's kind away (checked in this order)
SIGNATURES = (
    ("sweep", ("scenario", "axes")),
    ("scenario", ("parallelism",)),
    ("scenario", ("topology", "model")),
    ("topology", ("gpu", "fabric")),
    ("model", ("num_layers", "hidden_size")),
    ("measurements", ("measurements",)),
)
COMMANDS_FOR = {"scenario": "specsim run FILE", "sweep": "specsim sweep FILE", "topology": "specsim collective FILE",
                "model": "a scenario's model: key", "measurements": "specsim calibrate SCENARIO --measured FILE"}


def kind_of(data) -> str | None:
    """What a parsed YAML file is (scenario, sweep, topology, model, measurements), from its keys; None if unknown."""
    if not isinstance(data, dict):
        return None
    for kind, keys in SIGNATURES:
        if all(k in data for k in keys):
            return kind
    return None


def check_kind(data, expected: str, path: str) -> None:
    """A one-line error when a file of another kind is given where `expected` is needed."""
    found = kind_of(data)
    if found is None or found == expected:
        return
    word = KINDS[found][1] if found in KINDS else found
    hint = COMMANDS_FOR[found].replace("FILE", path)
    extra = ""
    if found == "scenario" and expected == "topology" and isinstance(data.get("topology"), str):
        extra = f"; its topology is {data['topology']!r}"
    raise ConfigError(path, "<file>", f"this is a {word} file, not a {KINDS[expected][1]}{extra} "
                      f"(for this file: {hint})")


def read_kind(value: str, kind: str, referrer: str | None = None, base_dir: str | None = None):
    """(path, parsed YAML) of a file given by name or path, checked to be of `kind`."""
    from .yaml_files import read_yaml

    path = locate(value, kind, referrer, base_dir)
    data = read_yaml(path)
    check_kind(data, kind, path)
    return path, data


@dataclass(frozen=True)
class Entry:
    """One listed file: its name, path and one-line description (from its `description:` or `name:` key)."""

    name: str
    path: str
    description: str
    is_sweep: bool = False


def entries(kind: str) -> list[Entry]:
    """Every entry of a kind, with its description, for `specsim list`."""
    from .yaml_files import read_yaml

    out = []
    for name, path in names(kind).items():
        try:
            data = read_yaml(path)
        except ConfigError:
            continue
        if not isinstance(data, dict):
            continue
        text = str(data.get("description") or data.get("name") or "")
        out.append(Entry(name, path, text, is_sweep="scenario" in data and "parallelism" not in data))
    return out


def display_path(path: str) -> str:
    """A data file's path as a user reads it: relative to the package or checkout where it is shipped."""
    for root in (os.path.join(PACKAGE_DIR, "data"), os.path.dirname(PACKAGE_DIR)):
        if os.path.abspath(path).startswith(root + os.sep):
            return os.path.relpath(path, root)
    return path
