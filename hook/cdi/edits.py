"""Apply CDI container edits to a config.json dict: the one place that edits an OCI spec for CDI.

The semantics are container-device-interface's ``ContainerEdits.Apply`` (the edits of every requested
device appended first, then applied once):

- ``env``: an entry replaces the variable of the same name where it stands, else it is appended;
- ``deviceNodes``: type, major and minor filled from the host node (``hostPath``, else ``path``) unless the
  node is already minimally specified, the file mode always when unset; the user's uid/gid when the node
  names none and the process runs as non-root; the device replaces one at the same path; a ``b``/``c``
  node gets an allow rule in ``linux.resources.devices`` (``rwm`` by default, none for ``"none"``);
- ``netDevices``: ``linux.netDevices[hostInterfaceName] = {"name": ...}``;
- ``mounts``: replacing the first mount at the same container path, then every mount sorted (stably) by
  the number of ``/`` in its cleaned destination; with a user namespace a bind mount gets ``idmap``;
- ``hooks``: appended to their stage; ``intelRdt``: set (the last one wins); ``additionalGids``: added
  once each, never 0.

Nothing is edited in place: the caller gets a new document, and the old one is untouched when an edit
fails (a host device missing, a type mismatch).
"""

import os

from hook.cdi.names import quote
from hook.util.errors import CdiError, SpecError
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    DeviceInfo = tuple[str, int, int, int]
    Stat = Callable[[str], DeviceInfo]

EDIT_KEYS = ("env", "deviceNodes", "netDevices", "hooks", "mounts", "additionalGids")


def merge_edits(edits: "list[dict[str, Any]]") -> "dict[str, Any]":
    """Concatenate edits in order (``ContainerEdits.Append``): lists joined, the last ``intelRdt`` kept."""
    merged: dict[str, Any] = {key: [] for key in EDIT_KEYS}
    for edit in edits:
        for key in EDIT_KEYS:
            merged[key].extend(edit.get(key, []))
        if edit.get("intelRdt") is not None:
            merged["intelRdt"] = edit["intelRdt"]
    return merged


def host_device_info(path: str) -> "DeviceInfo":
    """Return ``(type, major, minor, mode)`` of a host device node (lstat: a symlink is not a device)."""
    import stat

    try:
        info = os.lstat(path)
    except OSError as err:
        raise CdiError(f"lstat {path}: {os_reason(err, go=True)}") from None
    mode = info.st_mode
    if stat.S_ISBLK(mode):
        kind = "b"
    elif stat.S_ISCHR(mode):
        kind = "c"
    elif stat.S_ISFIFO(mode):
        kind = "p"
    else:
        raise CdiError("not a device node")
    return kind, os.major(info.st_rdev), os.minor(info.st_rdev), stat.S_IMODE(mode)


def fill_device_node(node: "dict[str, Any]", stat: "Stat" = host_device_info) -> "dict[str, Any]":
    """Return the node with type, major, minor and file mode filled from the host (``fillMissingInfo``)."""
    filled = dict(node)
    kind = str(filled.get("type", ""))
    minimal = kind != "" and (filled.get("major", 0) != 0 or kind == "p")
    host_path = filled.get("hostPath") or filled["path"]
    try:
        host_type, major, minor, mode = stat(host_path)
    except CdiError as err:
        if not minimal:
            raise CdiError(f"failed to stat CDI host device {quote(host_path)}: {err}") from None
        return filled
    filled.setdefault("fileMode", mode)
    if minimal:
        return filled
    if not kind:
        kind = filled["type"] = host_type
    if kind != host_type:
        raise CdiError(
            f"CDI device ({quote(filled['path'])}, {quote(host_path)}), "
            f"host type mismatch ({kind}, {host_type})"
        )
    if kind != "p" and filled.get("major", 0) == 0:
        filled["major"], filled["minor"] = major, minor
    return filled


def apply_edits(
    document: "dict[str, Any]", edits: "list[dict[str, Any]]", *, stat: "Stat" = host_device_info
) -> "dict[str, Any]":
    """Return a copy of config.json with ``edits`` (in order) applied, as the reference applies them."""
    merged = merge_edits(edits)
    spec: dict[str, Any] = _copy(document)
    if merged["env"]:
        _apply_env(_object(spec, "process"), merged["env"])
    for node in merged["deviceNodes"]:
        _apply_device_node(spec, fill_device_node(node, stat))
    for net in merged["netDevices"]:
        _object(_object(spec, "linux"), "netDevices")[net["hostInterfaceName"]] = {"name": net["name"]}
    if merged["mounts"]:
        _apply_mounts(spec, merged["mounts"])
    for hook in merged["hooks"]:
        entry = {key: hook[key] for key in ("path", "args", "env", "timeout") if hook.get(key) is not None}
        if not entry.get("args"):
            entry.pop("args", None)
        if not entry.get("env"):
            entry.pop("env", None)
        _array(_object(spec, "hooks"), hook["hookName"], "hooks").append(entry)
    rdt = merged.get("intelRdt")
    if rdt is not None:
        _object(spec, "linux")["intelRdt"] = {key: value for key, value in rdt.items() if value}
    for gid in merged["additionalGids"]:
        user = _object(_object(spec, "process"), "user")
        gids = _array(user, "additionalGids", "process.user")
        if gid != 0 and gid not in gids:
            gids.append(gid)
    return spec


