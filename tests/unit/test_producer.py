"""Unit tests for hook.producer.envfile: the env-file path scheme, the writer and the checker."""

from __future__ import annotations

import hmac
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO, env_settings
from envfile_comment_quote import comment_quote_file
from hypothesis import given, settings
from hypothesis import strategies as st

from hook.pipeline.envfile import load_env_file_bytes, parse_env_file
from hook.producer.envfile import (
    build_env_file,
    check_env_file,
    gc_env_files,
    quote_value,
    write_env_file,
)
from hook.producer.namekey import env_file_name, env_file_path, keyed_name, legacy_name, load_key
from hook.util.errors import EnvFileError, UsageError

VAR = "NVIDIA_ENV_FROM_FILE"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the writer chowns to root; the hook wants root files"
)


# --- path scheme -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param(["fake0", "fake1", "fake2"], id="kubelet-order"),
        pytest.param(["fake2", "fake0", "fake1"], id="shuffled"),
        pytest.param(["fake1", "fake0", "fake2", "fake0"], id="repeated-id"),
    ],
)
def test_env_file_name_depends_only_on_the_set_of_ids(ids: list[str]) -> None:
    """Allocate and PreStartContainer get the same name whatever the order or repetition of the ids: the
    HMAC-SHA256 of the sorted ids under the node's key, 32 hex digits (128 bits)."""
    key = b"k" * 32
    expected = hmac.new(key, b"fake0\nfake1\nfake2", "sha256").hexdigest()[:32] + ".env"
    assert env_file_name(ids, key) == expected
    assert env_file_name(ids) == env_file_name(ids, load_key())


def test_env_file_path_defaults_to_the_default_directory() -> None:
    """Without a directory the path lies in /run/nvidia-env, the default [env-file] directory."""
    assert env_file_path(["a"]) == "/run/nvidia-env/" + env_file_name(["a"])


def test_two_keys_give_different_names() -> None:
    """A tenant who knows the ids but not the node's key cannot compute the name."""
    assert env_file_name(["gpu-0"], b"a" * 32) != env_file_name(["gpu-0"], b"b" * 32)


@pytest.mark.parametrize(
    ("ids", "key", "name"),
    [
        pytest.param(["gpu-0", "gpu-1"], bytes(range(32)), "b606b7c15a2833dfd2025fdfaf54f660", id="two-ids"),
        pytest.param(["gpu-0"], b"k" * 65, "18b36cf22303dae2a7d51af3cd98ff9a", id="key-longer-than-a-block"),
    ],
)
def test_keyed_names_are_stable(ids: list[str], key: bytes, name: str) -> None:
    """Names are pinned: kubelet checkpoints the name Allocate answered, and every later PreStartContainer
    (after an upgrade too) must compute the same one. HMAC-SHA256, first 32 hex digits."""
    assert keyed_name(ids, key) == name
    assert hmac.new(key, "\n".join(ids).encode(), "sha256").hexdigest()[:32] == name


def test_legacy_names_are_stable() -> None:
    """The unkeyed names written before the key are still recognised: 16 hex digits of SHA-256."""
    assert legacy_name(["gpu-0", "gpu-1"]) == "4fb82653fcb77761"


def test_key_created_once_0600_and_kept(tmp_path: Path) -> None:
    """The first use creates the key, root-only 0600 in a 0700 directory; later uses (a producer restart)
    read the same key, so names stay."""
    path = str(tmp_path / "lib" / "alloc.key")
    key = load_key(path)
    assert len(key) == 32
    assert Path(path).stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "lib").stat().st_mode & 0o777 == 0o700
    assert load_key(path) == key
    assert [p.name for p in (tmp_path / "lib").iterdir()] == ["alloc.key"]  # no temporary file left


