"""CDI spec versions: which ones exist, and the smallest one a spec's fields need.

The rules are container-device-interface's ``specs-go/version.go``: a spec is valid when its
``cdiVersion`` (an optional leading ``v`` allowed) is a known version no older than the one its fields
need (``minimum_version``). Versions 0.1.0 and 0.2.0 are known, but every spec needs at least 0.3.0.
"""

# Newest first, as the reference orders them.
KNOWN_VERSIONS = ("1.1.0", "1.0.0", "0.8.0", "0.7.0", "0.6.0", "0.5.0", "0.4.0", "0.3.0", "0.2.0", "0.1.0")
CURRENT_VERSION = KNOWN_VERSIONS[0]
EARLIEST_VERSION = "0.3.0"
_DIGITS = frozenset("0123456789")


def normalize_version(version: str) -> str:
    """Drop one leading ``v`` (``v0.6.0`` is ``0.6.0``)."""
    return version.removeprefix("v")


def is_known_version(version: str) -> bool:
    """Tell whether ``version`` (normalised) is a released CDI spec version."""
    return normalize_version(version) in KNOWN_VERSIONS


def minimum_version(spec: dict[str, object]) -> str:
    """Return the smallest spec version whose fields cover ``spec`` (a decoded, type-checked document)."""
    return minimum_version_for(spec)[0]


def minimum_version_for(spec: dict[str, object]) -> tuple[str, str]:
    """Return the smallest spec version whose fields cover ``spec`` and the field that needs it ("" for
    the earliest version, which every spec may have)."""
    all_edits = [_edits(spec), *(_edits(device) for device in _devices(spec))]
    for edits in all_edits:
        rdt = edits.get("intelRdt")
        if isinstance(rdt, dict) and rdt.get("schemata") is not None:
            return "1.1.0", "intelRdt.schemata"
        if isinstance(rdt, dict) and rdt.get("enableMonitoring"):
            return "1.1.0", "intelRdt.enableMonitoring"
        if edits.get("netDevices"):
            return "1.1.0", "netDevices"
    for edits in all_edits:
        if edits.get("intelRdt") is not None:
            return "0.7.0", "intelRdt"
        if edits.get("additionalGids"):
            return "0.7.0", "additionalGids"
    if spec.get("annotations") or any(device.get("annotations") for device in _devices(spec)):
        return "0.6.0", "annotations"
    kind = spec.get("kind")
    if isinstance(kind, str) and "/" in kind and "." in kind.partition("/")[2]:
        return "0.6.0", "kind (a '.' in the class)"
    if any(str(device.get("name") or "")[:1] in _DIGITS for device in _devices(spec)):
        return "0.5.0", "name (a device name starting with a digit)"
    if any(node.get("hostPath") for edits in all_edits for node in _items(edits, "deviceNodes")):
        return "0.5.0", "deviceNodes.hostPath"
    if any(mount.get("type") for edits in all_edits for mount in _items(edits, "mounts")):
        return "0.4.0", "mounts.type"
    return EARLIEST_VERSION, ""


def version_error(spec: dict[str, object], *, reveal: bool = False) -> str | None:
    """Say why the spec's ``cdiVersion`` is refused (unknown, or older than its fields need), else None;
    an unknown value is quoted only with ``reveal`` (a known one is no content of the file's own)."""
    from hook.cdi.names import quote

    declared = spec.get("cdiVersion")
    declared = declared if isinstance(declared, str) else ""
    version = normalize_version(declared)
    if version not in KNOWN_VERSIONS:
        shown = f" {quote(declared)}" if reveal else ""
        return f"invalid version{shown} in cdiVersion"
    needed, field = minimum_version_for(spec)
    if KNOWN_VERSIONS.index(needed) < KNOWN_VERSIONS.index(version):
        why = f"{field} needs it" if field else "every spec needs it"
        return f"the spec version must be at least v{needed} (cdiVersion is {quote(declared)}; {why})"
    return None


def _needs_110(edits: dict[str, object]) -> bool:
    """Intel RDT ``schemata``/``enableMonitoring`` or any net device came with 1.1.0."""
    rdt = edits.get("intelRdt")
    if isinstance(rdt, dict) and (rdt.get("schemata") is not None or rdt.get("enableMonitoring")):
        return True
    return bool(edits.get("netDevices"))


def _edits(owner: dict[str, object]) -> dict[str, object]:
    edits = owner.get("containerEdits")
    return edits if isinstance(edits, dict) else {}


def _devices(spec: dict[str, object]) -> list[dict[str, object]]:
    devices = spec.get("devices")
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _items(edits: dict[str, object], key: str) -> list[dict[str, object]]:
    items = edits.get(key)
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
