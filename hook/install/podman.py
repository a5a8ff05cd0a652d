"""podman (and CRI-O's hooks): the oci-hooks.d JSON that runs the hook wrapper for every container."""

import os
from typing import Any

from hook.install.common import CONFIG_MODE, EnginePlan, InstallOptions, PlannedFile, dump_json
from hook.install.wrappers import build_hook_entry
from hook.pipeline.config import DEFAULT_HOOK_TIMEOUT
from hook.util import paths

# The interpreter packaging/oci-hooks.d's documents name (Debian's and most distributions' python3).
PACKAGED_PYTHON = "/usr/bin/python3"


def build_hook_json(
    stage: str,
    engine: str = "podman",
    *,
    python: str = PACKAGED_PYTHON,
    timeout: int = DEFAULT_HOOK_TIMEOUT,
    config: str | None = None,
) -> dict[str, Any]:
    """Build the oci-hooks.d 1.0.0 document that starts the hook at ``stage`` for every container: the
    interpreter itself with the launch code (``hook.install.wrappers.build_hook_entry``: no wrapper, a fixed
    environment naming the engine, the OCI timeout). For podman with the defaults: the same document as
    ``packaging/oci-hooks.d``, which a test keeps equal.

    podman reads both hooks directories and a file in ``/etc/containers/oci/hooks.d`` overrides the same
    name in ``/usr/share/containers/oci/hooks.d`` (CRI-O's only one): a node with both installs CRI-O's in
    the latter and podman's in the former.
    """
    return {
        "version": "1.0.0",
        "hook": build_hook_entry(stage, python=python, engine=engine, timeout=timeout, config=config),
        "when": {"always": True, "commands": [".*"]},
        "stages": [stage],
    }


def plan_hooks(options: InstallOptions) -> EnginePlan:
    """Return the hooks JSON files (prestart, and precreate when asked) in ``options.hooks_dir``."""
    files = []
    for stage in ["prestart", *(["precreate"] if options.precreate else [])]:
        name = paths.HOOK_JSON_NAME if stage == "prestart" else paths.PRECREATE_JSON_NAME
        path = os.path.join(options.hooks_dir, name)
        document = build_hook_json(
            stage, options.engine, python=options.python, timeout=options.hook_timeout, config=options.config
        )
        files.append(PlannedFile(path, dump_json(document, "hooks-json", path), CONFIG_MODE))
    if options.engine != "podman":  # CRI-O: its restart note says the hooks JSON needs none
        return EnginePlan(tuple(files), ())
    note = f"next: podman reads {options.hooks_dir} when it creates a container: no restart needed"
    return EnginePlan(tuple(files), (note,))


def plan(options: InstallOptions) -> EnginePlan:
    """Return what podman needs: only the hooks JSON (it reads the directory on every container create)."""
    return plan_hooks(options)


def uninstall_notes() -> tuple[str, ...]:
    """What the user must do after uninstall: nothing, podman reads hooks.d on every create."""
    return ("next: nothing to restart: podman reads its hooks directories when it creates a container",)