def test_racing_first_producers_agree(tmp_path: Path) -> None:
    """Producers racing on first use (separate processes) all end with the one key that won the link."""
    path = tmp_path / "alloc.key"
    code = "import sys; from hook.producer.namekey import load_key; sys.stdout.write(load_key(sys.argv[1]).hex())"
    racers = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
        for _ in range(8)
    ]
    keys = {racer.communicate(timeout=60)[0] for racer in racers}
    assert keys == {path.read_bytes().hex()}


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        pytest.param(b"short", 0o600, "holds 5 bytes, not a 32-byte key", id="wrong-size"),
        pytest.param(b"k" * 32, 0o644, "must be readable by its owner only (mode 0644)", id="readable"),
        pytest.param(None, 0o600, "is not a regular file", id="directory"),
    ],
)
def test_bad_key_refused_never_replaced(
    tmp_path: Path, content: bytes | None, mode: int, message: str
) -> None:
    """A key that is there but is no key is refused, and left as it is (never regenerated)."""
    path = tmp_path / "alloc.key"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
        path.chmod(mode)
    with pytest.raises(UsageError, match=rf"^naming key {path}: {re.escape(message)} \(it is never replaced"):
        env_file_name(["a"], load_key(str(path)))
    if content is not None:
        assert path.read_bytes() == content


def test_env_file_path_uses_the_given_directory() -> None:
    """A given directory is used as is."""
    assert env_file_path(["a", "b"], "/srv/env").startswith("/srv/env/")


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        pytest.param([], r"^env-file path: at least one device id is required$", id="no-ids"),
        pytest.param(
            ["a\nb"], r"^env-file path: a device id must be non-empty, without newline or NUL$", id="newline"
        ),
        pytest.param(
            [""], r"^env-file path: a device id must be non-empty, without newline or NUL$", id="empty"
        ),
    ],
)
def test_env_file_name_refuses_ids_that_make_the_hash_ambiguous(ids: list[str], message: str) -> None:
    """No ids, an empty id or an id with a newline is a usage error."""
    with pytest.raises(UsageError, match=message):
        env_file_name(ids)


# --- building and quoting --------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
            lambda k: (
                not k.startswith(("LD_", "PYTHON", "NVIDIA_CTK_", "GPU_ENV_HOOK_")) and k not in ("PATH", VAR)
            )
        ),
        st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=40),
        max_size=6,
    )
)
def test_built_file_parses_back_to_exactly_the_values(values: dict[str, str]) -> None:
    """Whatever the values (quotes, backslashes, newlines, '#', '${X}'), the hook's parser gives them back."""
    data = build_env_file(values, pod_uid="pod-1")
    parsed, reserved = parse_env_file(data, "/run/nvidia-env/x.env", variable=VAR)
    assert parsed == values
    assert reserved == {"GPU_ENV_HOOK_POD_UID": "pod-1"}


def test_quote_value_escapes_backslash_quote_and_newline() -> None:
    """Backslashes, double quotes and newlines are escaped inside double quotes."""
    assert quote_value('a\\b"c\nd') == '"a\\\\b\\"c\\nd"'


