"""What every engine's installer shares: the options, the planned files, rooted paths and safe text builders.

Every path is the node's (``/usr/local/...``); ``--root DIR`` only prefixes where files are read and written,
so a DaemonSet with the host's ``/`` at ``/host`` runs ``install --root /host`` and the engines see the node's
own paths. Templates are package data (``hook/templates``); every JSON written is validated with
``hook.install.schema`` before it is written.
"""

import json
import os
import re
from importlib import resources
from typing import NamedTuple

from hook.util import paths
from hook.util.errors import HookError
from hook.util.safetext import escape, os_reason

ENGINES = ("podman", "crio", "containerd", "docker")
EXECUTABLE_MODE = 0o755
CONFIG_MODE = 0o644
_BARE_TOML_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")
# What a tmpfiles.d path field may hold unquoted (no whitespace, quote, backslash or % specifier).
_TMPFILES_PLAIN = re.compile(r"^[A-Za-z0-9/._+,:=@-]+$")


class InstallError(HookError):
    """install or uninstall cannot proceed; nothing was changed by the step that refused."""


class InstallOptions(NamedTuple):
    """What to install: every path is the node's; ``root`` only prefixes reads and writes."""

    engine: str
    python: str
    root: str = "/"
    config: str | None = None
    as_nvidia_hook: bool = False
    precreate: bool = False
    hooks_dir: str = paths.OCI_HOOKS_DIRS[0]
    containerd_config_version: int | None = None
    containerd_config: str = paths.CONTAINERD_CONFIG
    # The real runtime the runtime wrapper execs (a node path); None: the engine's, else found on the node.
    runtime: str | None = None
    # The OCI timeout of the hooks JSON entries ([gpu-env-hook] timeout of the config the hook uses).
    hook_timeout: int = 60
    # containerd, CRI-O: also register the NRI plugin (hook.install.nri), its containerd binary (node path;
    # None: found on the node's PATH) and the interpreter its unit runs (one with protobuf); nri_unit False:
    # no unit, the plugin runs elsewhere (the NRI DaemonSet's container).
    nri: bool = False
    containerd_binary: str | None = None
    nri_python: str | None = None
    nri_unit: bool = True


class PlannedFile(NamedTuple):
    """One file install writes: where (node path), what, its mode, and how uninstall undoes it."""

    path: str
    data: bytes
    mode: int
    merge: str | None = None


class EnginePlan(NamedTuple):
    """What one engine module adds to an install: its files in write order, and what to tell the user.

    ``runtime``: the OCI runtime the shim should exec on this node, when the engine's config says (the
    containerd or CRI-O runtime the handler is based on); None leaves the shim's default.
    """

    files: tuple[PlannedFile, ...]
    notes: tuple[str, ...]
    runtime: str | None = None


class Plan(NamedTuple):
    """Everything install will write for one engine, in write order, and what to tell the user after."""

    engine: str
    files: tuple[PlannedFile, ...]
    notes: tuple[str, ...]
    # The real runtime (node path) the runtime wrapper hands containers to; recorded in the manifest so that
    # a retired wrapper (hook.install.retire) can exec it without Python. None: not found on the node.
    runtime: str | None = None
    # The env-file directories the hook reads ([env-file] directories): created root-owned 0700 when missing.
    env_directories: tuple[str, ...] = ()


def check_line_safe(what: str, value: str) -> str:
    """Return ``value``, a node path install writes into a generated file (a shell script, a comment, a
    systemd unit, a tmpfiles.d line); refuse in one line one with a character that is not printable: a
    newline there would start a line of its own (a command in a wrapper, an entry such as ``R! /`` in
    tmpfiles.d). Each format's own quoting takes care of every printable character."""
    if not value.isprintable():
        raise InstallError(
            f"{what} {escape(value)}: must not hold a control character (a newline would start a line of "
            "its own in the files install writes)"
        )
    return value


RUNS_AS_ROOT = "whoever can change it runs code as root"


