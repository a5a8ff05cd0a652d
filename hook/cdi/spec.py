"""One CDI spec file: decoded (JSON on the lean path, YAML through PyYAML), type-checked and validated.

The rules are container-device-interface's ``pkg/cdi`` (``spec.go``, ``device.go``, ``container-edits.go``)
and ``specs-go``: the reference decodes strictly (an unknown or repeated field is an error), checks the
version against the fields used (``hook.cdi.version``), the vendor and class of ``kind``, the spec-wide
edits, then every device (a valid name, non-empty and valid edits, no name twice) and wants at least one
device. A spec is kept as the decoded document (a raw dict, as config.json is), with ``null`` fields
dropped, so the edits are applied from exactly what the file says.
"""

import os

from hook.cdi.names import (
    class_error,
    device_name_error,
    parse_qualifier,
    quote,
    vendor_error,
)
from hook.cdi.version import version_error
from hook.util.beneath import trust_problem
from hook.util.errors import CdiError
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

# A spec larger than this is skipped unread (every create reads every spec: nvidia-ctk's spec for eight GPUs
# with their MIG devices is some 40 KB); nested deeper than this is refused (a valid spec needs six levels).
MAX_SPEC_FILE_BYTES = 256 * 1024
MAX_NESTING = 64
# A YAML spec's size with every alias written out (a scalar's length plus one, plus one per sequence or
# mapping): anchors may share edits between devices, but an alias bomb (a billion laughs in a few hundred
# bytes) is refused before it is expanded. Four times the largest file read: an alias-free spec is far below.
MAX_EXPANDED_SIZE = 4 * MAX_SPEC_FILE_BYTES
SPEC_EXTENSIONS = (".json", ".yaml")
HOOK_STAGES = (
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
)
DEVICE_TYPES = ("", "b", "c", "u", "p")
NO_PERMISSIONS = "none"

# The spec's shape (specs-go/config.go): a field's kind, or a nested table; every field is optional.
_STR, _STRINGS, _INT64, _UINT32, _INT, _BOOL, _STRMAP = "str", "strs", "i64", "u32", "int", "bool", "map"
_NODE = {
    "path": _STR,
    "hostPath": _STR,
    "type": _STR,
    "major": _INT64,
    "minor": _INT64,
    "fileMode": _UINT32,
    "permissions": _STR,
    "uid": _UINT32,
    "gid": _UINT32,
}
_MOUNT = {"hostPath": _STR, "containerPath": _STR, "options": _STRINGS, "type": _STR}
_HOOK = {"hookName": _STR, "path": _STR, "args": _STRINGS, "env": _STRINGS, "timeout": _INT}
_RDT = {
    "closID": _STR,
    "l3CacheSchema": _STR,
    "memBwSchema": _STR,
    "schemata": _STRINGS,
    "enableMonitoring": _BOOL,
}
_NET = {"hostInterfaceName": _STR, "name": _STR}
_EDITS: dict[str, object] = {
    "env": _STRINGS,
    "deviceNodes": [_NODE],
    "netDevices": [_NET],
    "hooks": [_HOOK],
    "mounts": [_MOUNT],
    "intelRdt": _RDT,
    "additionalGids": [_UINT32],
}
_DEVICE = {"name": _STR, "annotations": _STRMAP, "containerEdits": _EDITS}
_SPEC = {
    "cdiVersion": _STR,
    "kind": _STR,
    "annotations": _STRMAP,
    "devices": [_DEVICE],
    "containerEdits": _EDITS,
}
# Every field name of the spec: a path in a message shows these, and any other key only by its place.
_FIELDS = frozenset(
    key for table in (_NODE, _MOUNT, _HOOK, _RDT, _NET, _EDITS, _DEVICE, _SPEC) for key in table
)
_LIMITS = {_INT64: (-(2**63), 2**63 - 1), _UINT32: (0, 2**32 - 1), _INT: (-(2**63), 2**63 - 1)}
_KIND_NAMES = {
    _STR: "a string",
    _STRINGS: "an array of strings",
    _INT64: "an integer",
    _UINT32: "an integer from 0 to 4294967295",
    _INT: "an integer",
    _BOOL: "a boolean",
    _STRMAP: "an object of strings",
}


