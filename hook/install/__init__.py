"""``install`` / ``uninstall``: one module per engine, what they share, and the installer that orders them.

- ``common``: options, planned files, rooted paths, templates and safe text builders;
- ``manifest``: what install wrote and replaced, so uninstall can undo exactly that;
- ``wrappers``: the shell wrappers the engines execute;
- ``podman`` (oci-hooks.d JSON), ``crio``, ``containerd``, ``docker``: each builds its files from the node's
  current config;
- ``installer``: orders the steps and records what to undo; ``commands``: the typer commands.

The names below are the package's public interface (tests, ``hook.commands.cli``, the benchmarks).
"""

from hook.install.commands import register
from hook.install.common import (
    CONFIG_MODE,
    ENGINES,
    EXECUTABLE_MODE,
    InstallError,
    InstallOptions,
    Plan,
    PlannedFile,
    rooted,
)
from hook.install.containerd import CONTAINERD_MERGE
from hook.install.docker import DOCKER_MERGE, merge_daemon_json, unmerge_daemon_json
from hook.install.installer import build_plan, write_install, write_uninstall
from hook.install.podman import build_hook_json
from hook.install.wrappers import (
    HOOK_ENTRY,
    HOOK_KEEP_ENV,
    RUNTIME_ENTRY,
    build_hook_entry,
    build_hook_wrapper,
    build_runtime_wrapper,
)

__all__ = [
    "CONFIG_MODE",
    "CONTAINERD_MERGE",
    "DOCKER_MERGE",
    "ENGINES",
    "EXECUTABLE_MODE",
    "HOOK_ENTRY",
    "HOOK_KEEP_ENV",
    "RUNTIME_ENTRY",
    "InstallError",
    "InstallOptions",
    "Plan",
    "PlannedFile",
    "build_hook_entry",
    "build_hook_json",
    "build_hook_wrapper",
    "build_plan",
    "build_runtime_wrapper",
    "merge_daemon_json",
    "register",
    "rooted",
    "unmerge_daemon_json",
    "write_install",
    "write_uninstall",
]
