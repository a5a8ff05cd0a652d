"""Typed immutable records for the per-container path, without importing ``typing`` or ``collections``.

``typing`` costs about half an interpreter start (it compiles regular expressions and builds its
generics at import), and ``collections`` (for ``namedtuple``) about a third of one, with ``operator``,
``keyword`` and ``reprlib``. The type checker sees ``typing.NamedTuple``; at run time ``Record`` builds a
tuple subclass from the class's annotations (in their order) with the builtin ``_operator.itemgetter`` as
field accessors: construction by position or keyword, ``_fields``, ``_make``, ``_replace``, ``_asdict``,
equality, hashing, unpacking and ``repr`` behave as they do for a typing.NamedTuple.
Fields have no defaults and records have no methods.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple as Record

    __all__ = ["Record"]
else:
    from _operator import itemgetter

    def _new(cls, *args, **kwargs):
        """Build the record from positional then keyword values; every field exactly once."""
        fields = cls._fields
        if len(args) > len(fields):
            raise TypeError(
                f"{cls.__name__}() takes {len(fields)} positional arguments but {len(args)} were given"
            )
        values = list(args)
        for name in fields[len(args) :]:
            if name not in kwargs:
                raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
            values.append(kwargs.pop(name))
        if kwargs:
            name = next(iter(kwargs))
            if name in fields:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
        return tuple.__new__(cls, values)

    def _make(cls, iterable):
        """Build a record from an iterable of the field values, in order."""
        values = tuple.__new__(cls, iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(values)}")
        return values

    def _replace(self, **changes):
        """Return a new record with the named fields replaced."""
        values = [changes.pop(name, value) for name, value in zip(self._fields, self, strict=True)]
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return tuple.__new__(type(self), values)

    def _asdict(self):
        """Return a new dict mapping field names to their values."""
        return dict(zip(self._fields, self, strict=True))

    def _repr(self):
        """``Name(field=value, ...)``, as namedtuple prints it."""
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({shown})"

    def _getnewargs(self):
        """Pickle and copy as a plain tuple of the values."""
        return tuple(self)

    class _RecordMeta(type):
        """Turn ``class X(Record): a: int`` into a tuple subclass with fields ``a``."""

        def __new__(mcls, name, bases, namespace):
            if not bases:
                return super().__new__(mcls, name, bases, namespace)
            fields = tuple(namespace.get("__annotations__", {}))
            body = {
                "__doc__": namespace.get("__doc__"),
                "__module__": namespace["__module__"],
                "__qualname__": namespace.get("__qualname__", name),
                "__slots__": (),
                "__annotations__": namespace.get("__annotations__", {}),
                "_fields": fields,
                "__match_args__": fields,
                "__new__": _new,
                "_make": classmethod(_make),
                "_replace": _replace,
                "_asdict": _asdict,
                "__repr__": _repr,
                "__getnewargs__": _getnewargs,
            }
            for index, field in enumerate(fields):
                body[field] = property(itemgetter(index))  # no doc: formatting one costs ~1 us a field
            return type(name, (tuple,), body)

    class Record(metaclass=_RecordMeta):
        """Base of the records (see the module docstring)."""

        __slots__ = ()