class Spec:
    """A valid CDI spec: where it was read, its directory's priority, and the decoded document."""

    __slots__ = ("devices", "document", "kind", "klass", "path", "priority", "vendor")

    def __init__(
        self,
        *,
        path: str,
        priority: int,
        kind: str,
        vendor: str,
        klass: str,
        document: "dict[str, Any]",
        devices: "dict[str, dict[str, Any]]",
    ) -> None:
        self.path = path
        self.priority = priority
        self.kind = kind
        self.vendor = vendor
        self.klass = klass
        self.document = document
        self.devices = devices


# --- decoding --------------------------------------------------------------------------------------------


def decode_spec_text(text: str, *, yaml: bool, loader: type | None = None, reveal: bool = False) -> object:
    """Decode a spec's text: JSON with the lean decoder, YAML (or JSON that only YAML reads) with PyYAML.

    The reference reads every spec with a YAML parser, of which JSON is a subset; a repeated key is an
    error in both. Decoding is bounded the same way whichever decoder reads the text: nested more than
    ``MAX_NESTING`` levels is refused (a valid spec needs six), and YAML anchors and aliases are read as the
    reference reads them, within a budget on the document they expand to (``MAX_EXPANDED_SIZE``: an alias
    bomb is refused unexpanded); the repeated-key check is linear. ``loader`` is the PyYAML loader class
    (libyaml's ``CSafeLoader`` when PyYAML has it, else ``SafeLoader``). ``reveal``: a refusal may quote the
    text (``cdi validate``); otherwise it names positions only (see ``build_spec``).
    """
    if not yaml:
        from hook.util.jsontext import decode

        repeated: list[tuple[object, int, str]] = []

        def unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
            document = dict(pairs)
            if len(document) != len(pairs) and not repeated:
                seen: set[str] = set()
                for index, (key, _) in enumerate(pairs, 1):
                    if key in seen:
                        repeated.append((document, index, key))
                        break
                    seen.add(key)
            return document

        try:
            document = decode(text, object_pairs_hook=unique_object)
        except RecursionError:
            raise _too_deep() from None
        except ValueError:
            pass  # not JSON: perhaps YAML, as the reference would read it
        else:
            _check_depth(document)
            if repeated:
                raise _repeated(document, *repeated[0], children=_json_children, reveal=reveal)
            return document
    return _decode_yaml(text, loader, reveal)


def _shown(value: object, reveal: bool) -> str:
    """A value of the spec for a message: `` "value"`` (``quote``) when it may be shown, else nothing."""
    return f" {quote(str(value))}" if reveal else ""


def _repeated(
    root: object, owner: object, index: int, key: str, *, children: "Any", reveal: bool
) -> CdiError:
    """The refusal of a key given twice: the path of the object holding it, the key's place there."""
    where = _path_to(root, owner, children, reveal) or "the spec"
    return CdiError(f"repeated field{_shown(key, reveal)} in {where} (its field {index})")


def _path_to(root: object, target: object, children: "Any", reveal: bool) -> str:
    """The JSON path (``devices[0].containerEdits``) of ``target`` (a decoded object, or a composed YAML
    node) within ``root``; "" for the root itself. ``children(value)`` lists ``(key or None, child)``. A key
    that is no field of the spec is shown by its place (``(field 2)``), unless ``reveal``. Walked without
    recursion, each value once."""
    seen: set[int] = set()
    stack: list[tuple[object, str]] = [(root, "")]
    while stack:
        value, where = stack.pop()
        if value is target:
            return where
        if id(value) in seen:
            continue
        seen.add(id(value))
        for index, (key, child) in enumerate(children(value)):
            if key is None:
                step = f"{where}[{index}]"
            else:
                step = _join(where, key if reveal or key in _FIELDS else f"(field {index + 1})")
            stack.append((child, step))
    return ""


