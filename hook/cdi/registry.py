"""The CDI devices a node offers: spec directories scanned in priority order, conflicts resolved.

As container-device-interface's ``Cache.refresh``: directories are read in the order given (the later the
directory, the higher its priority; by default ``/etc/cdi`` then ``/var/run/cdi``), a missing directory is
skipped, and in each directory the ``.json`` and ``.yaml`` files are read in name order (subdirectories are
not entered). A device defined again in a higher-priority directory replaces the earlier one; defined twice
at the same priority it is a conflict, recorded against both files, and the device is dropped altogether
(even when another directory also defines it, as the reference does). A spec that cannot be read, decoded
or validated, or is not to be trusted (not root's, or group/world-writable, as the file or as its
directory: a spec's edits and hooks run as root) is recorded and skipped: the other specs' devices still
resolve, and a request for a device no valid spec defines is refused naming the skipped files.
"""

import os

from hook.cdi.names import quote
from hook.cdi.spec import SPEC_EXTENSIONS, Spec, load_spec
from hook.util.beneath import trust_problem
from hook.util.errors import CdiError, CdiUnresolvableError
from hook.util.safetext import os_reason

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
# The valid specs of the last scan by path, with the priority and bytes each was valid for
# (``hook.cdi.spec.load_spec``'s memo): a long-running process (the NRI plugin scans at every create)
# decodes and validates only a spec whose bytes changed; files no longer listed are forgotten.
_SPECS: "dict[str, tuple[int, bytes, Spec]]" = {}


class Registry:
    """What the spec directories hold: devices by qualified name, every valid spec, errors by file, and
    the spec files skipped as unreadable, undecodable or invalid."""

    __slots__ = ("conflicts", "devices", "errors", "skipped", "specs")

    def __init__(
        self,
        *,
        devices: dict[str, tuple[Spec, str]],
        specs: tuple[Spec, ...],
        errors: dict[str, list[str]],
        conflicts: frozenset[str],
        skipped: tuple[str, ...],
    ) -> None:
        self.devices = devices
        self.specs = specs
        self.errors = errors
        self.conflicts = conflicts
        self.skipped = skipped


def list_spec_files(directory: str) -> list[str]:
    """Return the spec files of one directory in name order (none when it does not exist); a directory that
    is not root's, or is group/world-writable, is refused (its specs are not to be trusted)."""
    try:
        info = os.stat(directory)
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise CdiError(f"could not read the CDI spec directory {directory}: {os_reason(err)}") from None
    problem = trust_problem(info.st_uid, info.st_mode)
    if problem is not None:
        raise CdiError(f"untrusted CDI spec directory {directory}: {problem}")
    return [
        entry.path
        for entry in entries
        if not entry.is_dir(follow_symlinks=False) and entry.name.endswith(SPEC_EXTENSIONS)
    ]


def load_registry(
    directories: tuple[str, ...] | list[str] = DEFAULT_SPEC_DIRS, *, cache: str = ""
) -> Registry:
    """Scan the spec directories and resolve every device's qualified name (the reference's rules);
    ``cache``: the directory of decoded YAML specs the stages use (``hook.cdi.speccache``), "" for none."""
    devices: dict[str, tuple[Spec, str]] = {}
    specs: list[Spec] = []
    errors: dict[str, list[str]] = {}
    conflicts: set[str] = set()
    skipped: list[str] = []
    listed: set[str] = set()
    for priority, directory in enumerate(directories):
        try:
            paths = list_spec_files(os.path.normpath(directory))
        except CdiError as err:
            errors.setdefault(directory, []).append(str(err))
            skipped.append(directory)
            continue
        listed.update(paths)
        for path in paths:
            try:
                spec = load_spec(path, priority, cache=cache, memo=_SPECS)
            except CdiError as err:
                errors.setdefault(path, []).append(str(err))
                skipped.append(path)
                continue
            specs.append(spec)
            for name in spec.devices:
                qualified = f"{spec.kind}={name}"
                old = devices.get(qualified)
                if old is not None and old[0].priority >= priority:
                    if old[0].priority == priority:
                        message = (
                            f"conflicting device {quote(qualified)} "
                            f"(specs {quote(spec.path)}, {quote(old[0].path)})"
                        )
                        errors.setdefault(spec.path, []).append(message)
                        errors.setdefault(old[0].path, []).append(message)
                        conflicts.add(qualified)
                    continue
                devices[qualified] = (spec, name)
    for name in conflicts:
        devices.pop(name, None)
    for path in _SPECS.keys() - listed:
        del _SPECS[path]
    return Registry(
        devices=devices,
        specs=tuple(specs),
        errors=errors,
        conflicts=frozenset(conflicts),
        skipped=tuple(skipped),
    )


def skipped_note(registry: Registry) -> str:
    """`` (skipped specs: "a", "b")`` for a refusal when specs were skipped, else ""."""
    if not registry.skipped:
        return ""
    listed = ", ".join(quote(path) for path in registry.skipped[:4])
    more = f" and {len(registry.skipped) - 4} more" if len(registry.skipped) > 4 else ""
    return f" (skipped specs: {listed}{more})"


def resolve_edits(registry: Registry, names: list[str]) -> list[dict[str, object]]:
    """Return the container edits for ``names`` in order: a spec's own edits once, before its first
    device's, then each device's. Unknown names raise one CdiError naming them all (``InjectDevices``)."""
    unresolved = [name for name in names if name not in registry.devices]
    if unresolved:
        listed = ", ".join(quote(name, 128) for name in unresolved[:8])
        more = f" and {len(unresolved) - 8} more" if len(unresolved) > 8 else ""
        note = skipped_note(registry)
        raise CdiUnresolvableError(
            f"unresolvable CDI devices {listed}{more}{note}", names=tuple(unresolved), skipped=note
        )
    edits: list[dict[str, object]] = []
    seen: list[Spec] = []
    for name in names:
        spec, device = registry.devices[name]
        if not any(spec is other for other in seen):
            seen.append(spec)
            edits.append(spec.document.get("containerEdits") or {})
        edits.append(spec.devices[device].get("containerEdits") or {})
    return edits