def check_trusted(
    what: str, path: str, root: str, *, why: str = RUNS_AS_ROOT, missing_ok: bool = False
) -> None:
    """Refuse, in one line, a node path root will run or trust (``what``: the option that named it) that
    someone other than root can change: it, the directory holding it or a directory on the way to it (each
    symlink followed as the kernel would, beneath ``root``) not root-owned or writable by others
    (``hook.util.beneath.untrusted_on_the_way``). A path that is not there is left to the caller (a warning
    under ``--root``, where it may come later); ``missing_ok``: the directory a new one would be made in is
    judged instead."""
    from hook.util.beneath import untrusted_on_the_way

    owners = (0,) if os.geteuid() == 0 else (0, os.geteuid())  # an unprivileged user's test tree is its own
    try:
        found = untrusted_on_the_way(path, root=root, owners=owners, missing_ok=missing_ok)
    except FileNotFoundError:
        return
    except OSError as err:
        raise InstallError(f"{what} {escape(path)}: cannot inspect it: {os_reason(err, go=True)}") from None
    if found is not None:
        at, problem = found
        raise InstallError(f"{what} {escape(path)}: {escape(rooted(root, at))} {problem}; {why}")


def tmpfiles_path(path: str) -> str:
    """Write ``path`` as a tmpfiles.d path field: plain when it can be, else in double quotes with C-style
    escapes (``\\``, ``\"``); every ``%`` doubled (tmpfiles.d expands specifiers such as ``%h`` in a path)."""
    check_line_safe("[env-file] directories:", path)
    field = path.replace("%", "%%")
    if _TMPFILES_PLAIN.match(path):
        return field
    return '"' + field.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_tmpfiles(directories: tuple[str, ...]) -> bytes:
    """Return the tmpfiles.d entry that recreates the env-file directories at boot: root-owned, 0700, never
    cleaned by age (an env file must not vanish under a container that is about to start)."""
    lines = [
        "# gpu-env-hook: the env-file directories ([env-file] directories), recreated at boot.",
        "# `gpu-env-hook uninstall` removes this file.",
    ]
    lines += [f"d {tmpfiles_path(directory)} 0700 root root -" for directory in directories]
    return ("\n".join(lines) + "\n").encode()


def rooted(root: str, path: str) -> str:
    """Return where the node path ``path`` is, seen from this process when the node's ``/`` is ``root``."""
    if root in ("", "/"):
        return path
    return os.path.join(root, path.lstrip("/"))


def read_file(path: str) -> bytes | None:
    """Return a regular file's bytes, or None when there is none (a FIFO or device is refused, never read).

    For a node path under ``--root`` use ``hook.install.rootfs.NodeRoot.read``: it never leaves the root.
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InstallError(f"{path}: cannot read: {os_reason(err)}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InstallError(f"{path}: not a regular file; move it away")
        return fh.read()


def fill_template(name: str, values: dict[str, str]) -> str:
    """Return the package template ``name`` with each ``@KEY@`` replaced; every placeholder must be given."""
    text = resources.files("hook").joinpath("templates", name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    left = _PLACEHOLDER.search(text)
    if left:
        raise InstallError(f"template {name}: no value for {left.group(0)}")
    return text


def dump_json(document: object, kind: str, where: str, *, indent: int = 2) -> bytes:
    """Validate ``document`` against the schema of ``kind`` and return it as JSON text."""
    from hook.install.schema import validate_document

    problems = validate_document(document, kind)
    if problems:
        raise InstallError(f"{where}: would not be valid: {problems[0]}")
    return (json.dumps(document, indent=indent) + "\n").encode()


def toml_string(value: str) -> str:
    """Quote ``value`` as a TOML basic string."""
    return json.dumps(value, ensure_ascii=False)


def toml_key(value: str) -> str:
    """Write ``value`` as a TOML key: bare when it can be, else quoted."""
    return value if _BARE_TOML_KEY.match(value) else toml_string(value)


def engine_config_kind(data: bytes) -> str | None:
    """Tell whether a file is an engine's config rather than our config.toml: "containerd's" (top-level
    ``version``, ``imports`` or ``plugins``), "CRI-O's" (a ``crio`` table), or None. NVIDIA's config.toml,
    which ours follows, has none of these; a file that is not TOML is left to the config check."""
    import tomllib

    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if any(key in document for key in ("version", "imports", "plugins")):
        return "containerd's"
    if "crio" in document:
        return "CRI-O's"
    return None
