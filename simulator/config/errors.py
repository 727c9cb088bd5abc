"""Errors a user can act on: a configuration mistake names the file, key path, problem and what is allowed."""
from __future__ import annotations


class ConfigError(Exception):
    """A configuration mistake, reported as one line; the CLI exits with status 2."""

    def __init__(self, file: str | None, path: str, problem: str, allowed: str | None = None):
        self.file = file or "<config>"
        self.path = path or "<root>"
        self.problem = problem
        self.allowed = allowed
        super().__init__(self.line())

    def line(self) -> str:
        text = f"{self.file}: {self.path}: {self.problem}"
        if self.allowed:
            text += f" (allowed: {self.allowed})"
        return text

    def __str__(self) -> str:  # one line, always
        return self.line()