@pytest.mark.parametrize(
    ("values", "kwargs", "message"),
    [
        pytest.param(
            {"LD_PRELOAD": "x"},
            {},
            r"^env file '<env file>': key LD_PRELOAD matches LD_\* and may not be set "
            r"from an env file$",
            id="ld-prefix",
        ),
        pytest.param(
            {"PATH": "/x"}, {}, r"^env file '<env file>': key PATH matches PATH and may not", id="path"
        ),
        pytest.param(
            {"PYTHONPATH": "/x"}, {}, r"^env file '<env file>': key PYTHONPATH matches PYTHON\*", id="py"
        ),
        pytest.param(
            {"NVIDIA_CTK_X": "1"}, {}, r"^env file '<env file>': key NVIDIA_CTK_X matches", id="ctk"
        ),
        pytest.param({VAR: "/x"}, {}, rf"^env file '<env file>': key {VAR} matches {VAR} and", id="chaining"),
        pytest.param(
            {"GPU_ENV_HOOK_X": "1"},
            {},
            r"^env file '<env file>': key GPU_ENV_HOOK_X matches GPU_ENV_HOOK_\* "
            r"\(reserved\)",
            id="reserved-prefix",
        ),
        pytest.param(
            {"GPU_ENV_HOOK_POD_UID": "1"},
            {},
            r"^env file '<env file>': key GPU_ENV_HOOK_POD_UID is reserved: "
            r"give it with the pod / container options$",
            id="pin-as-value",
        ),
        pytest.param(
            {"1A": "x"},
            {},
            r"^env file '<env file>': key '1A' must match \[A-Za-z_\]\[A-Za-z0-9_\]\*$",
            id="bad-key",
        ),
        pytest.param(
            {"A": "x\0y"}, {}, r"^env file '<env file>': the value of A contains a NUL byte$", id="nul-value"
        ),
        pytest.param(
            {"A": "\udc80"},
            {},
            r"^env file '<env file>': the value of A is not encodable as UTF-8$",
            id="surrogate",
        ),
        pytest.param(
            {},
            {"container": "main"},
            r"^env file '<env file>': GPU_ENV_HOOK_CONTAINER_NAME needs "
            r"GPU_ENV_HOOK_POD_UID, or GPU_ENV_HOOK_POD_NAMESPACE and GPU_ENV_HOOK_POD_NAME$",
            id="container-without-pod",
        ),
        pytest.param(
            {},
            {"pod_namespace": "ns"},
            r"^env file '<env file>': GPU_ENV_HOOK_POD_NAMESPACE needs GPU_ENV_HOOK_POD_NAME$",
            id="namespace-without-name",
        ),
        pytest.param(
            {},
            {"pod_uid": ""},
            r"^env file '<env file>': GPU_ENV_HOOK_POD_UID must not be empty \(the hook refuses an empty pin\)$",
            id="empty-pod-uid",
        ),
        pytest.param(
            {},
            {"pod_uid": "p1", "container": ""},
            r"^env file '<env file>': GPU_ENV_HOOK_CONTAINER_NAME must not be empty "
            r"\(the hook refuses an empty pin\)$",
            id="empty-container-name",
        ),
        pytest.param(
            {"A": "x" * 70000},
            {},
            r"^env file '<env file>': would be \d+ bytes, over the limit of 65536 "
            r"\(env-file.max-bytes\)$",
            id="too-large",
        ),
    ],
)
def test_build_refuses_what_the_hook_would_refuse(
    values: dict[str, str], kwargs: dict[str, str], message: str
) -> None:
    """A key, value or pin the hook would refuse is refused before anything is written."""
    with pytest.raises(EnvFileError, match=message):
        build_env_file(values, **kwargs)  # type: ignore[arg-type]


# --- writing ---------------------------------------------------------------------------------------------


@needs_root
def test_write_creates_a_root_owned_0600_file_the_hook_accepts(env_dir: Path) -> None:
    """The written file is root-owned, mode 0600, one link, and the hook's loader and parser accept it."""
    path = env_dir / "abc.env"
    settings_ = env_settings(env_dir)
    os.umask(0o077)  # the mode must not depend on the caller's umask
    try:
        write_env_file(str(path), {"NVIDIA_VISIBLE_DEVICES": "0,1"}, pod_uid="u", settings=settings_)
    finally:
        os.umask(0o022)
    info = path.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), info.st_nlink) == (0, 0, 0o600, 1)
    data = load_env_file_bytes(str(path), settings_)
    assert parse_env_file(data, str(path), variable=VAR) == (
        {"NVIDIA_VISIBLE_DEVICES": "0,1"},
        {"GPU_ENV_HOOK_POD_UID": "u"},
    )
    assert sorted(p.name for p in env_dir.iterdir()) == ["abc.env"]


def test_write_refuses_a_path_outside_the_directories(env_dir: Path, tmp_path: Path) -> None:
    """The writer refuses a path the hook would refuse for its location."""
    outside = tmp_path / "elsewhere.env"
    with pytest.raises(
        EnvFileError, match=r"^env file '.*elsewhere.env': is not inside the env-file directories"
    ):
        write_env_file(str(outside), {"A": "1"}, settings=env_settings(env_dir))
    assert not outside.exists()


def test_write_refuses_a_missing_directory(env_dir: Path) -> None:
    """A missing directory below the configured one is reported with what to do."""
    path = env_dir / "sub" / "a.env"
    with pytest.raises(
        EnvFileError, match=r"^env file '.*': its directory does not exist \(create it root-owned"
    ):
        write_env_file(str(path), {"A": "1"}, settings=env_settings(env_dir))


