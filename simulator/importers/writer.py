"""Write an imported mapping as YAML for review, each key with the note that says where its value came from."""
from __future__ import annotations

import json
from typing import Any

COMMENT_COLUMN = 40


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    plain = text and text.strip() == text and not any(c in text for c in ":#{}[],&*!|>'\"%@`") \
        and text.lower() not in ("true", "false", "null", "yes", "no", "on", "off", "~")
    try:
        float(text)
        plain = False
    except ValueError:
        pass
    return text if plain else json.dumps(text)


def _flow(value: Any) -> str:
    """A short mapping or list on one line (links, nodes)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar(value)


def _line(text: str, note: str | None) -> str:
    if not note:
        return text
    return f"{text.ljust(COMMENT_COLUMN - 1)} # {note}"


def to_yaml(data: dict, notes: dict[str, str] | None = None, header: list[str] | None = None) -> str:
    """YAML text of `data`; notes keyed by dotted path become end-of-line comments; lists of mappings are written one
    flow mapping a line."""
    notes = notes or {}
    lines = [f"# {h}" for h in header or []]

    def walk(node: dict, prefix: str, indent: int) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            pad = " " * indent
            if isinstance(value, dict) and value:
                lines.append(_line(f"{pad}{key}:", notes.get(path)))
                walk(value, path + ".", indent + 2)
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                lines.append(_line(f"{pad}{key}:", notes.get(path)))
                for i, item in enumerate(value):
                    lines.append(_line(f"{pad}  - {_flow(item)}", notes.get(f"{path}[{i}]")))
            else:
                lines.append(_line(f"{pad}{key}: {_flow(value)}", notes.get(path)))

    walk(data, "", 0)
    return "\n".join(lines) + "\n"
