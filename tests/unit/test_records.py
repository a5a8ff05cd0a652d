"""hook.util.records.Record: a typing.NamedTuple look-alike built without typing or collections."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from collections import namedtuple
from typing import Any

import pytest

from hook.pipeline.request import GpuRequest
from hook.util.records import Record

Reference = namedtuple("Reference", ["path", "environment", "ldconfig"])  # the behaviour to match


class CliSettings(Record):
    """A record of three fields, shaped like hook.pipeline.config's."""

    path: str
    environment: tuple[str, ...]
    ldconfig: str


LOOSE: Any = CliSettings  # for calls the type checker would refuse


def make() -> CliSettings:
    """A record with three fields."""
    return CliSettings(path="/bin/true", environment=("A=1",), ldconfig="@/sbin/ldconfig")


def test_fields_and_values_as_a_namedtuple() -> None:
    """Same fields, values, tuple equality, hash, unpacking, repr and dict as collections.namedtuple."""
    record = make()
    reference = Reference(path="/bin/true", environment=("A=1",), ldconfig="@/sbin/ldconfig")
    assert record._fields == reference._fields
    as_object: object = reference
    assert record == as_object
    assert tuple(record) == tuple(reference)
    assert hash(record) == hash(reference)
    assert record.environment == ("A=1",)
    assert record[2] == "@/sbin/ldconfig"
    path, environment, ldconfig = record
    assert (path, environment, ldconfig) == tuple(reference)
    assert repr(record) == repr(reference).replace("Reference", "CliSettings")
    assert record._asdict() == reference._asdict()
    assert isinstance(record, tuple)
    assert type(record).__name__ == "CliSettings"
    assert type(record).__module__ == __name__
    assert CliSettings.__doc__ == "A record of three fields, shaped like hook.pipeline.config's."


def test_replace_make_copy_and_pickle() -> None:
    """_replace and _make give records of the same class; copy and pickle round-trip."""
    record = make()
    changed = record._replace(path="/usr/bin/cli")
    assert type(changed) is CliSettings
    assert changed == ("/usr/bin/cli", ("A=1",), "@/sbin/ldconfig")
    assert CliSettings._make(["a", (), "b"]) == CliSettings(path="a", environment=(), ldconfig="b")
    assert copy.copy(record) == record
    assert copy.deepcopy(record) == record
    assert pickle.loads(pickle.dumps(record)) == record  # noqa: S301 - our own bytes


def test_positional_and_keyword_construction() -> None:
    """Fields may be given by position, by keyword, or both, as a namedtuple takes them."""
    assert CliSettings("p", (), "l") == CliSettings("p", ldconfig="l", environment=())


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(lambda: LOOSE("p", ()), r"^CliSettings\(\) missing required argument: 'ldconfig'$", id="missing"),
        pytest.param(lambda: LOOSE("p", (), "l", "x"), r"^CliSettings\(\) takes 3 positional arguments but 4 were given$", id="too-many"),
        pytest.param(lambda: LOOSE("p", (), "l", path="x"), r"^CliSettings\(\) got multiple values for argument 'path'$", id="twice"),
        pytest.param(lambda: LOOSE("p", (), "l", other=1), r"^CliSettings\(\) got an unexpected keyword argument 'other'$", id="unknown"),
        pytest.param(lambda: CliSettings._make(["p"]), r"^Expected 3 arguments, got 1$", id="make-short"),
    ],
)  # fmt: skip
def test_wrong_arguments_are_type_errors(build: object, message: str) -> None:
    """A wrong call fails as a wrong call of a namedtuple's constructor does."""
    with pytest.raises(TypeError, match=message):
        build()  # type: ignore[operator]


def test_replace_refuses_an_unknown_field() -> None:
    """_replace with a name that is not a field is a ValueError, as namedtuple's."""
    with pytest.raises(ValueError, match=r"^Got unexpected field names: \['nope'\]$"):
        make()._replace(nope=1)  # type: ignore[call-arg]


def test_records_are_immutable() -> None:
    """Fields cannot be assigned and records carry no instance dict."""
    record = make()
    with pytest.raises(AttributeError):
        record.path = "x"  # type: ignore[misc]
    assert not hasattr(record, "__dict__")


def test_request_record_has_its_fields_in_annotation_order() -> None:
    """GpuRequest's fields are its annotations, in order."""
    assert GpuRequest._fields == tuple(GpuRequest.__annotations__)


def test_importing_records_loads_neither_collections_nor_typing() -> None:
    """Defining records at run time imports neither collections nor typing."""
    code = "import sys; import hook.pipeline.config, hook.pipeline.request; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    modules = set(eval(out))  # noqa: S307 - our own output, a list of names
    assert modules.isdisjoint({"collections", "typing", "operator", "keyword", "reprlib"}), modules
