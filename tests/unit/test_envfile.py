"""Unit tests for hook.pipeline.envfile: safe opening, strict parsing, pod binding and merging."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest
from conftest import env_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from hook.pipeline.envfile import (
    load_env_file_bytes,
    merge_env,
    parse_env_file,
    resolve_binding,
    resolve_env_file,
)
from hook.util.beneath import open_beneath, split_beneath
from hook.util.errors import EnvFileError, EnvFileMissingError

VAR = "NVIDIA_ENV_FROM_FILE"


def write(path: Path, content: bytes | str, mode: int = 0o644) -> Path:
    """Write a file with a mode (root-owned: the tests run as root)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    path.chmod(mode)
    return path


# --- split_beneath: pure path rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "directories", "expected"),
    [
        pytest.param(
            "/run/nvidia-env/a.env", ("/run/nvidia-env",), ("/run/nvidia-env", ["a.env"]), id="direct-child"
        ),
        pytest.param(
            "/run/nvidia-env/x/a.env", ("/run/nvidia-env",), ("/run/nvidia-env", ["x", "a.env"]), id="nested"
        ),
        pytest.param(
            "/run//nvidia-env///a.env", ("/run/nvidia-env",), ("/run/nvidia-env", ["a.env"]), id="slashes"
        ),
        pytest.param("/b/a.env", ("/a", "/b/"), ("/b/", ["a.env"]), id="second-directory"),
    ],
)
def test_split_beneath_accepts(
    path: str, directories: tuple[str, ...], expected: tuple[str, list[str]]
) -> None:
    """A path below a configured directory splits into that directory and the components beneath it."""
    assert split_beneath(path, directories) == expected


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param("a.env", r"^env file 'a\.env': must be an absolute path$", id="relative"),
        pytest.param("", r"^env file '': must be an absolute path$", id="empty"),
        pytest.param(
            "/run/nvidia-env/../etc/shadow",
            r"^env file '/run/nvidia-env/\.\./etc/shadow': must not contain '\.' or '\.\.' components$",
            id="dot-dot",
        ),
        pytest.param(
            "/run/nvidia-env/./a.env",
            r"^env file '/run/nvidia-env/\./a\.env': must not contain '\.' or '\.\.' components$",
            id="dot",
        ),
        pytest.param(
            "/etc/passwd",
            r"^env file '/etc/passwd': is not inside the env-file directories \(/run/nvidia-env\)$",
            id="outside",
        ),
        pytest.param(
            "/run/nvidia-env",
            r"^env file '/run/nvidia-env': is not inside the env-file directories \(/run/nvidia-env\)$",
            id="the-directory-itself",
        ),
        pytest.param(
            "/run/nvidia-envx/a.env",
            r"^env file '/run/nvidia-envx/a\.env': is not inside the env-file directories \(/run/nvidia-env\)$",
            id="textual-prefix-is-not-enough",
        ),
    ],
)
def test_split_beneath_refuses(path: str, message: str) -> None:
    """Relative paths, dot components and paths outside the directories are refused by name."""
    with pytest.raises(EnvFileError, match=message):
        split_beneath(path, ("/run/nvidia-env",))


def test_newline_in_path_is_escaped(env_dir: Path) -> None:
    """A path with a newline is shown escaped, so the refusal stays one line."""
    with pytest.raises(EnvFileMissingError) as info:
        open_beneath(f"{env_dir}/a\nb", (str(env_dir),))
    assert "\n" not in str(info.value)
    assert str(info.value) == f"env file '{env_dir}/a\\nb': does not exist"


def test_long_path_is_truncated(env_dir: Path) -> None:
    """A huge tenant path is cut in the message."""
    path = f"{env_dir}/{'x' * 5000}"
    with pytest.raises(EnvFileError) as info:
        open_beneath(path, (str(env_dir),))
    assert len(str(info.value)) < 400


# --- open_beneath / load_env_file_bytes: the file system ---------------------------------------------------


def test_reads_a_good_file(env_dir: Path) -> None:
    """A root-owned 0644 regular file below the directory is read."""
    path = write(env_dir / "a.env", "A=1\n")
    assert load_env_file_bytes(str(path), env_settings(env_dir)) == b"A=1\n"


