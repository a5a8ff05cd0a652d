"""Per-allocation CDI specs: what a device plugin writes so that engines with native CDI need no shim.

The flow, for a GPU-sharing device plugin (``DEVICE_LIST_STRATEGY=cdi-cri`` or ``cdi-annotations``):

1. ``Allocate(ids)`` returns the CDI device ``gpu-env.dev/alloc=<hash>`` (``alloc_device(ids)``): the hash
   of the allocated (virtual) device ids, so it is known before the pod is.
2. ``PreStartContainer(ids)``: the plugin has learnt the pod (kubelet's pod-resources API) and chosen the
   physical GPUs; ``write_alloc_spec`` composes one spec whose single device carries the real devices'
   edits, found in the node's specs (spec-wide edits once per spec, then each device's, as an engine would
   apply them), plus the file's variables, and writes it atomically into ``/var/run/cdi`` as
   ``gpu-env.dev-alloc_<hash>_<pod-uid>.json``, with the smallest ``cdiVersion`` its fields need.
3. The engine (containerd >= 1.7, CRI-O, podman, Docker >= 25) resolves the name from step 1 natively.

Pinned to its pod: the file is named for the pod, and writing an allocation for a pod removes the same
allocation's spec of any other pod (kubelet hands device ids to a new pod only once the old one let go of
them), so one name never resolves to two specs. The device-plugin API has no deallocate call, so the
plugin removes specs by ``gc_alloc_specs``: every spec of ours whose pod is not among the live ones —
the pod uids kubelet's pod-resources ``List()`` reports, or (the default of the command) the pods kubelet
still has a directory for under ``/var/lib/kubelet/pods``.

The migration from names made before the naming key (``namekey.legacy_name``: anyone who knows the ids can
compute one and name it to a native CDI engine): writing ids for a pod also retires the unkeyed spec of the
same ids of any other pod, so an unkeyed name never outlives the pod it was written for once the devices
are another's. With ``[gpu-env.cdi] unkeyed-alloc-names = "refuse"`` (the migration's end, chosen by the
operator once no pod from before the key runs) every write and every gc removes every unkeyed spec. A
removal judges the file under a private name first (``hook.util.atomicwrite.remove_if``): only a spec whose
content is ours (our kind, the one device its file name names) goes.
"""

import os

from hook.cdi.names import quote
from hook.pipeline.cdidevices import ALLOC_FILE_PREFIX as FILE_PREFIX
from hook.pipeline.cdidevices import ALLOC_KIND
from hook.util import envvars
from hook.util.errors import CdiError, HookError, UsageError, os_error
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from hook.cdi.registry import Registry


DEFAULT_DIRECTORY = "/var/run/cdi"
KUBELET_PODS_DIR = "/var/lib/kubelet/pods"
FILE_MODE = 0o600
_POD_UID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_K8S_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


def alloc_name(device_ids: "Iterable[str]", key: bytes | None = None) -> str:
    """Return the allocation's device name: the keyed name of the sorted, distinct ids
    (``hook.producer.namekey``, as the env file's name is made, so both agree for one allocation); ``key``
    None: the node's key."""
    from hook.producer.namekey import checked_ids, keyed_name, load_key

    ids = checked_ids(device_ids, "cdi alloc")
    return keyed_name(ids, key if key is not None else load_key())


def alloc_device(device_ids: "Iterable[str]", key: bytes | None = None) -> str:
    """Return the fully qualified CDI device an ``Allocate`` response names: ``gpu-env.dev/alloc=<name>``."""
    return f"{ALLOC_KIND}={alloc_name(device_ids, key)}"


def check_pod_uid(pod_uid: str) -> str:
    """A pod uid as Kubernetes makes them: letters, digits and ``-``, 1 to 128 characters."""
    if not pod_uid or len(pod_uid) > 128 or not set(pod_uid) <= _POD_UID_CHARS:
        raise UsageError(f"cdi alloc: --pod-uid {quote(pod_uid, 64)} must be letters, digits and '-'")
    return pod_uid


