"""hook.cdi.speccache: decoded YAML specs cached by file identity, with the verdict of no cache."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from cdi_helpers import make_fake_node, nvidia_like_spec, write_spec

from hook.cdi import spec as spec_module
from hook.cdi import speccache
from hook.cdi.registry import load_registry, resolve_edits
from hook.cdi.spec import load_spec
from hook.util.errors import CdiError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the cache is root's only (entries must be root's)")


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Store specs however recently they changed (the settle rule has its own test)."""
    monkeypatch.setattr(speccache, "SETTLE_NS", 0)


def no_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make decoding YAML fail loudly, so that a load that succeeds is a cache hit."""

    def refuse(text: str, loader: object) -> object:
        raise AssertionError("the YAML spec was decoded")

    monkeypatch.setattr(spec_module, "_decode_yaml", refuse)


def entry_of(cache: Path, spec: Path) -> Path:
    name = speccache.entry_name(str(spec))
    assert name is not None
    return cache / name


def nvidia_yaml(tmp_path: Path) -> Path:
    node = make_fake_node(tmp_path / "node")
    return write_spec(tmp_path / "etc-cdi", "nvidia.yaml", nvidia_like_spec(node))


def verdict(directory: Path, cache: str) -> tuple[Any, ...]:
    """What the registry makes of a directory: devices, their specs' documents, edits, errors."""
    registry = load_registry([str(directory)], cache=cache)
    names = sorted(registry.devices)
    documents = [spec.document for spec in registry.specs]
    edits = resolve_edits(registry, names) if names else []
    return names, documents, edits, registry.errors


@pytest.mark.usefixtures("settled")
def test_hit_and_miss_give_the_same_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec decoded (miss, entry written), then read from the entry (hit: YAML never decoded), then
    without any cache: the same devices, documents and edits each time."""
    spec = nvidia_yaml(tmp_path)
    cache = tmp_path / "cache"
    miss = verdict(spec.parent, str(cache))
    assert entry_of(cache, spec).is_file()
    assert (cache.stat().st_mode & 0o7777, entry_of(cache, spec).stat().st_mode & 0o7777) == (0o700, 0o600)
    uncached = verdict(spec.parent, "")
    no_yaml(monkeypatch)
    assert verdict(spec.parent, str(cache)) == miss == uncached
    assert miss[0] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"]


@pytest.mark.usefixtures("settled")
def test_a_spec_changed_in_place_with_size_and_mtime_restored_is_read_again(tmp_path: Path) -> None:
    """Same size, mtime set back: the ctime moved (a user cannot set it), so the entry is stale."""
    spec = write_spec(tmp_path / "etc", "x.yaml", {"cdiVersion": "0.5.0", "kind": "x.com/gpu", "devices": [
        {"name": "a", "containerEdits": {"env": ["V=1"]}}]})  # fmt: skip
    cache = str(tmp_path / "cache")
    assert load_spec(str(spec), cache=cache).devices["a"]["containerEdits"]["env"] == ["V=1"]
    before = spec.stat()
    time.sleep(0.05)  # past the file system's timestamp tick
    spec.write_text(spec.read_text().replace("V=1", "V=2"))
    os.utime(spec, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = spec.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    assert after.st_ctime_ns != before.st_ctime_ns
    assert load_spec(str(spec), cache=cache).devices["a"]["containerEdits"]["env"] == ["V=2"]


def test_a_spec_that_just_changed_is_not_stored(tmp_path: Path) -> None:
    """A spec whose ctime is within SETTLE_NS of its read is decoded but not cached: a write in the same
    timestamp tick after the read would keep its identity."""
    spec = nvidia_yaml(tmp_path)
    cache = tmp_path / "cache"
    load_spec(str(spec), cache=str(cache))
    assert not entry_of(cache, spec).exists()


def tamper_owner(entry: Path) -> None:
    os.chown(entry, 1000, 0)


def tamper_mode(entry: Path) -> None:
    entry.chmod(0o644)


def tamper_json(entry: Path) -> None:
    entry.write_text("{not json")


def tamper_identity(entry: Path) -> None:
    data = json.loads(entry.read_text())
    data["identity"][1] += 1
    entry.write_text(json.dumps(data))


def tamper_document(entry: Path) -> None:
    """An entry with this spec's identity whose document says something else (root wrote it: not ours)."""
    data = json.loads(entry.read_text())
    data["document"]["devices"][0]["containerEdits"]["env"] = ["FORGED=1"]
    entry.write_text(json.dumps(data))


def tamper_invalid(entry: Path) -> None:
    """An entry with this spec's identity whose document is not a valid spec."""
    data = json.loads(entry.read_text())
    data["document"]["devices"] = []
    entry.write_text(json.dumps(data))


def tamper_symlink(entry: Path) -> None:
    target = entry.with_name("elsewhere")
    entry.rename(target)
    entry.symlink_to(target)