def test_reads_through_a_symlinked_configured_directory(tmp_path: Path, env_dir: Path) -> None:
    """The configured directory is the administrator's: a symlink in it (like /var/run) is followed."""
    write(env_dir / "a.env", "A=1\n")
    alias = tmp_path / "alias"
    alias.symlink_to(env_dir)
    assert load_env_file_bytes(f"{alias}/a.env", env_settings(alias)) == b"A=1\n"


def refusal(env_dir: Path, name: str) -> str:
    """Return the message for the file ``name`` below env_dir."""
    with pytest.raises(EnvFileError) as info:
        load_env_file_bytes(f"{env_dir}/{name}", env_settings(env_dir))
    return str(info.value)


def test_symlink_as_last_component(env_dir: Path, tmp_path: Path) -> None:
    """A symlink as the file itself is refused, even to a good file."""
    target = write(tmp_path / "elsewhere.env", "A=1\n")
    (env_dir / "a.env").symlink_to(target)
    assert refusal(env_dir, "a.env") == f"env file '{env_dir}/a.env': is a symlink, not a regular file"


def test_symlink_as_middle_component(env_dir: Path, tmp_path: Path) -> None:
    """A symlinked directory between the configured directory and the file is refused."""
    write(tmp_path / "real" / "a.env", "A=1\n")
    (env_dir / "sub").symlink_to(tmp_path / "real")
    assert refusal(env_dir, "sub/a.env") == (
        f"env file '{env_dir}/sub/a.env': component 1 below the env-file directory is a symlink"
    )


def test_file_as_middle_component(env_dir: Path) -> None:
    """A regular file used as a directory is refused."""
    write(env_dir / "sub", "A=1\n")
    assert refusal(env_dir, "sub/a.env") == (
        f"env file '{env_dir}/sub/a.env': component 1 below the env-file directory is not a directory"
    )


def test_fifo_is_refused_without_blocking(env_dir: Path) -> None:
    """A FIFO is refused at once: it is never opened, so no writer is waited for."""
    os.mkfifo(env_dir / "a.env")
    start = time.monotonic()
    assert refusal(env_dir, "a.env") == f"env file '{env_dir}/a.env': is a FIFO, not a regular file"
    assert time.monotonic() - start < 1


def test_directory_is_refused(env_dir: Path) -> None:
    """A directory is not an env file."""
    (env_dir / "a.env").mkdir()
    assert refusal(env_dir, "a.env") == f"env file '{env_dir}/a.env': is a directory, not a regular file"


def test_device_node_is_refused(env_dir: Path) -> None:
    """A character device (here a copy of /dev/null) is refused without being opened."""
    os.mknod(env_dir / "a.env", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    assert (
        refusal(env_dir, "a.env") == f"env file '{env_dir}/a.env': is a character device, not a regular file"
    )


def test_socket_is_refused(env_dir: Path) -> None:
    """A unix socket is refused."""
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(env_dir / "a.env"))
        assert refusal(env_dir, "a.env") == f"env file '{env_dir}/a.env': is a socket, not a regular file"
    finally:
        sock.close()


def test_too_large(env_dir: Path) -> None:
    """One byte over max-bytes is refused."""
    path = write(env_dir / "a.env", b"A=" + b"x" * 100)
    with pytest.raises(EnvFileError, match=r"is larger than the limit of 50 bytes \(env-file\.max-bytes\)$"):
        load_env_file_bytes(str(path), env_settings(env_dir, max_bytes=50))


def test_exactly_max_bytes_is_fine(env_dir: Path) -> None:
    """A file of exactly max-bytes is read whole."""
    path = write(env_dir / "a.env", b"A=" + b"x" * 48)
    assert len(load_env_file_bytes(str(path), env_settings(env_dir, max_bytes=50))) == 50


def test_sparse_huge_file_is_refused_fast(env_dir: Path) -> None:
    """A sparse 8 GiB file is refused after reading max-bytes+1 bytes: fast, bounded memory."""
    path = env_dir / "a.env"
    with path.open("wb") as fh:
        fh.truncate(8 * 1024**3)
    path.chmod(0o644)
    start = time.monotonic()
    assert refusal(env_dir, "a.env").endswith("is larger than the limit of 65536 bytes (env-file.max-bytes)")
    assert time.monotonic() - start < 1


def test_wrong_owner(env_dir: Path) -> None:
    """A file not owned by root is refused."""
    path = write(env_dir / "a.env", "A=1\n")
    os.chown(path, 1000, 1000)
    assert (
        refusal(env_dir, "a.env")
        == f"env file '{env_dir}/a.env': must be owned by root (uid 0), is owned by uid 1000"
    )


