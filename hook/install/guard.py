"""The env-file guard: a CDI spec that keeps a container from running unless its env file was applied.

The device plugin names the CDI device ``gpu-env-hook.io/env-file=required`` next to
``NVIDIA_ENV_FROM_FILE`` (kubelet >= 1.28 passes ``ContainerAllocateResponse.CDIDevices`` to the runtime).
The device's only edit is a read-only bind mount whose source is a path directly under ``/proc``, which
procfs never lets anyone create: the runtime fails to make that mount (ENOENT) and the container never
runs, unless whoever applied the env file -- the NRI plugin (an adjustment removing the mount) or the
runtime shim (config.json without it) -- took the mount out. No process of ours runs for it, and a
container without the device is not touched. A node without this spec fails closed too: the runtime
cannot resolve the device.

``install --engine containerd|crio`` writes the spec (root-owned, 0644, atomically) into ``/etc/cdi``, a
CDI spec directory containerd 2.x and CRI-O read by default (and watch: no restart); uninstall removes it;
``doctor`` checks it (``guard_problem``).
"""

import json
import os
import stat

from hook.util import paths
from hook.util.beneath import trust_problem

CDI_VERSION = "0.6.0"


def guard_document() -> dict[str, object]:
    """The guard's CDI spec: one device whose only edit is the bind mount that cannot be made."""
    kind, name = paths.ENV_FILE_GUARD_DEVICE.split("=")
    mount = {
        "hostPath": paths.ENV_FILE_GUARD_SOURCE,
        "containerPath": paths.ENV_FILE_GUARD_TARGET,
        "type": "bind",
        "options": ["bind", "ro"],
    }
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [{"name": name, "containerEdits": {"mounts": [mount]}}],
    }


def guard_spec() -> bytes:
    """The guard's CDI spec file, as install writes it."""
    return (json.dumps(guard_document(), indent=2) + "\n").encode()


def guard_problem(root: str = "/") -> str:
    """Say why the guard's spec on the node under ``root`` does not protect env-file containers ('' when it
    does): missing, not a root-owned file others cannot write, or not the spec install writes."""
    from hook.install.coexist import under

    path = paths.ENV_FILE_GUARD_SPEC
    where = under(root, path, follow=False)  # /etc/cdi may be a link on the node: resolved beneath the root
    try:
        info = os.lstat(where)
    except FileNotFoundError:
        return f"{path}: missing (install writes it; a device plugin naming the device fails every container)"
    except OSError as err:
        from hook.util.safetext import os_reason

        return f"{path}: cannot be read: {os_reason(err)}"
    if not stat.S_ISREG(info.st_mode):
        return f"{path}: not a regular file"
    if trust_problem(info.st_uid, info.st_mode) is not None:
        return f"{path}: must be root-owned and not group- or world-writable"
    with open(where, "rb") as fh:
        data = fh.read()
    try:
        same = json.loads(data) == guard_document()
    except ValueError:
        same = False
    return "" if same else f"{path}: not the spec install writes (re-run install)"
