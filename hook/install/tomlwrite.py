"""A minimal TOML writer for the tables install adds to engine configs (the standard library only reads TOML).

It writes what a runtime table holds: strings, integers, finite floats, booleans, arrays of those and nested
tables (as ``[a.b]`` sections after the table's own keys; inside arrays, as inline tables). A value of any
other type (a date, NaN) is refused, and ``render_tables`` checks its own output by reading it back with
tomllib: what it returns always parses to exactly the tables it was given. No new dependency: tomlkit would
keep comments of a file it re-emits, but install never re-emits a file, it only appends whole tables.
"""

import json
import math
import re
from typing import Any

from hook.install.common import InstallError

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    """Write a key bare when it can be, else as a basic string."""
    return key if _BARE_KEY.match(key) else toml_value(key)


def toml_value(value: Any) -> str:
    """Write one value inline (a table as an inline table)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # A JSON string is a TOML basic string: the same escapes (\uXXXX for control characters).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise InstallError(f"cannot write a {type(value).__name__} value as TOML")


def _table_lines(path: tuple[str, ...], table: dict[str, Any], indent: str) -> list[str]:
    """The ``[path]`` section for ``table``: its own keys, then its sub-tables as sections of their own."""
    lines = ["[" + ".".join(toml_key(part) for part in path) + "]"]
    lines += [
        f"{indent}{toml_key(key)} = {toml_value(value)}"
        for key, value in table.items()
        if not isinstance(value, dict)
    ]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += ["", *_table_lines((*path, key), value, indent)]
    return lines


def render_tables(path: tuple[str, ...], table: dict[str, Any], *, indent: str = "  ") -> str:
    """Return ``table`` as the TOML section ``[path]`` (sub-tables as their own sections), verified by reading
    it back: ``tomllib.loads(result)`` is ``table`` nested under ``path``."""
    import tomllib

    text = "\n".join(_table_lines(path, table, indent)) + "\n"
    expected: Any = table
    for part in reversed(path):
        expected = {part: expected}
    if tomllib.loads(text) != expected:
        raise InstallError(f"cannot write table {'.'.join(path)} as TOML faithfully")
    return text
