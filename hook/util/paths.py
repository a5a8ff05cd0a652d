"""Where things live on a node, and the few path operations the per-container path needs.

The paths are the one place that install, uninstall and doctor agree on. The operations (``join``,
``dirname``, ``basename``, ``normpath``, ``exists``, ``isfile``) are ``os.path``'s, written on the builtin
``posix`` module: ``import os`` costs about a sixth of the interpreter's start (``_collections_abc``,
``posixpath``, ``stat``), which `python3 -I -S` does not load, and a container that asks for no GPU must not
pay it. They give exactly ``os.path``'s results (tested against it).
"""

import posix

# Executables the engines call: small wrappers that run this package's Python isolated (-I).
LIBEXEC_DIR = "/usr/local/libexec/gpu-env-hook"
# The self-contained runtime: versions of the package, and `current` naming the one the engines start.
RUNTIME_TREE = "/opt/gpu-env-hook"
HOOK_WRAPPER = LIBEXEC_DIR + "/gpu-env-hook"
# The launch code as a file: what the oci-hooks.d entries run (a short argv podman can show in full).
LAUNCH_SCRIPT = LIBEXEC_DIR + "/launch.py"
# Where a stage started from the oci-hooks.d entries appends its one-line refusal (podman discards stderr).
REFUSAL_LOG_DIR = "/var/log/gpu-env-hook"
REFUSAL_LOG = REFUSAL_LOG_DIR + "/refusals.log"
# The runtime wrapper, one per engine (each bakes its engine's name and runtime): <LIBEXEC_DIR>/<engine>/.
RUNTIME_WRAPPER_NAME = "gpu-env-runtime"
RUNTIME_WRAPPER_ENGINES = ("podman", "crio", "containerd", "docker")
RUNTIME_WRAPPERS = tuple(
    f"{LIBEXEC_DIR}/{engine}/{RUNTIME_WRAPPER_NAME}" for engine in RUNTIME_WRAPPER_ENGINES
)
# `docker run --gpus` looks this name up on PATH; /usr/local/bin comes before /usr/bin.
NVIDIA_HOOK_ALIAS = "/usr/local/bin/nvidia-container-runtime-hook"

# oci-hooks.d directories: podman reads both by default, CRI-O the first.
OCI_HOOKS_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
HOOK_JSON_NAME = "gpu-env-hook.json"
PRECREATE_JSON_NAME = "gpu-env-hook-precreate.json"

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# The NRI socket containerd 2.x (and CRI-O) serve plugins on: `gpu-env-hook nri` connects there.
NRI_SOCKET = "/var/run/nri/nri.sock"
# Fail closed without a process (docs/nri.md): the device plugin names this CDI device next to the env file;
# install writes its spec, whose one edit is a bind mount from a path procfs can never have, so the runtime
# cannot start the container unless the NRI plugin (or the runtime shim) applied the file and removed it.
ENV_FILE_GUARD_KIND = "gpu-env-hook.io/env-file"
ENV_FILE_GUARD_DEVICE = ENV_FILE_GUARD_KIND + "=required"
ENV_FILE_GUARD_SOURCE = "/proc/gpu-env-hook-env-file-not-applied"
ENV_FILE_GUARD_TARGET = "/run/gpu-env-hook/env-file-not-applied"
ENV_FILE_GUARD_SPEC = "/etc/cdi/gpu-env-hook-env-file.json"
CONTAINERD_DROPIN_DIR = "/etc/containerd/conf.d"
CONTAINERD_DROPIN_NAME = "gpu-env-hook.toml"
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
CRIO_DROPIN_DIR = "/etc/crio/crio.conf.d"
CRIO_DROPIN_NAME = "99-gpu-env-hook.conf"

# What `install` wrote, per engine, so `uninstall` can take exactly that off again.
STATE_DIR = "/var/lib/gpu-env-hook"
# Decoded YAML CDI specs (hook.cdi.speccache), the default of [gpu-env.cdi] spec-cache: on the tmpfs /run,
# so it goes at the node's next boot; uninstall removes it.
RUN_DIR = "/run/gpu-env-hook"
CDI_SPEC_CACHE_DIR = RUN_DIR + "/cdi-specs"
# systemd-tmpfiles recreates the env-file directories at boot (/run is empty after a reboot).
TMPFILES_CONF = "/etc/tmpfiles.d/gpu-env-hook.conf"

# Inside a container: /dev/null mounts below this root request devices (upstream's volume-mount strategy).
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"

# The runtime handler name engines know the shim by.
RUNTIME_HANDLER = "gpu-env"

# A fixed PATH for everything we start: the caller's PATH is never trusted (podman may give none).
FIXED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def install_record(engine: str) -> str:
    """The node path of ``engine``'s install record (the manifest ``install --engine`` writes)."""
    return f"{STATE_DIR}/install-{engine}.json"


def runtime_wrapper(engine: str) -> str:
    """The node path of ``engine``'s runtime wrapper (what its config names as the runtime binary)."""
    return f"{LIBEXEC_DIR}/{engine}/{RUNTIME_WRAPPER_NAME}"


# --- os.path without os ------------------------------------------------------------------------------------


def join(path: str, *parts: str) -> str:
    """``os.path.join``: an absolute part restarts the path; ``/`` between parts unless already there."""
    for part in parts:
        if part.startswith("/"):
            path = part
        elif not path or path.endswith("/"):
            path += part
        else:
            path += "/" + part
    return path


def dirname(path: str) -> str:
    """``os.path.dirname``: everything before the last ``/``, trailing slashes gone unless all slashes."""
    head = path[: path.rfind("/") + 1]
    if head and head != "/" * len(head):
        head = head.rstrip("/")
    return head


def basename(path: str) -> str:
    """``os.path.basename``: everything after the last ``/``."""
    return path[path.rfind("/") + 1 :]


def normpath(path: str) -> str:
    """``os.path.normpath`` (POSIX): collapse ``//``, ``.`` and ``dir/..``; keep a leading ``//``."""
    if not path:
        return "."
    initial = 2 if path.startswith("//") and not path.startswith("///") else 1 if path.startswith("/") else 0
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part != ".." or (not initial and not parts) or (parts and parts[-1] == ".."):
            parts.append(part)
        elif parts:
            parts.pop()
    result = "/" * initial + "/".join(parts)
    return result or "."


def go_clean(path: str) -> str:
    """Lexically clean a path as Go's filepath.Clean does (``//x`` is ``/x``)."""
    cleaned = normpath(path) if path else "."
    return cleaned[1:] if cleaned.startswith("//") else cleaned


def exists(path: str) -> bool:
    """``os.path.exists``: stat succeeds (symlinks followed)."""
    try:
        posix.stat(path)
    except (OSError, ValueError):
        return False
    return True


def isfile(path: str) -> bool:
    """``os.path.isfile``: a regular file (symlinks followed)."""
    try:
        return posix.stat(path).st_mode & 0o170000 == 0o100000
    except (OSError, ValueError):
        return False


def environ() -> dict[str, str]:
    """The process environment as text, decoded as ``os.environ`` decodes it (the file-system encoding)."""
    import sys

    encoding, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    return {
        key.decode(encoding, errors): value.decode(encoding, errors) for key, value in posix.environ.items()
    }