@pytest.mark.usefixtures("settled")
@pytest.mark.parametrize(
    ("tamper", "hit"),
    [
        pytest.param(tamper_owner, False, id="not-roots"),
        pytest.param(tamper_mode, False, id="mode-0644"),
        pytest.param(tamper_json, False, id="bad-json"),
        pytest.param(tamper_identity, False, id="other-identity"),
        pytest.param(tamper_symlink, False, id="symlink"),
        pytest.param(tamper_invalid, False, id="invalid-document"),
        # Root's own entry, right identity: trusted as root's file is (the cache is root-only).
        pytest.param(tamper_document, True, id="root-wrote-it"),
    ],
)
def test_a_doubtful_entry_is_ignored_and_rebuilt(tamper: Any, hit: bool, tmp_path: Path) -> None:
    """An entry of the wrong owner or mode, not JSON, for another identity, a symlink, or not a valid
    spec: the spec is decoded (the verdict of no cache) and the entry written again."""
    spec = write_spec(tmp_path / "etc", "x.yaml", {"cdiVersion": "0.5.0", "kind": "x.com/gpu", "devices": [
        {"name": "a", "containerEdits": {"env": ["V=1"]}}]})  # fmt: skip
    cache = tmp_path / "cache"
    load_spec(str(spec), cache=str(cache))
    good = entry_of(cache, spec).read_bytes()
    tamper(entry_of(cache, spec))
    env = load_spec(str(spec), cache=str(cache)).devices["a"]["containerEdits"]["env"]
    assert env == (["FORGED=1"] if hit else ["V=1"])
    if not hit:
        entry = entry_of(cache, spec)
        assert not entry.is_symlink()
        assert (entry.read_bytes(), entry.stat().st_uid, entry.stat().st_mode & 0o7777) == (good, 0, 0o600)


def open_directory(cache: Path) -> None:
    cache.mkdir()
    cache.chmod(0o755)


def others_directory(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    os.chown(cache, 1000, 0)


def a_file(cache: Path) -> None:
    cache.write_text("a file")


def a_symlink(cache: Path) -> None:
    cache.symlink_to(cache.parent)


@pytest.mark.usefixtures("settled")
@pytest.mark.parametrize(
    "prepare",
    [
        pytest.param(open_directory, id="directory-mode-0755"),
        pytest.param(others_directory, id="directory-not-roots"),
        pytest.param(a_file, id="a-file"),
        pytest.param(a_symlink, id="a-symlink"),
    ],
)
def test_an_untrusted_cache_directory_is_not_used(prepare: Any, tmp_path: Path) -> None:
    """A cache directory that is not root's 0700 directory is neither read nor written; creates still read
    their specs (decoded), and doctor says why (``directory_problem``)."""
    spec = nvidia_yaml(tmp_path)
    cache = tmp_path / "cache"
    prepare(cache)
    before = sorted(path.name for path in tmp_path.iterdir())
    assert sorted(load_spec(str(spec), cache=str(cache)).devices) == ["0", "1", "all"]
    assert sorted(path.name for path in tmp_path.iterdir()) == before
    if cache.is_dir() and not cache.is_symlink():
        assert sorted(path.name for path in cache.iterdir()) == []
    if not cache.is_symlink():
        assert speccache.directory_problem(str(cache)) is not None


@pytest.mark.usefixtures("settled")
def test_an_invalid_spec_is_never_cached(tmp_path: Path) -> None:
    """A spec that fails validation is refused with and without the cache, and leaves no entry."""
    spec = write_spec(tmp_path / "etc", "x.yaml", {"cdiVersion": "0.5.0", "kind": "x.com/gpu", "devices": []})
    cache = tmp_path / "cache"
    messages = []
    for where in ("", str(cache)):
        with pytest.raises(CdiError) as err:
            load_spec(str(spec), cache=where)
        messages.append(str(err.value))
    assert messages == [f"invalid CDI spec {spec}: invalid spec, no devices"] * 2
    assert not entry_of(cache, spec).exists()


@pytest.mark.usefixtures("settled")
def test_json_specs_are_not_cached(tmp_path: Path) -> None:
    """JSON is decoded by the C scanner as fast as an entry would be: no entry."""
    spec = write_spec(tmp_path / "etc", "x.json", {"cdiVersion": "0.5.0", "kind": "x.com/gpu", "devices": [
        {"name": "a", "containerEdits": {"env": ["V=1"]}}]})  # fmt: skip
    load_spec(str(spec), cache=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


@pytest.mark.usefixtures("settled")
def test_a_cache_that_cannot_be_written_never_fails_a_create(tmp_path: Path) -> None:
    """A cache directory below a regular file (ENOTDIR): the spec is decoded as without a cache."""
    spec = nvidia_yaml(tmp_path)
    (tmp_path / "file").write_text("x")
    assert sorted(load_spec(str(spec), cache=str(tmp_path / "file" / "cache")).devices) == ["0", "1", "all"]


def test_entry_names_are_one_per_path() -> None:
    """``%`` and ``/`` escaped, so two paths never share an entry; relative or over-long paths: none."""
    assert speccache.entry_name("/etc/cdi/a%2Fb.yaml") == "%2Fetc%2Fcdi%2Fa%252Fb.yaml.json"
    assert speccache.entry_name("/etc/cdi%2Fa/b.yaml") == "%2Fetc%2Fcdi%252Fa%2Fb.yaml.json"
    assert speccache.entry_name("etc/cdi/a.yaml") is None
    assert speccache.entry_name("/" + "a" * 300 + ".yaml") is None


@pytest.mark.usefixtures("settled")
def test_remove_cache_removes_only_its_own_files(tmp_path: Path) -> None:
    """uninstall's removal takes entries and temp files of the cache's shapes, and keeps anything else
    (the directory is a setting: never a recursive delete)."""
    spec = nvidia_yaml(tmp_path)
    cache = tmp_path / "cache"
    load_spec(str(spec), cache=str(cache))
    (cache / ".%2Fx.yaml.json.1.0011aabb.tmp").write_text("")
    (cache / "kept.txt").write_text("not ours")
    assert not speccache.remove_cache(str(cache))
    assert sorted(path.name for path in cache.iterdir()) == ["kept.txt"]
    (cache / "kept.txt").unlink()
    assert speccache.remove_cache(str(cache))
    assert not cache.exists()
    assert speccache.remove_cache(str(cache))