def _json_children(value: object) -> "list[tuple[str | None, object]]":
    if isinstance(value, dict):
        return [(str(key), item) for key, item in value.items()]
    return [(None, item) for item in value] if isinstance(value, list) else []


def _yaml_children(node: "Any") -> "list[tuple[str | None, object]]":
    from yaml import MappingNode, ScalarNode, SequenceNode

    if isinstance(node, MappingNode):
        return [(key.value if isinstance(key, ScalarNode) else "", value) for key, value in node.value]
    return [(None, item) for item in node.value] if isinstance(node, SequenceNode) else []


def _too_deep() -> CdiError:
    return CdiError(f"nested more than {MAX_NESTING} levels deep")


class _DuplicateKeyError(ValueError):
    """A YAML mapping (``owner``) names the same key twice, the second time as its ``index``-th key."""

    def __init__(self, owner: object, index: int, key: str) -> None:
        super().__init__(key)
        self.owner = owner
        self.index = index
        self.key = key


def _check_depth(document: object) -> None:
    """Refuse decoded JSON nested more than ``MAX_NESTING`` levels (walked without recursion)."""
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[object]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_NESTING:
            raise _too_deep()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def yaml_loader() -> type:
    """The PyYAML loader specs are read with: libyaml's ``CSafeLoader`` when PyYAML has it (parsing in C
    costs a fraction of the pure-Python ``SafeLoader``), else ``SafeLoader``; the same verdicts either way."""
    try:
        import yaml
    except ImportError:
        raise CdiError("a YAML spec needs PyYAML, which this Python lacks (pip install pyyaml)") from None
    loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


def _decode_yaml(text: str, loader_class: type | None, reveal: bool) -> object:
    """Compose the YAML document, check its nodes (depth, expanded size, repeated keys), then construct it."""
    if loader_class is None:
        loader_class = yaml_loader()
    import yaml

    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    except _DuplicateKeyError as err:
        raise _repeated(node, err.owner, err.index, err.key, children=_yaml_children, reveal=reveal) from None
    except RecursionError:  # the pure-Python composer recurses once per level
        raise _too_deep() from None
    except yaml.MarkedYAMLError as err:
        if err.problem == "exceeded maximum nesting depth":  # libyaml's own bound (1000 levels)
            raise _too_deep() from None
        mark = err.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise CdiError(f"not valid JSON or YAML{where}") from None
    except CdiError:
        raise
    except Exception:  # noqa: BLE001 - a tag's constructor fails its own way (``!!timestamp x``: AttributeError)
        raise CdiError("not valid JSON or YAML") from None
    finally:
        loader.dispose()


def _check_nodes(root: object) -> None:
    """Walk a composed YAML document once, without recursion, each node once however many aliases name it:
    refuse nesting past ``MAX_NESTING`` and an expanded size past ``MAX_EXPANDED_SIZE`` (both counted as if
    every alias were written out: an alias bomb is refused from its few composed nodes, before anything is
    expanded), an alias inside the node it names, a key that is not a scalar and a key given twice in one
    mapping. The size of a scalar is its length plus one, of a sequence or mapping one plus its items'."""
    from yaml import ScalarNode

    if isinstance(root, ScalarNode):
        return
    done: dict[int, tuple[int, int]] = {}  # a checked collection: (its expanded size, its height)
    open_nodes: set[int] = set()  # on the current path: an alias to one of these refers to itself
    stack: list[tuple[Any, list[Any] | None]] = [(root, None)]
    while stack:
        node, items = stack.pop()
        key = id(node)
        if items is None:
            if key in done:
                continue
            if key in open_nodes:
                raise CdiError("a YAML alias (*name) refers to a node that contains it")
            open_nodes.add(key)
            items = _children(node)
            stack.append((node, items))
            stack.extend(
                (child, None)
                for child in items
                if not isinstance(child, ScalarNode) and id(child) not in done
            )
            continue
        open_nodes.discard(key)
        size, height = 1, 1
        for child in items:
            if isinstance(child, ScalarNode):
                size += len(child.value) + 1
                continue
            child_size, child_height = done[id(child)]
            size, height = size + child_size, max(height, child_height + 1)
        if height > MAX_NESTING:
            raise _too_deep()
        if size > MAX_EXPANDED_SIZE:
            raise CdiError(
                f"YAML aliases expand the document past {MAX_EXPANDED_SIZE} (its characters and nodes, "
                "counted as if every alias were written out)"
            )
        done[key] = (size, height)


