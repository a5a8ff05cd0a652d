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
"""

from __future__ import annotations

import os

from hook.cdi.names import quote
from hook.pipeline.cdidevices import ALLOC_FILE_PREFIX as FILE_PREFIX
from hook.pipeline.cdidevices import ALLOC_KIND
from hook.util import envvars
from hook.util.errors import CdiError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from hook.cdi.registry import Registry


DEFAULT_DIRECTORY = "/var/run/cdi"
KUBELET_PODS_DIR = "/var/lib/kubelet/pods"
HASH_HEX_CHARS = 16
FILE_MODE = 0o644
_POD_UID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def alloc_name(device_ids: Iterable[str]) -> str:
    """Return the allocation's device name: 16 hex digits of sha256 over the sorted, distinct ids (as the
    env file's name is made, so both agree for one allocation)."""
    from hook.producer.envfile import env_file_name

    return env_file_name(device_ids).removesuffix(".env")


def alloc_device(device_ids: Iterable[str]) -> str:
    """Return the fully qualified CDI device an ``Allocate`` response names: ``gpu-env.dev/alloc=<hash>``."""
    return f"{ALLOC_KIND}={alloc_name(device_ids)}"


def check_pod_uid(pod_uid: str) -> str:
    """A pod uid as Kubernetes makes them: letters, digits and ``-``, 1 to 128 characters."""
    if not pod_uid or len(pod_uid) > 128 or not set(pod_uid) <= _POD_UID_CHARS:
        raise UsageError(f"cdi alloc: --pod-uid {quote(pod_uid, 64)} must be letters, digits and '-'")
    return pod_uid


def alloc_spec_path(name: str, pod_uid: str, directory: str = DEFAULT_DIRECTORY) -> str:
    """Return ``<directory>/gpu-env.dev-alloc_<hash>_<pod-uid>.json`` (the reference's transient name)."""
    return os.path.join(directory, f"{FILE_PREFIX}{name}_{check_pod_uid(pod_uid)}.json")


def build_alloc_spec(
    name: str,
    devices: list[str],
    values: Mapping[str, str],
    registry: Registry,
    *,
    default_kind: str,
) -> dict[str, Any]:
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


def _env_entries(values: Mapping[str, str]) -> list[str]:
    """``KEY=value`` entries for the variables, refusing what the hook refuses in an env file."""
    from hook.pipeline.config import is_env_name
    from hook.pipeline.envfile import refused_key_rule

    entries = []
    for key, value in values.items():
        if not is_env_name(key):
            raise UsageError(f"cdi alloc: key {quote(key, 64)} must match [A-Za-z_][A-Za-z0-9_]*")
        if key in envvars.RESERVED_KEYS:
            raise UsageError(f"cdi alloc: key {key} is reserved: the pod is given with --pod-uid")
        rule = refused_key_rule(key, envvars.NVIDIA_ENV_FROM_FILE)
        if rule is not None:
            raise UsageError(f"cdi alloc: key {key} matches {rule} and may not be set for a container")
        if "\0" in value:
            raise UsageError(f"cdi alloc: the value of {key} contains a NUL byte")
        entries.append(f"{key}={value}")
    return entries


def write_alloc_spec(spec: dict[str, Any], pod_uid: str, directory: str = DEFAULT_DIRECTORY) -> str:
    """Check the spec as any engine would, remove the same allocation's spec of other pods, and write it
    atomically (root-owned, 0644); return its path. The directory is created (0755) when missing."""
    import json

    from hook.cdi.spec import build_spec
    from hook.util.atomicwrite import write_atomic

    name = spec["devices"][0]["name"]
    path = alloc_spec_path(name, pod_uid, directory)
    build_spec(spec, path=path, priority=0)  # what an engine would refuse is never written
    data = (json.dumps(spec, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        for other in list_alloc_specs(directory):
            if other.name == name and other.pod_uid != pod_uid:
                os.unlink(other.path)
        write_atomic(path, data, mode=FILE_MODE, owner=(0, 0) if os.geteuid() == 0 else None)
    except OSError as err:
        from hook.util.errors import os_error

        raise os_error("write CDI spec", path, err) from None
    return path


class AllocSpec:
    """One per-allocation spec file found in a directory: its path, device name and pod."""

    __slots__ = ("name", "path", "pod_uid")

    def __init__(self, path: str, name: str, pod_uid: str) -> None:
        self.path = path
        self.name = name
        self.pod_uid = pod_uid

    def __repr__(self) -> str:
        return f"AllocSpec({self.path!r})"


def list_alloc_specs(directory: str = DEFAULT_DIRECTORY) -> list[AllocSpec]:
    """Return our per-allocation spec files in a directory (by their names; other files are not ours)."""
    try:
        entries = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    except OSError as err:
        raise CdiError(f"could not read the CDI spec directory {directory}: {err.strerror}") from None
    found = []
    for entry in entries:
        if not (entry.startswith(FILE_PREFIX) and entry.endswith(".json")):
            continue
        name, sep, pod_uid = entry[len(FILE_PREFIX) : -len(".json")].partition("_")
        if sep and len(name) == HASH_HEX_CHARS and pod_uid and set(pod_uid) <= _POD_UID_CHARS:
            found.append(AllocSpec(os.path.join(directory, entry), name, pod_uid))
    return found


def remove_alloc_specs(device_ids: Iterable[str], directory: str = DEFAULT_DIRECTORY) -> list[str]:
    """Remove every spec of the allocation of ``device_ids``; return the paths removed."""
    name = alloc_name(device_ids)
    removed = []
    for spec in list_alloc_specs(directory):
        if spec.name == name:
            _unlink(spec.path)
            removed.append(spec.path)
    return removed


def live_pods_from_kubelet(pods_dir: str = KUBELET_PODS_DIR) -> frozenset[str]:
    """Return the pod uids kubelet still keeps a directory for (it removes it once the pod is gone)."""
    try:
        return frozenset(os.listdir(pods_dir))
    except OSError as err:
        raise CdiError(f"could not list the pods in {pods_dir}: {err.strerror}") from None


def gc_alloc_specs(live_pods: frozenset[str], directory: str = DEFAULT_DIRECTORY) -> list[str]:
    """Remove the per-allocation specs whose pod is not live; return the paths removed."""
    removed = []
    for spec in list_alloc_specs(directory):
        if spec.pod_uid not in live_pods:
            _unlink(spec.path)
            removed.append(spec.path)
    return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        from hook.util.errors import os_error

        raise os_error("remove CDI spec", path, err) from None