@pytest.mark.parametrize(
    "mode", [pytest.param(0o664, id="group-writable"), pytest.param(0o646, id="world-writable")]
)
def test_writable_by_others(env_dir: Path, mode: int) -> None:
    """A file others may write is refused."""
    write(env_dir / "a.env", "A=1\n", mode)
    assert refusal(env_dir, "a.env") == (
        f"env file '{env_dir}/a.env': must not be group- or world-writable (mode {mode:04o})"
    )


def test_two_hard_links(env_dir: Path) -> None:
    """A file with a second hard link is refused (it could be a link to any root file)."""
    path = write(env_dir / "a.env", "A=1\n")
    os.link(path, env_dir / "b.env")
    assert refusal(env_dir, "a.env") == f"env file '{env_dir}/a.env': must have exactly one hard link, has 2"


@pytest.mark.parametrize(
    "name", [pytest.param("a.env", id="missing-file"), pytest.param("sub/a.env", id="missing-directory")]
)
def test_missing_is_its_own_error(env_dir: Path, name: str) -> None:
    """A missing file or directory raises EnvFileMissingError, so on-missing can decide."""
    with pytest.raises(
        EnvFileMissingError, match=r"^env file '.*': does not exist( \(no such directory\))?$"
    ):
        load_env_file_bytes(f"{env_dir}/{name}", env_settings(env_dir))


def test_missing_configured_directory(tmp_path: Path) -> None:
    """A configured directory that does not exist means the file is missing."""
    with pytest.raises(EnvFileMissingError):
        load_env_file_bytes(f"{tmp_path}/none/a.env", env_settings(tmp_path / "none"))


# --- parse_env_file: strict dotenv ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("A=1\nB=two\n", {"A": "1", "B": "two"}, id="plain"),
        pytest.param("# comment\n\nA=1\n  # indented comment\n", {"A": "1"}, id="comments-and-blank-lines"),
        pytest.param("export A=1\n", {"A": "1"}, id="export-prefix"),
        pytest.param("A='x y'\nB=\"a\\nb\"\n", {"A": "x y", "B": "a\nb"}, id="quotes"),
        pytest.param("A=${HOME}\nB=$C\n", {"A": "${HOME}", "B": "$C"}, id="no-interpolation"),
        pytest.param("A=\n", {"A": ""}, id="empty-value"),
        pytest.param("A=1 # trailing comment\n", {"A": "1"}, id="trailing-comment"),
        pytest.param("\ufeffA=1\n", {"A": "1"}, id="utf8-bom"),
        pytest.param("A=1", {"A": "1"}, id="no-final-newline"),
        pytest.param("_A9=1\n", {"_A9": "1"}, id="underscore-and-digits"),
        pytest.param("A=héllo\n", {"A": "héllo"}, id="utf8-value"),
    ],
)
def test_parse_accepts(content: str, expected: dict[str, str]) -> None:
    """Comments, blank lines, quotes and export prefixes are fine; ${X} stays literal."""
    assert parse_env_file(content.encode(), "/f", variable=VAR) == (expected, {})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(
            b"A=1\nB\n", r"^env file '/f' line 2: a key has no '=' \(KEY=value expected\)$", id="no-equals"
        ),
        pytest.param(
            b"A=1\n1A=2\n",
            r"^env file '/f' line 2: a key must match \[A-Za-z_\]\[A-Za-z0-9_\]\*$",
            id="digit-first",
        ),
        pytest.param(b"A-B=1\n", r"^env file '/f' line 1: a key must match .*$", id="dash-in-key"),
        pytest.param(
            b"A=1\nA=2\n", r"^env file '/f' line 2: duplicate key \(first set on line 1\)$", id="duplicate"
        ),
        pytest.param(
            b"A='unterminated\n", r"^env file '/f' line 1: is not a valid dotenv line$", id="parse-error"
        ),
        pytest.param(b"A=1\nB=\x00x\n", r"^env file '/f' line 2: contains a NUL byte$", id="nul"),
        pytest.param(b"A=1\n\nB=\xff\n", r"^env file '/f' line 3: is not valid UTF-8$", id="invalid-utf8"),
        pytest.param(
            b"LD_PRELOAD=/x.so\n",
            r"^env file '/f' line 1: a key matching LD_\* may not be set from an env file$",
            id="ld-preload",
        ),
        pytest.param(
            b"PATH=/x\n",
            r"^env file '/f' line 1: a key matching PATH may not be set from an env file$",
            id="path",
        ),
        pytest.param(
            b"PYTHONPATH=/x\n",
            r"^env file '/f' line 1: a key matching PYTHON\* may not be set .*$",
            id="pythonpath",
        ),
        pytest.param(
            b"NVIDIA_CTK_CONFIG_FILE_PATH=/x\n",
            r"^.* line 1: a key matching NVIDIA_CTK_\* may not .*$",
            id="ctk",
        ),
        pytest.param(
            b"NVIDIA_ENV_FROM_FILE=/run/x\n",
            r"^env file '/f' line 1: a key matching NVIDIA_ENV_FROM_FILE may not be set from an env file$",
            id="no-chaining",
        ),
        pytest.param(
            b"GPU_ENV_HOOK_X=1\n",
            r"^.* line 1: a key matching GPU_ENV_HOOK_\* \(reserved\) may not .*$",
            id="reserved-namespace",
        ),
    ],
)
def test_parse_refuses_the_whole_file(content: bytes, message: str) -> None:
    """Each strictness rule refuses the whole file and names the line."""
    with pytest.raises(EnvFileError, match=message):
        parse_env_file(content, "/f", variable=VAR)