def alloc_pins(
    pod_uid: str | None = None, pod_namespace: str | None = None, pod_name: str | None = None
) -> dict[str, str]:
    """The pod an allocation is written for (``hook.pipeline.pod``'s pin keys): its UID, or its namespace and
    name (Kubernetes names: lower-case letters, digits, ``-`` and ``.``)."""
    from hook.pipeline import pod

    if pod_uid:
        if pod_namespace or pod_name:
            raise UsageError("cdi alloc: give --pod-uid, or --pod-namespace and --pod-name, not both")
        return {pod.UID: check_pod_uid(pod_uid)}
    if not (pod_namespace and pod_name):
        raise UsageError("cdi alloc: --pod-uid, or --pod-namespace and --pod-name, is required")
    for option, value in (("--pod-namespace", pod_namespace), ("--pod-name", pod_name)):
        if len(value) > 253 or not set(value) <= _K8S_NAME_CHARS:
            raise UsageError(
                f"cdi alloc: {option} {quote(value, 64)} must be lower-case letters, digits, '-', '.'"
            )
    return {pod.NAMESPACE: pod_namespace, pod.NAME: pod_name}


def alloc_spec_path(name: str, pins: dict[str, str], directory: str = DEFAULT_DIRECTORY) -> str:
    """Return ``<directory>/gpu-env.dev-alloc_<name>_<pod-uid>.json``, or ``..._<namespace>_<name>.json``
    (the reference's transient name, the pod in it: ``hook.pipeline.cdidevices.alloc_file_pins`` reads it
    back)."""
    from hook.pipeline import pod
    from hook.pipeline.cdidevices import alloc_file_pins

    where = pins[pod.UID] if pod.UID in pins else f"{pins[pod.NAMESPACE]}_{pins[pod.NAME]}"
    file_name = f"{FILE_PREFIX}{name}_{where}.json"
    if alloc_file_pins(file_name) != (name, pins):  # what the shim reads back must be this very pod
        raise UsageError(f"cdi alloc: {quote(pod.describe_pin(pins), 64)} is not a Kubernetes pod name")
    return os.path.join(directory, file_name)


def build_alloc_spec(
    name: str,
    devices: list[str],
    values: "Mapping[str, str]",
    registry: "Registry",
    *,
    default_kind: str,
) -> "dict[str, Any]":
    """Compose the allocation's spec: one device ``name`` with the real devices' edits and the variables.

    ``devices`` are CDI names or plain ids (of ``default_kind``); every one must be defined by the node's
    specs (and none may be an allocation itself). The variables follow the env file's key rules; after them
    ``NVIDIA_VISIBLE_DEVICES=void``, so that a legacy hook on the node does not hand the GPUs over again.
    """
    from hook.cdi.edits import merge_edits
    from hook.cdi.registry import resolve_edits
    from hook.cdi.version import minimum_version
    from hook.pipeline.cdidevices import VOID, cdi_device_names

    names = cdi_device_names(devices, default_kind)
    if not names:
        raise UsageError("cdi alloc: at least one real device is required")
    nested = [n for n in names if n.startswith(ALLOC_KIND + "=")]
    if nested:
        raise UsageError(f"cdi alloc: {quote(nested[0])} is an allocation, not a real device")
    merged = merge_edits(resolve_edits(registry, names))
    merged["env"] = [*merged["env"], *_env_entries(values), f"{envvars.NVIDIA_VISIBLE_DEVICES}={VOID}"]
    edits = {key: value for key, value in merged.items() if value not in (None, [])}
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": ALLOC_KIND,
        "devices": [{"name": name, "containerEdits": edits}],
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def _env_entries(values: "Mapping[str, str]") -> list[str]:
    """``KEY=value`` entries for the variables, refusing what the hook refuses in an env file."""
    from hook.pipeline.config import is_env_name
    from hook.pipeline.envfile import refused_key_rule

    entries = []
    for key, value in values.items():
        if not is_env_name(key):
            raise UsageError(f"cdi alloc: key {quote(key, 64)} must match [A-Za-z_][A-Za-z0-9_]*")
        if key in envvars.RESERVED_KEYS:
            raise UsageError(f"cdi alloc: key {key} is reserved: the pod is given with the --pod options")
        rule = refused_key_rule(key, envvars.NVIDIA_ENV_FROM_FILE)
        if rule is not None:
            raise UsageError(f"cdi alloc: key {key} matches {rule} and may not be set for a container")
        if "\0" in value:
            raise UsageError(f"cdi alloc: the value of {key} contains a NUL byte")
        entries.append(f"{key}={value}")
    return entries