def _children(node: "Any") -> "list[Any]":
    """A sequence's items, or a mapping's keys and values (a key must be a scalar, given once)."""
    from yaml import MappingNode, ScalarNode

    if not isinstance(node, MappingNode):
        return list(node.value)
    keys: set[tuple[str, str]] = set()
    items: list[Any] = []
    for index, (key, value) in enumerate(node.value, 1):
        if not isinstance(key, ScalarNode):
            raise CdiError("a mapping key must be a string")
        if (key.tag, key.value) in keys:
            raise _DuplicateKeyError(node, index, key.value)
        keys.add((key.tag, key.value))
        items += (key, value)
    return items


def check_shape(value: object, shape: object, where: str, reveal: bool = False) -> object:
    """Type-check ``value`` against a shape (a kind, ``[shape]`` or a table); return it with nulls dropped.
    An unknown field is named by its place in the object, and (``reveal``) quoted."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise CdiError(f"{where or 'the spec'} must be an object")
        checked: dict[str, object] = {}
        for key, item in value.items():
            if key not in shape:
                if reveal:
                    raise CdiError(f"{where or 'the spec'} has unknown field {quote(str(key))}")
                index = list(value).index(key) + 1
                raise CdiError(f"{where or 'the spec'} has an unknown field (its field {index})")
            if item is not None:
                checked[key] = check_shape(item, shape[key], _join(where, key), reveal)
        return checked
    if isinstance(shape, list):
        if not isinstance(value, list):
            raise CdiError(f"{where} must be an array")
        return [check_shape(item, shape[0], f"{where}[{index}]", reveal) for index, item in enumerate(value)]
    return _check_scalar(value, str(shape), where)


def _check_scalar(value: object, kind: str, where: str) -> object:
    """Check one scalar field (or an array of strings, or a string map)."""
    if kind == _STR and isinstance(value, str):
        return value
    if kind in (_STR, _STRINGS, _STRMAP):
        value = _as_text(value)
        if kind == _STR and isinstance(value, str):
            return value
    if kind == _BOOL and isinstance(value, bool):
        return value
    if kind == _STRINGS and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    if kind == _STRMAP and isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return value
    if kind in _LIMITS and isinstance(value, int) and not isinstance(value, bool):
        low, high = _LIMITS[kind]
        if low <= value <= high:
            return value
    raise CdiError(f"{where} must be {_KIND_NAMES[kind]}")


def _as_text(value: object) -> object:
    """Read a number or boolean where a string is wanted as its text, as the reference does (it decodes
    every spec through sigs.k8s.io/yaml, which turns a scalar into a string for a string field: YAML
    ``name: 0`` is the device "0"); also inside arrays of strings and string maps."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_text(item) for key, item in value.items()}
    return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# --- validation ------------------------------------------------------------------------------------------