def test_chaining_rule_follows_the_configured_variable() -> None:
    """The variable itself is refused under its configured name, and the default name is then an ordinary key."""
    with pytest.raises(EnvFileError, match=r"a key matching MY_FILE may not be set"):
        parse_env_file(b"MY_FILE=/x\n", "/f", variable="MY_FILE")
    assert parse_env_file(b"NVIDIA_ENV_FROM_FILE=/x\n", "/f", variable="MY_FILE")[0] == {
        "NVIDIA_ENV_FROM_FILE": "/x"
    }


def test_reserved_keys_are_split_off() -> None:
    """Pin keys are returned apart from the variables to merge."""
    values, reserved = parse_env_file(
        b"GPU_ENV_HOOK_POD_UID=u1\nGPU_ENV_HOOK_CONTAINER_NAME=c\nA=1\n", "/f", variable=VAR
    )
    assert values == {"A": "1"}
    assert reserved == {"GPU_ENV_HOOK_POD_UID": "u1", "GPU_ENV_HOOK_CONTAINER_NAME": "c"}


MARK = "QZXW"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data: bytes) -> None:
    """Random bytes either parse or raise EnvFileError with a one-line message: nothing else escapes."""
    try:
        values, reserved = parse_env_file(data, "/f", variable=VAR)
    except EnvFileError as err:
        assert "\n" not in str(err)  # noqa: PT017 - hypothesis explores both outcomes; no raises() here
        assert str(err).startswith("env file '/f'")  # noqa: PT017
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in {**values, **reserved}.items())


secret_text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\0"), max_size=20).map(
    lambda s: f"{MARK}{s}"
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "LD_X", "1B", "PATH", f"{MARK}K", "A", "GPU_ENV_HOOK_Q", "B"]),
            st.sampled_from(["=", "", " = ", '="', "='"]),
            secret_text,
        ),
        max_size=6,
    )
)
def test_refusals_never_echo_content(lines: list[tuple[str, str, str]]) -> None:
    """Whatever the file holds, a refusal never quotes its keys or values (every value carries a marker)."""
    data = "\n".join(f"{key}{sep}{value}" for key, sep, value in lines).encode()
    try:
        parse_env_file(data, "/f", variable=VAR)
    except EnvFileError as err:
        assert MARK not in str(err)  # noqa: PT017 - hypothesis explores both outcomes; no raises() here
        assert "\n" not in str(err)  # noqa: PT017


# --- pod binding ---------------------------------------------------------------------------------------------

CONTAINERD = {
    "io.kubernetes.cri.sandbox-uid": "uid-1",
    "io.kubernetes.cri.sandbox-namespace": "ns-1",
    "io.kubernetes.cri.sandbox-name": "pod-1",
    "io.kubernetes.cri.container-name": "main",
}
CRIO = {
    "io.kubernetes.pod.uid": "uid-1",
    "io.kubernetes.pod.namespace": "ns-1",
    "io.kubernetes.pod.name": "pod-1",
    "io.kubernetes.container.name": "main",
}
POD = "GPU_ENV_HOOK_POD_UID"
NAMESPACE = "GPU_ENV_HOOK_POD_NAMESPACE"
NAME = "GPU_ENV_HOOK_POD_NAME"
CONTAINER = "GPU_ENV_HOOK_CONTAINER_NAME"
BY_NAME = {NAMESPACE: "ns-1", NAME: "pod-1"}