def _apply_env(process: "dict[str, Any]", entries: list[str]) -> None:
    """Replace a variable where it stands (its last occurrence), else append it."""
    env = _array(process, "env", "process")
    index = {entry.partition("=")[0]: position for position, entry in enumerate(env)}
    for entry in entries:
        name = entry.partition("=")[0]
        if name in index:
            env[index[name]] = entry
        else:
            env.append(entry)
            index[name] = len(env) - 1


def _apply_device_node(spec: "dict[str, Any]", node: "dict[str, Any]") -> None:
    """Add the device (replacing one at its path) and, for b/c, the cgroup allow rule."""
    device: dict[str, Any] = {
        "path": node["path"],
        "type": node.get("type", ""),
        "major": node.get("major", 0),
        "minor": node.get("minor", 0),
    }
    for key in ("fileMode", "uid", "gid"):
        if node.get(key) is not None:
            device[key] = node[key]
    process = spec.get("process")
    user = process.get("user") if isinstance(process, dict) else None
    if isinstance(user, dict):
        for key in ("uid", "gid"):
            value = user.get(key)
            if key not in device and isinstance(value, int) and value > 0:
                device[key] = value
    linux = _object(spec, "linux")
    devices = _array(linux, "devices", "linux")
    for position, existing in enumerate(devices):
        if isinstance(existing, dict) and existing.get("path") == device["path"]:
            del devices[position]
            break
    for position, existing in enumerate(devices):
        if isinstance(existing, dict) and existing.get("path") == device["path"]:
            devices[position] = device
            break
    else:
        devices.append(device)
    if device["type"] in ("b", "c"):
        access = node.get("permissions", "") or "rwm"
        rule: dict[str, Any] = {"allow": True, "type": device["type"], "major": device["major"]}
        rule["minor"] = device["minor"]
        if access != "none":
            rule["access"] = access
        _array(_object(linux, "resources"), "devices", "linux.resources").append(rule)


def _apply_mounts(spec: "dict[str, Any]", mounts: "list[dict[str, Any]]") -> None:
    """Add each mount (replacing the first at its container path), then sort them all by depth."""
    from hook.util.paths import go_clean

    existing = _array(spec, "mounts", "")
    userns = _has_user_namespace(spec)
    for mount in mounts:
        for position, other in enumerate(existing):
            if isinstance(other, dict) and other.get("destination") == mount["containerPath"]:
                del existing[position]
                break
        entry: dict[str, Any] = {"destination": mount["containerPath"]}
        if mount.get("type"):
            entry["type"] = mount["type"]
        entry["source"] = mount["hostPath"]
        options = list(mount.get("options", []))
        if userns:
            options = _with_idmap(options, mount.get("type", ""))
        if options:
            entry["options"] = options
        existing.append(entry)
    existing.sort(
        key=lambda m: go_clean(str(m.get("destination", ""))).count("/") if isinstance(m, dict) else 0
    )


def _with_idmap(options: list[str], kind: str) -> list[str]:
    """Add ``idmap`` (``ridmap`` for rbind) to a bind mount in a user namespace, unless one is there."""
    option = "idmap" if kind == "bind" else ""
    for value in options:
        if value in ("idmap", "ridmap"):
            return options
        if value == "bind":
            option = "idmap"
        elif value == "rbind":
            option = "ridmap"
    return [*options, option] if option else options


def _has_user_namespace(spec: "dict[str, Any]") -> bool:
    linux = spec.get("linux")
    namespaces = linux.get("namespaces") if isinstance(linux, dict) else None
    return isinstance(namespaces, list) and any(
        isinstance(ns, dict) and ns.get("type") == "user" for ns in namespaces
    )


def _object(parent: "dict[str, Any]", key: str) -> "dict[str, Any]":
    """Return ``parent[key]`` as an object, creating it when absent; a non-object is a spec error."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    if not isinstance(value, dict):
        raise SpecError(f"could not decode OCI spec: {key} must be an object")
    return value


def _array(parent: "dict[str, Any]", key: str, where: str) -> "list[Any]":
    """Return ``parent[key]`` as an array, creating it when absent; a non-array is a spec error."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = []
    if not isinstance(value, list):
        raise SpecError(f"could not decode OCI spec: {where + '.' if where else ''}{key} must be an array")
    return value


def _copy(value: "Any") -> "Any":
    """Deep-copy a decoded JSON value (dicts and lists; scalars are immutable)."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value