def build_spec(document: object, *, path: str, priority: int, reveal: bool = False) -> Spec:
    """Check a decoded spec document and return it as a Spec, or raise CdiError saying why not.

    Every rule is the reference's (``Spec.validate``); a refusal names the field at fault by its JSON path
    (``devices[2].containerEdits.env[0]``). ``reveal`` decides the wording, not the rules: with it (``cdi
    validate``, run by a person about a file they name), the value at fault is quoted, as the reference
    quotes it; without it (a container's start: the hook, the shim, precreate, the NRI plugin, whose lines
    reach engine logs and pod events), no decoded key or value of the file is shown, only where it is.
    """
    checked = check_shape(document, _SPEC, "", reveal)
    assert isinstance(checked, dict)  # noqa: S101 - the shape is a table
    reason = version_error(checked, reveal=reveal)
    if reason is not None:
        raise CdiError(reason)
    kind = str(checked.get("kind", ""))
    vendor, klass = parse_qualifier(kind)
    for problem in (vendor_error(vendor, reveal=reveal), class_error(klass, reveal=reveal)):
        if problem is not None:
            raise CdiError(f"kind: {problem}")
    problem = edits_error(checked.get("containerEdits"), None, reveal=reveal)
    if problem is not None:
        raise CdiError(problem)
    devices: dict[str, dict[str, Any]] = {}
    indexes: dict[str, int] = {}
    for index, device in enumerate(checked.get("devices", [])):
        name = str(device.get("name", ""))
        problem = device_error(device, index, reveal=reveal)
        if problem is not None:
            raise CdiError(problem)
        if name in devices:
            raise CdiError(
                f"devices[{index}].name: invalid spec, multiple device{_shown(name, reveal)} "
                f"(as devices[{indexes[name]}])"
            )
        devices[name] = device
        indexes[name] = index
    if not devices:
        raise CdiError("invalid spec, no devices")
    return Spec(
        path=os.path.normpath(path),
        priority=priority,
        kind=kind,
        vendor=vendor,
        klass=klass,
        document=checked,
        devices=devices,
    )


def device_error(device: "dict[str, Any]", index: int, *, reveal: bool = False) -> str | None:
    """Say why the device entry ``devices[index]`` is invalid: its name, empty edits, or invalid edits."""
    problem = device_name_error(str(device.get("name", "")), reveal=reveal)
    if problem is not None:
        return f"devices[{index}].name: {problem}"
    edits = device.get("containerEdits") or {}
    if not any(edits.get(key) for key in ("env", "deviceNodes", "hooks", "mounts", "additionalGids")) and (
        edits.get("intelRdt") is None and not edits.get("netDevices")
    ):
        return f"devices[{index}].containerEdits: invalid device, empty device edits"
    return edits_error(edits, index, reveal=reveal)


def edits_error(edits: "dict[str, Any] | None", device: int | None, *, reveal: bool = False) -> str | None:
    """Say why container edits are invalid (env, device nodes, hooks, mounts, Intel RDT, net devices),
    naming the field at fault: the spec's own edits (``device`` None) or those of ``devices[device]``. The
    path and the index are worked out only for a refusal (every create validates every spec; the first
    entry equal to the one at fault is that one, as an earlier equal one would have failed first)."""
    if not edits:
        return None
    env = edits.get("env", [])
    for entry in env:
        if entry.find("=") <= 0:
            where = f"{_edits_path(device)}.env[{env.index(entry)}]"
            return f"{where}: invalid environment variable{_shown(entry, reveal)}"
    nodes = edits.get("deviceNodes", [])
    for node in nodes:
        problem = _node_error(node, reveal)
        if problem is not None:
            return f"{_edits_path(device)}.deviceNodes[{nodes.index(node)}]{problem}"
    hooks = edits.get("hooks", [])
    for hook in hooks:
        problem = _hook_error(hook, reveal)
        if problem is not None:
            return f"{_edits_path(device)}.hooks[{hooks.index(hook)}]{problem}"
    mounts = edits.get("mounts", [])
    for mount in mounts:
        for field, what in (("hostPath", "host path"), ("containerPath", "container path")):
            if not mount.get(field):
                where = f"{_edits_path(device)}.mounts[{mounts.index(mount)}].{field}"
                return f"{where}: invalid mount, empty {what}"
    rdt = edits.get("intelRdt")
    if rdt is not None:
        clos = str(rdt.get("closID", ""))
        if clos != "/" and (len(clos) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos):
            return f"{_edits_path(device)}.intelRdt.closID: invalid ClosID"
    net = edits.get("netDevices")
    return _net_devices_error(net, f"{_edits_path(device)}.netDevices", reveal) if net else None