@pytest.mark.parametrize(
    ("component", "message"),
    [
        pytest.param(
            "link", "component 1 below the env-file directory is a symlink", id="symlinked-directory"
        ),
        pytest.param(
            "file", "component 1 below the env-file directory is not a directory", id="file-on-the-way"
        ),
    ],
)
def test_write_walks_beneath_without_following_symlinks(
    env_dir: Path, tmp_path: Path, component: str, message: str
) -> None:
    """``<dir>/sub/x.env`` with ``sub`` a symlink (or a file) is refused exactly as the hook refuses it:
    nothing is written where the symlink points."""
    outside = tmp_path / "outside"
    outside.mkdir()
    if component == "link":
        (env_dir / "sub").symlink_to(outside)
    else:
        (env_dir / "sub").write_text("")
    path = env_dir / "sub" / "x.env"
    with pytest.raises(EnvFileError, match=rf"^env file '{re.escape(str(path))}': {message}$"):
        write_env_file(str(path), {"A": "1"}, settings=env_settings(env_dir))
    assert list(outside.iterdir()) == []


def test_write_replaces_a_symlink_leaf_instead_of_following_it(env_dir: Path, tmp_path: Path) -> None:
    """A symlink where the file goes is replaced by the new file; its target is never written."""
    target = tmp_path / "target"
    target.write_text("untouched\n")
    (env_dir / "x.env").symlink_to(target)
    write_env_file(str(env_dir / "x.env"), {"A": "1"}, settings=env_settings(env_dir))
    assert target.read_text() == "untouched\n"
    assert not (env_dir / "x.env").is_symlink()
    assert parse_env_file((env_dir / "x.env").read_bytes(), "/f", variable=VAR)[0] == {"A": "1"}


def test_write_into_a_nested_directory(env_dir: Path) -> None:
    """A real directory below the configured one is walked into and written."""
    (env_dir / "sub").mkdir()
    write_env_file(str(env_dir / "sub" / "x.env"), {"A": "1"}, settings=env_settings(env_dir))
    assert (env_dir / "sub" / "x.env").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in (env_dir / "sub").iterdir()) == ["x.env"]


@needs_root
def test_writer_racing_a_reader_never_yields_a_partial_file(env_dir: Path) -> None:
    """A reader looping on the hook's load + parse sees the old or the new file while a writer rewrites it."""
    path = str(env_dir / "race.env")
    settings_ = env_settings(env_dir)
    small = {"NVIDIA_VISIBLE_DEVICES": "0"}
    large = {"NVIDIA_VISIBLE_DEVICES": "0,1,2,3", **{f"PAD_{i}": "x" * 200 for i in range(40)}}
    write_env_file(path, small, settings=settings_)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            turn = 0
            while not stop.is_set():
                write_env_file(path, large if turn % 2 else small, settings=settings_)
                turn += 1
        except BaseException as err:  # noqa: BLE001 - reported to the main thread
            errors.append(err)

    thread = threading.Thread(target=writer)
    thread.start()
    seen: set[int] = set()
    try:
        for _ in range(1500):
            values, _reserved = parse_env_file(load_env_file_bytes(path, settings_), path, variable=VAR)
            assert values in (small, large)
            seen.add(len(values))
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert seen == {1, 41}, "the reader should have seen both versions"


# --- checking --------------------------------------------------------------------------------------------


def write_raw(path: Path, content: str, mode: int = 0o644) -> Path:
    """Write a file as-is with a mode (root-owned when the tests run as root)."""
    path.write_text(content, encoding="utf-8")
    path.chmod(mode)
    return path


@needs_root
def test_check_reports_every_step_of_an_accepted_file(env_dir: Path) -> None:
    """An accepted file passes location, file, binding and content (the pin first, as the hook checks it),
    and its variables are returned."""
    path = write_raw(env_dir / "a.env", "GPU_ENV_HOOK_POD_UID=p1\nA=1\nB='two'\n")
    report = check_env_file(str(path), env_settings(env_dir, pod_binding_engine="crio"), pod_uid="p1")
    assert report.ok
    assert [step.name for step in report.steps] == ["location", "file", "binding", "content"]
    assert report.values == {"A": "1", "B": "two"}
    assert report.pinned_pod_uid == "p1"
    assert report.steps[2].detail == "pinned to pod p1 (matches)"


