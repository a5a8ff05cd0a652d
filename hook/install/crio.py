"""CRI-O: a crio.conf.d drop-in registering the runtime handler, plus the oci-hooks.d JSON."""

from __future__ import annotations

import os

from hook import __version__, paths
from hook.install.common import (
    CONFIG_MODE,
    EnginePlan,
    InstallOptions,
    PlannedFile,
    fill_template,
    toml_key,
    toml_string,
)
from hook.install.podman import plan_hooks


def build_crio_dropin() -> bytes:
    """Build the crio.conf.d drop-in registering the runtime wrapper as handler RUNTIME_HANDLER."""
    values = {
        "VERSION": __version__,
        "HANDLER": toml_key(paths.RUNTIME_HANDLER),
        "RUNTIME": toml_string(paths.RUNTIME_WRAPPER),
    }
    return fill_template("crio.conf.in", values).encode()


def plan(options: InstallOptions) -> EnginePlan:
    """Return the drop-in, then the hooks JSON (written last: CRI-O reads it on every create)."""
    hooks = plan_hooks(options)
    dropin = PlannedFile(
        os.path.join(paths.CRIO_DROPIN_DIR, paths.CRIO_DROPIN_NAME), build_crio_dropin(), CONFIG_MODE
    )
    restart = (
        f"next: restart CRI-O (systemctl restart crio) to load the runtime handler {paths.RUNTIME_HANDLER!r}"
    )
    return EnginePlan((dropin, *hooks.files), (*hooks.notes, restart))
