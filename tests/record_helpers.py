"""The records (plain slotted classes) as tests use them: their fields as a dict, and a copy with some changed."""

from __future__ import annotations

from typing import Any, TypeVar

R = TypeVar("R")


def fields(record: object) -> dict[str, Any]:
    """Return the record's fields by name (``None`` stays ``None``: a request that is not there)."""
    names: tuple[str, ...] = getattr(type(record), "__slots__")  # noqa: B009 - mypy: object has no __slots__
    return {name: getattr(record, name) for name in names}


def replaced(record: R, **changes: Any) -> R:
    """Return a new record like ``record`` with the named fields changed (an unknown name is an error)."""
    values = fields(record)
    unknown = set(changes) - set(values)
    if unknown:
        raise TypeError(f"{type(record).__name__} has no fields {sorted(unknown)}")
    return type(record)(**{**values, **changes})