@needs_root
def test_write_and_check_a_namespace_name_pin(env_dir: Path) -> None:
    """A plugin that knows the pod only from pod-resources List() pins the file by namespace and name."""
    settings_ = env_settings(env_dir, pod_binding_engine="containerd")
    path = str(env_dir / "a.env")
    write_env_file(path, {"A": "1"}, pod_namespace="ns", pod_name="web-0", settings=settings_)
    assert Path(path).read_text().splitlines()[1:] == [
        'GPU_ENV_HOOK_POD_NAMESPACE="ns"',
        'GPU_ENV_HOOK_POD_NAME="web-0"',
        'A="1"',
    ]
    report = check_env_file(path, settings_, pod_namespace="ns", pod_name="web-0")
    assert report.ok
    assert report.steps[2].detail == "pinned to pod ns/web-0 (matches)"
    assert report.pins == {"GPU_ENV_HOOK_POD_NAMESPACE": "ns", "GPU_ENV_HOOK_POD_NAME": "web-0"}
    report = check_env_file(path, settings_)
    assert report.steps[2].detail == (
        "pinned to pod ns/web-0 (give --pod-uid, or --pod-namespace and --pod-name, to check it against a pod)"
    )


@needs_root
@pytest.mark.parametrize(
    ("name", "content", "mode", "kwargs", "failed", "message"),
    [
        pytest.param(
            "../x.env", "A=1\n", 0o644, {}, "location", r"must not contain '\.' or '\.\.'", id="dotdot"
        ),
        pytest.param(
            "a.env", "A=1\n", 0o666, {}, "file", r"must not be group- or world-writable", id="writable"
        ),
        pytest.param("a.env", "A=1\nA=2\n", 0o644, {}, "content", r"line 2: duplicate key", id="duplicate"),
        pytest.param(
            "a.env",
            "GPU_ENV_HOOK_POD_UID=p1\nLD_PRELOAD=/x.so\n",
            0o644,
            {"pod_uid": "p2"},
            "binding",
            r"is pinned to another pod",
            id="other-pods-file-fails-on-the-pin-not-the-content",
        ),
        pytest.param(
            "a.env",
            "GPU_ENV_HOOK_POD_UID=p1\n",
            0o644,
            {"pod_uid": "p2"},
            "binding",
            r"is pinned to another pod",
            id="other-pod",
        ),
        pytest.param(
            "a.env",
            comment_quote_file("GPU_ENV_HOOK_POD_UID=p1"),
            0o644,
            {"pod_uid": "p2"},
            "binding",
            r"is pinned to another pod",
            id="pin-after-a-quote-in-a-comment",
        ),
        pytest.param(
            "a.env",
            comment_quote_file("LD_PRELOAD=/x.so"),
            0o644,
            {},
            "content",
            r"line 12: a key matching LD_\* may not be set",
            id="refused-key-after-a-quote-in-a-comment",
        ),
        pytest.param(
            "a.env",
            "GPU_ENV_HOOK_POD_NAMESPACE=ns\nGPU_ENV_HOOK_POD_NAME=web-0\n",
            0o644,
            {"pod_namespace": "ns", "pod_name": "web-1"},
            "binding",
            r"is pinned to another pod \(annotation io\.kubernetes\.cri\.sandbox-name differs\)$",
            id="other-pod-by-name",
        ),
        pytest.param(
            "a.env",
            "A=1\n",
            0o644,
            {"require_pod_binding": True},
            "binding",
            r"is not pinned to a pod \(GPU_ENV_HOOK_POD_UID, or GPU_ENV_HOOK_POD_NAMESPACE and GPU_ENV_HOOK_POD_NAME, "
            r"is required\)",
            id="pin-required",
        ),
    ],
)
def test_check_stops_at_the_first_failing_step(
    env_dir: Path,
    name: str,
    content: str,
    mode: int,
    kwargs: dict[str, object],
    failed: str,
    message: str,
) -> None:
    """The report names the step the hook would refuse at, with the hook's own message."""
    if name == "a.env":
        write_raw(env_dir / name, content, mode)
    required = bool(kwargs.pop("require_pod_binding", False))
    path = f"{env_dir}/{name}"
    settings = env_settings(env_dir, require_pod_binding=required, pod_binding_engine="containerd")
    report = check_env_file(path, settings, **kwargs)  # type: ignore[arg-type]
    assert not report.ok
    assert report.steps[-1].name == failed
    assert not report.steps[-1].ok
    assert all(step.ok for step in report.steps[:-1])
    assert re.search(message, report.steps[-1].detail)