@pytest.mark.parametrize(
    ("pins", "annotations", "engine", "required", "pinned"),
    [
        pytest.param({}, {}, "none", False, False, id="unpinned"),
        pytest.param({}, {}, "podman", False, False, id="unpinned-podman"),
        pytest.param({POD: "uid-1"}, CONTAINERD, "containerd", False, True, id="containerd-pod"),
        pytest.param({POD: "uid-1"}, CRIO, "crio", False, True, id="crio-pod"),
        pytest.param(
            {POD: "uid-1", CONTAINER: "main"},
            CONTAINERD,
            "containerd",
            True,
            True,
            id="containerd-pod-and-container",
        ),
        pytest.param(
            {POD: "uid-1", CONTAINER: "main"}, CRIO, "crio", True, True, id="crio-pod-and-container"
        ),
        pytest.param(
            {POD: "uid-1"},
            {**CRIO, "io.kubernetes.cri.sandbox-uid": "uid-9"},
            "crio",
            False,
            True,
            id="crio-ignores-a-pod-annotation-with-containerds-key",
        ),
        pytest.param(BY_NAME, CONTAINERD, "containerd", True, True, id="containerd-namespace-name"),
        pytest.param(BY_NAME, CRIO, "crio", True, True, id="crio-namespace-name"),
        pytest.param(
            {**BY_NAME, CONTAINER: "main"}, CRIO, "crio", True, True, id="crio-namespace-name-container"
        ),
        pytest.param({**BY_NAME, POD: "uid-1"}, CONTAINERD, "containerd", True, True, id="uid-and-name"),
    ],
)
def test_binding_accepts(
    pins: dict[str, str], annotations: dict[str, str], engine: str, required: bool, pinned: bool
) -> None:
    """A pin that matches the annotations of the configured engine binds the file."""
    assert resolve_binding(pins, annotations, "/f", required=required, engine=engine) is pinned


