"""Docker: our ``runtimes`` entry merged into daemon.json, every other key kept; uninstall takes it out."""

import json
import os
import stat
from typing import Any

from hook.install.common import (
    CONFIG_MODE,
    EnginePlan,
    InstallError,
    InstallOptions,
    PlannedFile,
    dump_json,
)
from hook.install.rootfs import NodeRoot
from hook.util import paths

# dockerd registers its ``--gpus`` driver once, at start, and only when it finds the hook on its PATH.
RESTART_FOR_GPUS = (
    "next: restart dockerd (systemctl restart docker): it looks "
    f"{os.path.basename(paths.NVIDIA_HOOK_ALIAS)} up on its PATH only when it starts, so a reload is "
    "not enough for `docker run --gpus` to use gpu-env-hook; the restart also loads "
    f"`docker run --runtime={paths.RUNTIME_HANDLER}`"
)
# The manifest's ``merge`` value for daemon.json: uninstall unmerges it instead of restoring bytes.
DOCKER_MERGE = "docker-runtime"


def parse_daemon_json(data: bytes, where: str) -> dict[str, Any]:
    """Decode Docker's daemon.json: an object whose ``runtimes``, if any, is an object."""
    try:
        document = json.loads(data.decode("utf-8"))
    except ValueError as err:
        from hook.util.safetext import decode_error_reason

        raise InstallError(f"{where}: not valid JSON ({decode_error_reason(err)}); fix it first") from None
    if not isinstance(document, dict):
        raise InstallError(f"{where}: must hold a JSON object; fix it first")
    if not isinstance(document.get("runtimes", {}), dict):
        raise InstallError(f"{where}: runtimes must be an object; fix it first")
    return document


def build_docker_entry() -> dict[str, Any]:
    """Return our value for ``runtimes.<RUNTIME_HANDLER>`` in daemon.json."""
    return {"path": paths.runtime_wrapper("docker")}


def merge_daemon_json(current: bytes | None, where: str) -> bytes:
    """Return daemon.json with our runtime added; every other key kept as it was."""
    document = parse_daemon_json(current, where) if current is not None else {}
    runtimes = dict(document.get("runtimes", {}))
    runtimes[paths.RUNTIME_HANDLER] = build_docker_entry()
    return dump_json({**document, "runtimes": runtimes}, "docker-daemon", where, indent=4)


def unmerge_daemon_json(current: bytes, previous: bytes | None, where: str) -> bytes | None:
    """Return daemon.json with our runtime taken out again (None: remove the file; install created it).

    What install replaced comes back as it was: the earlier value of our key, no ``runtimes`` if there was
    none, and ``previous`` byte for byte when nothing else changed since.
    """
    document = parse_daemon_json(current, where)
    before = parse_daemon_json(previous, where) if previous is not None else None
    runtimes = dict(document.get("runtimes", {}))
    earlier = (before or {}).get("runtimes", {})
    if paths.RUNTIME_HANDLER in earlier:
        runtimes[paths.RUNTIME_HANDLER] = earlier[paths.RUNTIME_HANDLER]
    else:
        runtimes.pop(paths.RUNTIME_HANDLER, None)
    document.pop("runtimes", None)
    if runtimes or "runtimes" in (before or {}):
        document["runtimes"] = runtimes
    if before is None:
        return None if not document else dump_json(document, "docker-daemon", where, indent=4)
    if document == before:
        return previous
    return dump_json(document, "docker-daemon", where, indent=4)


def plan(options: InstallOptions) -> EnginePlan:
    """Return daemon.json with our runtime merged in (its mode kept), and what the user must do next."""
    node = NodeRoot(options.root)
    where = node.show(paths.DOCKER_DAEMON_JSON)
    data = merge_daemon_json(node.read(paths.DOCKER_DAEMON_JSON), where)
    found = node.stat(paths.DOCKER_DAEMON_JSON)
    mode = stat.S_IMODE(found.st_mode) if found is not None else CONFIG_MODE
    if options.as_nvidia_hook:
        note = RESTART_FOR_GPUS
    else:
        note = (
            f"next: reload dockerd (systemctl reload docker, or SIGHUP) to load the runtime; then "
            f"`docker run --runtime={paths.RUNTIME_HANDLER} ...`"
        )
    return EnginePlan((PlannedFile(paths.DOCKER_DAEMON_JSON, data, mode, DOCKER_MERGE),), (note,))


def uninstall_notes() -> tuple[str, ...]:
    """What the user must do after uninstall: dockerd keeps what it loaded (runtime, --gpus) until restart."""
    return (
        (
            f"next: restart dockerd (systemctl restart docker) when no container uses runtime "
            f"{paths.RUNTIME_HANDLER}: a reload does not remove a runtime, `docker info` lists it until the "
            "restart (and `docker run --gpus` keeps the driver it registered at start)"
        ),
    )