def test_device_plugin_api_has_its_own_home_above_the_hook() -> None:
    """hook.deviceplugin gives the producer's functions; hook.pipeline.envfile neither re-exports them nor ever loads
    hook.producer.envfile (no module lower in the stack imports one above it)."""
    import subprocess
    import sys

    code = (
        "import sys, hook.pipeline.envfile as e; "
        "print(hasattr(e, 'write_env_file'), 'hook.producer.envfile' in sys.modules, 'hook.deviceplugin' in sys.modules); "
        "from hook.deviceplugin import write_env_file, env_file_path, check_env_file; "
        "import hook.producer.envfile as p, hook.producer.namekey as n; "
        "print(write_env_file is p.write_env_file, env_file_path is n.env_file_path, "
        "check_env_file is p.check_env_file)"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout == "False False False\nTrue True True\n"


# --- collecting ------------------------------------------------------------------------------------------


@needs_root
def test_env_file_gc_removes_dead_pods_files_only(env_dir: Path) -> None:
    """env-file gc: files written for pods that are gone go; live pods' files, unpinned files and files it
    did not write stay; a file it cannot read is reported (exit 1 in the command) and the rest still done."""
    settings_ = env_settings(env_dir, pod_binding_engine="containerd")

    def write(ids: list[str], **pins: str) -> Path:
        path = env_file_path(ids, str(env_dir))
        write_env_file(path, {"A": "1"}, settings=settings_, **pins)  # type: ignore[arg-type]
        return Path(path)

    dead_uid = write(["a"], pod_uid="dead")
    live_uid = write(["b"], pod_uid="live")
    dead_name = write(["c"], pod_namespace="ns", pod_name="gone-0")
    live_name = write(["d"], pod_namespace="ns", pod_name="web-0")
    unpinned = write(["e"])
    legacy = write_raw(env_dir / "0123456789abcdef.env", "GPU_ENV_HOOK_POD_UID=dead\nA=1\n", 0o600)
    foreign = write_raw(env_dir / "notes.env", "GPU_ENV_HOOK_POD_UID=dead\n", 0o600)
    loose = write_raw(env_dir / ("f" * 32 + ".env"), "GPU_ENV_HOOK_POD_UID=dead\n", 0o666)
    removed, failed = gc_env_files(frozenset({"live", "ns/web-0"}), settings_)
    assert sorted(removed) == sorted([str(legacy), str(dead_uid), str(dead_name)])
    assert failed == [f"env file '{loose}': must not be group- or world-writable (mode 0666) (kept)"]
    assert all(p.exists() for p in (live_uid, live_name, unpinned, foreign, loose))
    # Without --live (kubelet's directories name UIDs only) a namespace/name file is kept.
    dead_name = write(["c"], pod_namespace="ns", pod_name="gone-0")
    assert gc_env_files(frozenset({"live"}), settings_, names_known=False)[0] == []
    assert dead_name.exists()


@needs_root
def test_env_file_gc_command(env_dir: Path, tmp_path: Path) -> None:
    """gpu-env-hook env-file gc: one 'removed' line per file, one line on stderr per file it could not read,
    exit 1 then; kubelet's pod directories say who is alive when --live is not given."""
    config = tmp_path / "config.toml"
    config.write_text(f'[env-file]\ndirectories = ["{env_dir}"]\n')
    settings_ = env_settings(env_dir)
    gone = Path(env_file_path(["a"], str(env_dir)))
    write_env_file(str(gone), {"A": "1"}, pod_uid="gone", settings=settings_)
    alive = Path(env_file_path(["b"], str(env_dir)))
    write_env_file(str(alive), {"A": "1"}, pod_uid="alive", settings=settings_)
    (tmp_path / "pods" / "alive").mkdir(parents=True)
    hook = [sys.executable, "-I", "-m", "hook", "-config", str(config), "env-file", "gc"]
    done = subprocess.run(
        [*hook, "--kubelet-pods", str(tmp_path / "pods")],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"removed {gone}\n", "")
    assert alive.exists()
    loose = write_raw(env_dir / ("e" * 32 + ".env"), "GPU_ENV_HOOK_POD_UID=gone\n", 0o666)
    done = subprocess.run([*hook, "--live", "x"], capture_output=True, text=True, cwd=REPO, check=False)
    assert (done.returncode, done.stdout) == (1, f"removed {alive}\n")
    assert done.stderr == (
        f"gpu-env-hook: env file '{loose}': must not be group- or world-writable (mode 0666) (kept)\n"
    )
