"""Uninstall never strands a container: a runtime wrapper still in use is retired, not removed.

containerd, dockerd, CRI-O and podman call the runtime a container was created with again to stop, kill and
delete it; a runtime wrapper that uninstall removed leaves such containers unstoppable (``fork/exec
…/gpu-env-runtime: no such file or directory``, a shim left behind). So when ``hook.install.inuse`` finds
(or cannot rule out) a container using the runtime wrapper, uninstall replaces it with a *retired* wrapper:
a few lines of shell, no Python, that pass every command straight to the real runtime and refuse to create
new containers. It is recorded in ``<STATE_DIR>/retired.json`` (a manifest: what the wrapper replaced at
install stays recorded), and every later ``uninstall`` (``uninstall --purge`` alone, too) removes it, and
the directories install created for it, once no container uses it. An ``install`` over it takes it back.
"""

import os
import shlex
from typing import Any

from hook import __version__
from hook.install.common import fill_template
from hook.install.inuse import Users
from hook.install.manifest import MANIFEST_VERSION, RETIRED
from hook.install.rootfs import NodeRoot
from hook.util import paths
from hook.util.safetext import escape

# Runtimes the shim falls back to, looked up on the node's fixed PATH (the first one there wins).
FALLBACK_RUNTIMES = ("runc", "crun")
# Commands that start a new container: the retired wrapper refuses them.
CREATING_COMMANDS = ("create", "run", "restore")


def resolve_node_runtime(root: str) -> str | None:
    """Return the node path of the first fallback runtime on the node's fixed PATH, beneath ``root``."""
    node = NodeRoot(root)
    for name in FALLBACK_RUNTIMES:
        for directory in paths.FIXED_PATH.split(":"):
            candidate = os.path.join(directory, name)
            found = node.stat(candidate)
            if found is not None and found.st_mode & 0o111 and not os.path.isdir(node.show(candidate)):
                return candidate
    return None


def build_retired_wrapper(runtime: str, engine: str) -> bytes:
    """Build the retired runtime wrapper: parse the runtime's global flags, refuse the commands that create
    a container, exec ``runtime`` for everything else."""
    from hook.stages.shim import GLOBAL_VALUE_FLAGS

    logged = {"log", "log-format"}  # the template reads these two itself
    flags = " | ".join(f"-{flag} | --{flag}" for flag in sorted(GLOBAL_VALUE_FLAGS - logged))
    refusal = (
        "gpu-env-hook was uninstalled from this node; this runtime only stops and deletes the containers "
        f"created before; restart {engine} and do not select runtime {paths.RUNTIME_HANDLER}"
    )
    text = fill_template(
        "retired-runtime.sh.in",
        {
            "NAME": paths.RUNTIME_WRAPPER_NAME,
            "VERSION": __version__,
            "ENGINE": engine,
            "RUNTIME": escape(runtime),  # in a comment: a newline must not end it
            "RUNTIME_QUOTED": shlex.quote(runtime),
            "VALUE_FLAGS": flags,
            "REFUSAL": refusal,
        },
    )
    return text.encode()


def users_text(users: Users) -> str:
    """Say who keeps the wrapper in use (or why that cannot be told)."""
    if users.unseen:
        reason = f"{users.proc} is not a live /proc: give the node's /proc"
        return f"cannot tell which containers use it ({reason})"
    shown = ", ".join(users.users[:3]) + (", ..." if len(users.users) > 3 else "")
    return f"{len(users.users)} process(es) still use it: {shown}"


def new_record() -> dict[str, Any]:
    """An empty retired record (a manifest whose engine is ``retired``)."""
    return {
        "version": MANIFEST_VERSION,
        "engine": RETIRED,
        "package-version": __version__,
        "files": [],
        "directories": [],
    }


def directories_for(manifest: dict[str, Any], kept: list[str]) -> list[str]:
    """Return the manifest's directories that hold one of the ``kept`` node paths."""
    listed: list[str] = manifest.get("directories", [])
    return [directory for directory in listed if any(path.startswith(directory + "/") for path in kept)]