@pytest.mark.parametrize(
    ("pins", "annotations", "engine", "required", "message"),
    [
        pytest.param(
            {POD: "uid-2"},
            CONTAINERD,
            "containerd",
            False,
            r"^env file '/f': is pinned to another pod \(annotation io\.kubernetes\.cri\.sandbox-uid differs\)$",
            id="pod-mismatch",
        ),
        pytest.param(
            {POD: "uid-1", CONTAINER: "sidecar"},
            CRIO,
            "crio",
            False,
            r"^env file '/f': is pinned to another container \(annotation io\.kubernetes\.container\.name differs\)$",
            id="container-mismatch",
        ),
        pytest.param(
            {POD: "victim"},
            {**CRIO, "io.kubernetes.cri.sandbox-uid": "victim"},
            "crio",
            False,
            r"^env file '/f': is pinned to another pod \(annotation io\.kubernetes\.pod\.uid differs\)$",
            id="crio-bypass-pod-annotated-with-containerds-uid-key",
        ),
        pytest.param(
            {POD: "uid-1", CONTAINER: "victim"},
            {**CRIO, "io.kubernetes.cri.container-name": "victim"},
            "crio",
            False,
            r"^env file '/f': is pinned to another container "
            r"\(annotation io\.kubernetes\.container\.name differs\)$",
            id="crio-bypass-pod-annotated-with-containerds-name-key",
        ),
        pytest.param(
            {POD: "victim"},
            {"io.kubernetes.cri.sandbox-uid": "victim"},
            "crio",
            False,
            r"^env file '/f': is pinned to a pod but the container has no io\.kubernetes\.pod\.uid annotation "
            r"\(pod-binding-engine crio\)$",
            id="crio-missing-key-never-falls-back",
        ),
        pytest.param(
            {POD: "victim"},
            {"io.kubernetes.pod.uid": "victim"},
            "containerd",
            False,
            r"^env file '/f': is pinned to a pod but the container has no io\.kubernetes\.cri\.sandbox-uid "
            r"annotation \(pod-binding-engine containerd\)$",
            id="containerd-missing-key-never-falls-back",
        ),
        pytest.param(
            {POD: "uid-1", CONTAINER: "main"},
            {"io.kubernetes.cri.sandbox-uid": "uid-1", "io.kubernetes.container.name": "main"},
            "containerd",
            False,
            r"^env file '/f': is pinned to a container but the container has no "
            r"io\.kubernetes\.cri\.container-name annotation \(pod-binding-engine containerd\)$",
            id="containerd-missing-container-key",
        ),
        pytest.param(
            {POD: "uid-1"},
            CONTAINERD,
            "none",
            False,
            r"^env file '/f': is pinned to a pod, but no pod-binding-engine is set "
            r"\(env-file\.pod-binding-engine, or GPU_ENV_HOOK_ENGINE from install --engine\)$",
            id="no-engine",
        ),
        pytest.param(
            {POD: "uid-1"},
            CRIO,
            "podman",
            False,
            r"^env file '/f': is pinned to a pod, but pod-binding-engine is podman, whose annotations are "
            r"chosen by whoever starts the container: the pin cannot be checked$",
            id="podman",
        ),
        pytest.param(
            {CONTAINER: "main"},
            CONTAINERD,
            "containerd",
            False,
            r"^env file '/f': GPU_ENV_HOOK_CONTAINER_NAME needs GPU_ENV_HOOK_POD_UID, or "
            r"GPU_ENV_HOOK_POD_NAMESPACE and GPU_ENV_HOOK_POD_NAME$",
            id="container-without-pod",
        ),
        pytest.param(
            {NAMESPACE: "ns-1"},
            CONTAINERD,
            "containerd",
            False,
            r"^env file '/f': GPU_ENV_HOOK_POD_NAMESPACE needs GPU_ENV_HOOK_POD_NAME$",
            id="namespace-without-name",
        ),
        pytest.param(
            {NAME: "pod-1", POD: "uid-1"},
            CONTAINERD,
            "containerd",
            False,
            r"^env file '/f': GPU_ENV_HOOK_POD_NAME needs GPU_ENV_HOOK_POD_NAMESPACE$",
            id="name-without-namespace",
        ),
        pytest.param(
            {NAMESPACE: "ns-1", NAME: "other"},
            CONTAINERD,
            "containerd",
            False,
            r"^env file '/f': is pinned to another pod \(annotation io\.kubernetes\.cri\.sandbox-name differs\)$",
            id="containerd-other-pod-name",
        ),
        pytest.param(
            {NAMESPACE: "other", NAME: "pod-1"},
            CRIO,
            "crio",
            False,
            r"^env file '/f': is pinned to another pod \(annotation io\.kubernetes\.pod\.namespace differs\)$",
            id="crio-same-name-other-namespace",
        ),
        pytest.param(
            {**BY_NAME, POD: "uid-2"},
            CONTAINERD,
            "containerd",
            False,
            r"^env file '/f': is pinned to another pod \(annotation io\.kubernetes\.cri\.sandbox-uid differs\)$",
            id="uid-differs-name-matches",
        ),
        pytest.param(
            BY_NAME,
            {"io.kubernetes.pod.namespace": "ns-1", "io.kubernetes.pod.name": "pod-1"},
            "containerd",
            False,
            r"^env file '/f': is pinned to a pod but the container has no io\.kubernetes\.cri\.sandbox-namespace "
            r"annotation \(pod-binding-engine containerd\)$",
            id="containerd-name-never-from-pod-keys",
        ),
        pytest.param(
            BY_NAME,
            CONTAINERD,
            "docker",
            False,
            r"^env file '/f': is pinned to a pod, but pod-binding-engine is docker, whose annotations are "
            r"chosen by whoever starts the container: the pin cannot be checked$",
            id="docker-namespace-name",
        ),
        pytest.param(
            {},
            CONTAINERD,
            "containerd",
            True,
            r"^env file '/f': is not pinned to a pod \(GPU_ENV_HOOK_POD_UID, or GPU_ENV_HOOK_POD_NAMESPACE and "
            r"GPU_ENV_HOOK_POD_NAME, is required\)$",
            id="pin-required",
        ),
    ],
)
def test_binding_refuses(
    pins: dict[str, str], annotations: dict[str, str], engine: str, required: bool, message: str
) -> None:
    """A mismatched, unverifiable or missing-but-required pin refuses the file without naming the values; only
    the configured engine's keys count, whatever else the container's annotations hold."""
    with pytest.raises(EnvFileError, match=message):
        resolve_binding(pins, annotations, "/f", required=required, engine=engine)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(
            "GPU_ENV_HOOK_POD_UID=\nA=1\n",
            r"^env file '/f' line 1: GPU_ENV_HOOK_POD_UID must not be empty$",
            id="empty-pod-uid",
        ),
        pytest.param(
            "GPU_ENV_HOOK_POD_UID=u\nGPU_ENV_HOOK_CONTAINER_NAME=''\n",
            r"^env file '/f' line 2: GPU_ENV_HOOK_CONTAINER_NAME must not be empty$",
            id="empty-container-name",
        ),
        pytest.param(
            "GPU_ENV_HOOK_POD_UID=u\nGPU_ENV_HOOK_POD_UID=v\n",
            r"^env file '/f' line 2: duplicate key \(first set on line 1\)$",
            id="pin-set-twice",
        ),
        pytest.param(
            "GPU_ENV_HOOK_POD_UID\n",
            r"^env file '/f' line 1: GPU_ENV_HOOK_POD_UID has no '=' \(GPU_ENV_HOOK_POD_UID=value expected\)$",
            id="pin-without-equals",
        ),
    ],
)
def test_ambiguous_pins_are_refused(content: str, message: str) -> None:
    """An empty, repeated or valueless pin refuses the file (an empty pin would match an empty annotation)."""
    with pytest.raises(EnvFileError, match=message):
        parse_env_file(content.encode(), "/f", variable=VAR)