def _edits_path(device: int | None) -> str:
    return "containerEdits" if device is None else f"devices[{device}].containerEdits"


def _node_error(node: "dict[str, Any]", reveal: bool) -> str | None:
    """Why a device node is invalid, from its field on (``.type: invalid type``)."""
    if not str(node.get("path", "")):
        return ".path: invalid (empty) device path"
    kind = str(node.get("type", ""))
    if kind not in DEVICE_TYPES:
        return f".type: invalid type{_shown(kind, reveal)}"
    major, minor = node.get("major", 0), node.get("minor", 0)
    if major < 0 or minor < 0:  # -1 would be read as a wildcard
        number = f" {major}:{minor}" if reveal else ""
        return f": invalid (negative) device number{number} (major, minor)"
    permissions = str(node.get("permissions", ""))
    if permissions != NO_PERMISSIONS and permissions.strip("rwm"):
        return f".permissions: invalid permissions{_shown(permissions, reveal)}"
    return None


def _hook_error(hook: "dict[str, Any]", reveal: bool) -> str | None:
    """Why a hook is invalid, from its field on (``.hookName: invalid hook name``)."""
    name = str(hook.get("hookName", ""))
    if name not in HOOK_STAGES:
        stages = ", ".join(HOOK_STAGES)
        return f".hookName: invalid hook name{_shown(name, reveal)} (want one of {stages})"
    # From here on the name is one of HOOK_STAGES: no content of the file, shown either way.
    if not hook.get("path"):
        return f".path: invalid hook {quote(name)} with empty path"
    if hook.get("timeout", 0) < 0:
        timeout = f" {hook['timeout']}" if reveal else ""
        return f".timeout: invalid hook {quote(name)}: negative timeout{timeout}"
    for index, entry in enumerate(hook.get("env", [])):
        if entry.find("=") <= 0:
            return f".env[{index}]: invalid environment variable{_shown(entry, reveal)}"
    return None


def _net_devices_error(devices: "list[dict[str, Any]]", where: str, reveal: bool) -> str | None:
    hosts: dict[str, int] = {}
    names: dict[str, int] = {}
    for index, device in enumerate(devices):
        at = f"{where}[{index}]"
        host, name = str(device.get("hostInterfaceName", "")), str(device.get("name", ""))
        if not host:
            return f"{at}.hostInterfaceName: invalid linux net device, empty HostInterfaceName"
        if not name:
            return f"{at}.name: invalid linux net device, empty Name"
        if host in hosts:
            return (
                f"{at}.hostInterfaceName: invalid linux net device, duplicate HostInterfaceName"
                f"{_shown(host, reveal)} (as {where}[{hosts[host]}])"
            )
        hosts[host] = index
        if name in names:
            return (
                f"{at}.name: invalid linux net device, duplicate Name{_shown(name, reveal)} "
                f"(as {where}[{names[name]}])"
            )
        names[name] = index
    return None


# --- files -----------------------------------------------------------------------------------------------