def write_alloc_spec(
    spec: "dict[str, Any]",
    pins: dict[str, str],
    directory: str = DEFAULT_DIRECTORY,
    *,
    unkeyed: str | None = None,
    refuse_unkeyed: bool = False,
) -> str:
    """Check the spec as any engine would, remove the same allocation's spec of other pods (under its name,
    or ``unkeyed``, its ids' name from before the key; with ``refuse_unkeyed`` every unkeyed spec, whoever's),
    then write it atomically, root-owned, 0600 (its variables may be secrets; engines read it as root);
    return its path. The directory is created (0755) when missing. The old specs go first: when one cannot
    be removed, nothing is written."""
    import json

    from hook.cdi.spec import build_spec
    from hook.util.atomicwrite import write_atomic

    name = spec["devices"][0]["name"]
    path = alloc_spec_path(name, pins, directory)
    build_spec(spec, path=path, priority=0)  # what an engine would refuse is never written
    data = (json.dumps(spec, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as err:
        raise os_error("write CDI spec", path, err) from None
    retired = [
        other
        for other in list_alloc_specs(directory)
        if (other.name == name and other.path != path)
        or (other.name == unkeyed and other.pins != pins)
        or (refuse_unkeyed and is_unkeyed(other.name))
    ]
    remove_our_specs(retired, directory)
    try:
        write_atomic(path, data, mode=FILE_MODE, owner=(0, 0) if os.geteuid() == 0 else None)
    except OSError as err:
        raise os_error("write CDI spec", path, err) from None
    return path


def is_unkeyed(name: str) -> bool:
    """Tell whether an allocation name is one made before the naming key (16 hex digits, not 32)."""
    from hook.producer.namekey import LEGACY_HEX_CHARS

    return len(name) == LEGACY_HEX_CHARS


def remove_our_specs(specs: "list[AllocSpec]", directory: str) -> list[str]:
    """Remove these spec files of the directory, each only if it is still ours when it goes (judged under a
    private name: a regular file whose JSON has our kind and the one device its file name names; anything
    else is put back); return the paths removed."""
    from hook.util.atomicwrite import remove_if

    if not specs:
        return []
    removed = []
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for spec in specs:
            try:
                if remove_if(os.path.basename(spec.path), dir_fd, spec.is_ours):
                    removed.append(spec.path)
            except OSError as err:
                raise os_error("remove CDI spec", spec.path, err) from None
    finally:
        os.close(dir_fd)
    return removed


class AllocSpec:
    """One per-allocation spec file found in a directory: its path, allocation name and pod (pin keys)."""

    __slots__ = ("name", "path", "pins")

    def __init__(self, path: str, name: str, pins: dict[str, str]) -> None:
        self.path = path
        self.name = name
        self.pins = pins

    @property
    def pod(self) -> str:
        """The pod as ``--live`` names it: its UID, or ``namespace/name``."""
        from hook.pipeline import pod

        return self.pins.get(pod.UID) or f"{self.pins[pod.NAMESPACE]}/{self.pins[pod.NAME]}"

    def __repr__(self) -> str:
        return f"AllocSpec({self.path!r})"

    def is_ours(self, fd: int) -> bool:
        """Tell whether the open file is this spec as ``cdi alloc write`` writes it: a regular file of at
        most ``MAX_SPEC_FILE_BYTES`` whose JSON has our kind and one device, named as the file is."""
        import json
        import stat

        from hook.cdi.spec import MAX_SPEC_FILE_BYTES

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        data = b""
        while len(data) <= MAX_SPEC_FILE_BYTES:
            chunk = os.read(fd, MAX_SPEC_FILE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
        try:
            document = json.loads(data)
        except ValueError:
            return False
        devices = document.get("devices") if isinstance(document, dict) else None
        return (
            len(data) <= MAX_SPEC_FILE_BYTES
            and document.get("kind") == ALLOC_KIND
            and isinstance(devices, list)
            and len(devices) == 1
            and isinstance(devices[0], dict)
            and devices[0].get("name") == self.name
        )


def list_alloc_specs(directory: str = DEFAULT_DIRECTORY) -> list[AllocSpec]:
    """Return our per-allocation spec files in a directory: only names ``cdi alloc write`` makes (prefix, a
    16- or 32-hex name, a pod, ``.json``); other files are not ours."""
    from hook.pipeline.cdidevices import alloc_file_pins

    try:
        entries = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except OSError as err:
        raise CdiError(f"could not read the CDI spec directory {directory}: {os_reason(err)}") from None
    found = []
    for entry in entries:
        parsed = alloc_file_pins(entry)
        if parsed is not None:
            found.append(AllocSpec(os.path.join(directory, entry), *parsed))
    return found


def remove_alloc_specs(device_ids: "Iterable[str]", directory: str = DEFAULT_DIRECTORY) -> list[str]:
    """Remove every spec of the allocation of ``device_ids`` (under its keyed name, or the unkeyed name of
    before the key); return the paths removed."""
    from hook.producer.namekey import checked_ids, legacy_name

    names = {alloc_name(device_ids), legacy_name(checked_ids(device_ids, "cdi alloc remove"))}
    removed = []
    for spec in list_alloc_specs(directory):
        if spec.name in names:
            _unlink(spec.path)
            removed.append(spec.path)
    return removed


def live_pods_from_kubelet(pods_dir: str = KUBELET_PODS_DIR) -> frozenset[str]:
    """Return the pod uids kubelet still keeps a directory for (it removes it once the pod is gone)."""
    try:
        return frozenset(os.listdir(pods_dir))
    except OSError as err:
        raise CdiError(f"could not list the pods in {pods_dir}: {os_reason(err)}") from None


def gc_alloc_specs(
    live_pods: frozenset[str],
    directory: str = DEFAULT_DIRECTORY,
    *,
    names_known: bool = True,
    refuse_unkeyed: bool = False,
) -> tuple[list[str], list[str]]:
    """Remove the per-allocation specs whose pod is not live: ``live_pods`` holds UIDs and ``namespace/name``
    pairs; with ``names_known`` False (live pods from kubelet's directories, which name UIDs only) a spec
    pinned by namespace and name is kept; with ``refuse_unkeyed`` a live pod's spec named before the key
    goes too, if it is ours (``remove_our_specs``). Every spec is tried: return the paths removed and one
    line per spec that could not be removed."""
    from hook.pipeline import pod

    removed: list[str] = []
    failed: list[str] = []
    ended: list[AllocSpec] = []
    for spec in list_alloc_specs(directory):
        if spec.pod in live_pods or (pod.UID not in spec.pins and not names_known):
            if refuse_unkeyed and is_unkeyed(spec.name):
                ended.append(spec)
            continue
        try:
            os.unlink(spec.path)
        except FileNotFoundError:
            continue
        except OSError as err:
            failed.append(str(os_error("remove CDI spec", spec.path, err)))
            continue
        removed.append(spec.path)
    for spec in ended:
        try:
            removed += remove_our_specs([spec], directory)
        except HookError as err:
            failed.append(str(err))
    return removed, failed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        raise os_error("remove CDI spec", path, err) from None