def test_empty_pin_never_matches_an_empty_annotation(env_dir: Path) -> None:
    """The hook refuses ``GPU_ENV_HOOK_POD_UID=`` even for a container whose pod annotation is empty."""
    write(env_dir / "a.env", "GPU_ENV_HOOK_POD_UID=\nNVIDIA_VISIBLE_DEVICES=0\n")
    settings = env_settings(env_dir, pod_binding_engine="crio")
    with pytest.raises(
        EnvFileError, match=r"^env file '.*/a\.env' line 1: GPU_ENV_HOOK_POD_UID must not be empty$"
    ):
        resolve_env_file({VAR: f"{env_dir}/a.env"}, {"io.kubernetes.pod.uid": ""}, settings)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("GPU_ENV_HOOK_POD_UID=victim\nLD_PRELOAD=/x.so\n", id="refused-key"),
        pytest.param("GPU_ENV_HOOK_POD_UID=victim\nA=1\nA=2\n", id="duplicate-key"),
        pytest.param("GPU_ENV_HOOK_POD_UID=victim\n1A=2\n", id="bad-key"),
        pytest.param("GPU_ENV_HOOK_POD_UID=victim\nB\n", id="no-equals"),
        pytest.param("GPU_ENV_HOOK_POD_UID=victim\nB=\x00\n", id="nul"),
        pytest.param("GPU_ENV_HOOK_POD_UID=victim\nB=\xff\n", id="invalid-utf8"),
        pytest.param("GPU_ENV_HOOK_POD_UID=victim\nB='unterminated\n", id="syntax-error-after-the-pin"),
        pytest.param("LD_PRELOAD=/x.so\nGPU_ENV_HOOK_POD_UID=victim\n", id="pin-after-the-bad-line"),
    ],
)
def test_another_pods_file_reveals_only_the_pin(env_dir: Path, content: str) -> None:
    """Naming another pod's pinned file is refused for the pin, never for which content rule the file breaks."""
    write(env_dir / "a.env", content.encode("latin-1"))
    settings = env_settings(env_dir, pod_binding_engine="containerd")
    with pytest.raises(
        EnvFileError,
        match=r"^env file '.*/a\.env': is pinned to another pod \(annotation io\.kubernetes\.cri\.sandbox-uid "
        r"differs\)$",
    ):
        resolve_env_file({VAR: f"{env_dir}/a.env"}, CONTAINERD, settings)


# --- merging -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "values", "expected"),
    [
        pytest.param(["A=1"], {}, ["A=1"], id="nothing-to-merge"),
        pytest.param(["A=1", "B=2"], {"A": "9"}, ["A=9", "B=2"], id="replace-in-place"),
        pytest.param(["A=1"], {"C": "3"}, ["A=1", "C=3"], id="append-new"),
        pytest.param(["A=1", "B=2", "A=3"], {"A": "9"}, ["A=9", "B=2"], id="duplicates-collapse"),
        pytest.param(["A=1"], {"C": "3", "B": "2"}, ["A=1", "C=3", "B=2"], id="file-order-kept"),
    ],
)
def test_merge_env(entries: list[str], values: dict[str, str], expected: list[str]) -> None:
    """A key in the file replaces the container's value; other keys are appended in file order."""
    assert merge_env(entries, values) == expected