def read_spec_file(path: str, *, trust: bool = True) -> tuple[bytes, os.stat_result]:
    """Read a spec file without blocking (a FIFO is refused); one over the size limit is refused unread, and
    so is (with ``trust``) one that is not root's or is group/world-writable: runc runs its hooks as root.
    Return its bytes and what ``fstat`` said of it."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise CdiError(f"could not read {path}: {os_reason(err)}") from None
    too_large = CdiError(f"could not read {path}: larger than {MAX_SPEC_FILE_BYTES} bytes")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CdiError(f"could not read {path}: not a regular file")
        problem = trust_problem(info.st_uid, info.st_mode) if trust else None
        if problem is not None:
            raise CdiError(f"untrusted CDI spec {path}: {problem}")
        if info.st_size > MAX_SPEC_FILE_BYTES:
            raise too_large
        data = os.read(fd, MAX_SPEC_FILE_BYTES + 1)
        while data and len(data) <= MAX_SPEC_FILE_BYTES:
            chunk = os.read(fd, MAX_SPEC_FILE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as err:
        raise CdiError(f"could not read {path}: {os_reason(err)}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SPEC_FILE_BYTES:
        raise too_large
    return data, info


def untrusted_reason(path: str) -> str | None:
    """Say why the spec at ``path`` would be skipped as untrusted where it is (the file, then the directory
    holding it: not root's, or group/world-writable); None when both are trusted."""
    for where, what in ((path, "the file"), (os.path.dirname(path) or ".", "its directory")):
        try:
            info = os.stat(where)
        except OSError as err:
            return f"{what} cannot be inspected: {os_reason(err)}"
        problem = trust_problem(info.st_uid, info.st_mode)
        if problem is not None:
            return f"{what} {problem}"
    return None


def load_spec(
    path: str,
    priority: int = 0,
    *,
    loader: type | None = None,
    trust: bool = True,
    cache: str = "",
    reveal: bool = False,
    memo: "dict[str, tuple[int, bytes, Spec]] | None" = None,
) -> Spec:
    """Read, decode and validate one spec file; every error is a CdiError naming the file. With ``trust``
    (the default) a file that is not root's, or is group/world-writable, is refused unread. ``cache``: the
    directory of decoded YAML specs (``hook.cdi.speccache``; "" for none), whose hit is validated as a
    decoded spec is, and which holds only specs that passed. ``reveal``: a refusal may quote the file's
    content (``cdi validate``); by default it names the field and its position only (``build_spec``).
    ``memo``: a long-running process's specs by path, with the priority and exact bytes each was valid
    for; a file read again with the same bytes at the same priority is that spec (decoding and validating
    are functions of the bytes, the path and the priority), anything else is decoded and the entry
    replaced. The file is read and its owner and mode checked every time."""
    cached = bool(cache) and path.endswith(".yaml")
    if cached:
        import time

        from hook.cdi import speccache

        read_at_ns = time.time_ns()
    data, info = read_spec_file(path, trust=trust)
    known = memo.get(path) if memo is not None else None
    if known is not None and known[0] == priority and known[1] == data:
        return known[2]
    spec: Spec | None = None
    if cached:
        key = speccache.identity(info)
        document = speccache.lookup(cache, path, key)
        if document is not None:
            spec = _cached_spec(document, path, priority)
    if spec is None:
        try:
            spec = parse_spec_bytes(data, path=path, priority=priority, loader=loader, reveal=reveal)
        except CdiError as err:
            raise CdiError(f"invalid CDI spec {path}: {err}") from None
        if cached:
            speccache.store(cache, path, key, spec.document, read_at_ns=read_at_ns)
    if memo is not None:
        memo[path] = (priority, data, spec)
    return spec


def _cached_spec(document: "dict[str, Any]", path: str, priority: int) -> Spec | None:
    """The spec a cache entry's document builds, or None when it does not (decode the file itself)."""
    try:
        return build_spec(document, path=path, priority=priority)
    except CdiError:
        return None


def parse_spec_bytes(
    data: bytes, *, path: str, priority: int = 0, loader: type | None = None, reveal: bool = False
) -> Spec:
    """Decode and validate a spec's bytes (YAML when ``path`` ends in ``.yaml``, read by ``loader``);
    ``reveal`` as for ``load_spec``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CdiError(f"not valid UTF-8 at byte {err.start}") from None
    document = decode_spec_text(text, yaml=path.endswith(".yaml"), loader=loader, reveal=reveal)
    if document is None:
        raise CdiError("no Spec data")
    return build_spec(document, path=path, priority=priority, reveal=reveal)
