"""Typed immutable records for the per-container path, without importing ``typing`` when the hook runs.

``typing`` costs about half an interpreter start (it compiles regular expressions and builds its
generics at import). The type checker sees ``typing.NamedTuple``; at run time ``Record`` builds the same
kind of class with ``collections.namedtuple`` from the class's annotations (in their order):
``_replace``, ``_asdict``, equality and unpacking behave as they do for a typing.NamedTuple.
Fields have no defaults and records have no methods.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple as Record

    __all__ = ["Record"]
else:

    class _RecordMeta(type):
        """Turn ``class X(Record): a: int`` into ``collections.namedtuple("X", ["a"])``."""

        def __new__(mcls, name, bases, namespace):
            if not bases:
                return super().__new__(mcls, name, bases, namespace)
            from collections import namedtuple

            fields = list(namespace.get("__annotations__", {}))
            record = namedtuple(name, fields, module=namespace["__module__"])
            record.__doc__ = namespace.get("__doc__")
            record.__qualname__ = namespace.get("__qualname__", name)
            return record

    class Record(metaclass=_RecordMeta):
        """Base of the records (see the module docstring)."""

        __slots__ = ()