# --- resolve_env_file: the whole decision -------------------------------------------------------------------


def test_resolve_without_variable(env_dir: Path) -> None:
    """No variable, or an empty one, means no env file."""
    assert resolve_env_file({}, {}, env_settings(env_dir)) is None
    assert resolve_env_file({VAR: ""}, {}, env_settings(env_dir)) is None


def test_resolve_missing_with_ignore(env_dir: Path) -> None:
    """on-missing = ignore behaves as if the variable were unset."""
    assert (
        resolve_env_file({VAR: f"{env_dir}/none.env"}, {}, env_settings(env_dir, on_missing="ignore")) is None
    )


def test_resolve_missing_with_error(env_dir: Path) -> None:
    """on-missing = error refuses a missing file."""
    with pytest.raises(EnvFileMissingError, match=r"^env file '.*/none\.env': does not exist$"):
        resolve_env_file({VAR: f"{env_dir}/none.env"}, {}, env_settings(env_dir))


def test_resolve_ignore_does_not_hide_other_refusals(env_dir: Path) -> None:
    """on-missing = ignore covers only a missing file, never an unsafe one."""
    write(env_dir / "a.env", "A=1\n", 0o666)
    with pytest.raises(EnvFileError, match="group- or world-writable"):
        resolve_env_file({VAR: f"{env_dir}/a.env"}, {}, env_settings(env_dir, on_missing="ignore"))


def test_resolve_pinned(env_dir: Path) -> None:
    """A matching pin yields a pinned file whose values exclude the reserved keys."""
    write(env_dir / "a.env", "GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=0\n")
    settings = env_settings(env_dir, pod_binding_engine="containerd")
    result = resolve_env_file({VAR: f"{env_dir}/a.env"}, CONTAINERD, settings)
    assert result is not None
    assert (result.values, result.pinned) == ({"NVIDIA_VISIBLE_DEVICES": "0"}, True)


def test_reader_never_sees_a_mix_while_an_atomic_writer_replaces_the_file(env_dir: Path) -> None:
    """A writer that renames complete files in a loop: every read is exactly the old or the new content."""
    from hook.util.atomicwrite import write_atomic

    path = env_dir / "a.env"
    old = "".join(f"K{i}=old{i:05d}\n" for i in range(600)).encode()
    new = "".join(f"K{i}=new{i:05d}\n" for i in range(600)).encode()
    write(path, old)
    stop = threading.Event()

    def writer() -> None:
        flip = False
        while not stop.is_set():
            write_atomic(str(path), new if flip else old, mode=0o644)
            flip = not flip

    thread = threading.Thread(target=writer)
    thread.start()
    seen: set[bytes] = set()
    try:
        # At least 2 s of reads, and on until both versions were seen: under load one fsync'd write can take
        # longer than that (the bound only keeps a broken writer from hanging the suite).
        start = time.monotonic()
        while time.monotonic() - start < 2 or (seen != {old, new} and time.monotonic() - start < 60):
            data = load_env_file_bytes(str(path), env_settings(env_dir))
            assert data in (old, new)
            parse_env_file(data, str(path), variable=VAR)
            seen.add(data)
    finally:
        stop.set()
        thread.join()
    assert seen == {old, new}


@pytest.mark.parametrize(
    ("entries", "values"),
    [
        pytest.param(["A=1", "B=2"], {"B": "f", "C": "g"}, id="replace-and-append"),
        pytest.param(["A=1", "B=2", "A=3", "B=4"], {"A": "f"}, id="duplicates-in-the-spec"),
        pytest.param(["A=1=2", "=x", "B="], {"B": "a=b", "D": ""}, id="equals-signs-and-empties"),
        pytest.param([], {"X": "1", "Y": "2"}, id="empty-spec"),
        pytest.param(["A=1"], {}, id="empty-file"),
    ],
)
def test_the_merged_environment_is_the_container_env_updated_by_the_file(
    entries: list[str], values: dict[str, str]
) -> None:
    """What prestart computes without splitting the merged process.env again: the same dict, in the same
    order, as parsing the merged entries."""
    from hook.pipeline.bundle import parse_env

    merged = parse_env(merge_env(entries, values))
    shortcut = {**parse_env(entries), **values}
    assert list(shortcut.items()) == list(merged.items())
