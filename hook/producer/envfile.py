"""The producer side of env files: the path scheme, the writer and the checker a device plugin uses.

A device plugin learns the device ids of a container twice: in ``Allocate`` (where it sets
``NVIDIA_ENV_FROM_FILE`` to :func:`env_file_path` of the ids) and in ``PreStartContainer`` (where it
writes that same path with :func:`write_env_file`). The path depends only on the *set* of ids, so both
calls agree whatever order kubelet gives them in. :func:`check_env_file` runs every check the hook
runs and says which passed.

Device plugins import these from ``hook.deviceplugin``, the public API's home.
"""

import os
import stat

from hook.pipeline import pod
from hook.pipeline.config import EnvFileSettings, default_settings, is_env_name
from hook.pipeline.envfile import (
    check_content,
    check_descriptor,
    check_pins,
    find_pins,
    load_env_file_bytes,
    read_bounded,
    read_env_file,
    refused_key_rule,
)
from hook.producer.namekey import SUFFIX
from hook.util import envvars
from hook.util.beneath import open_beneath, open_directory_beneath, refuse, split_beneath
from hook.util.errors import EnvFileError, EnvFileMissingError, HookError, UsageError, os_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

ROOT_OWNER = (0, 0)
FILE_MODE = 0o600
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\f": "\\f"}
_HEADER = "# Written by gpu-env-hook env-file write; read by the gpu-env-hook prestart hook.\n"


def parse_assignments(assignments: list[str], command: str) -> dict[str, str]:
    """The ``KEY=VALUE`` words of a producer command (``env-file write``, ``cdi alloc write``) as a dict; a
    word without ``=`` or a key given twice is a usage error naming ``command``."""
    values: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep:
            raise UsageError(f"{command}: {assignment!r} is not KEY=VALUE")
        if key in values:
            raise UsageError(f"{command}: {key} is given twice")
        values[key] = value
    return values


def default_env_file_settings() -> EnvFileSettings:
    """Return the ``[env-file]`` settings of a node with no config.toml."""
    table = default_settings()["env-file"]
    return EnvFileSettings(
        variable=table["variable"],
        directories=tuple(table["directories"]),
        max_bytes=table["max-bytes"],
        on_missing=table["on-missing"],
        require_pod_binding=table["require-pod-binding"],
        pod_binding_engine=table["pod-binding-engine"] or "none",
    )


# --- the writer ------------------------------------------------------------------------------------------


def quote_value(value: str) -> str:
    """Quote a value so that python-dotenv's parser gives it back exactly (double quotes, escapes)."""
    return '"' + "".join(_ESCAPES.get(char, char) for char in value) + '"'


def build_env_file(
    values: "Mapping[str, str]",
    *,
    pod_uid: str | None = None,
    container: str | None = None,
    settings: EnvFileSettings | None = None,
    path: str = "<env file>",
    pod_namespace: str | None = None,
    pod_name: str | None = None,
) -> bytes:
    """Build the file's bytes, refusing what the hook would refuse (keys, NUL, size, a pin without a pod).

    The pin (``hook.pipeline.pod``): the pod's UID, or its namespace and name (what pod-resources ``List()``
    gives a device plugin), and optionally the container's name."""
    settings = settings or default_env_file_settings()
    pins = pod.pod_pins(uid=pod_uid, namespace=pod_namespace, name=pod_name, container=container)
    problem = pod.pin_error(pins)
    if problem is not None:
        raise refuse(path, problem)
    for name, pin in pins.items():
        if pin == "":
            raise refuse(path, f"{name} must not be empty (the hook refuses an empty pin)")
    lines = [_HEADER]
    lines += [_line(key, value, path) for key, value in pins.items()]
    for key, value in values.items():
        if not is_env_name(key):
            raise refuse(path, f"key {key!r} must match [A-Za-z_][A-Za-z0-9_]*")
        if key in envvars.RESERVED_KEYS:
            raise refuse(path, f"key {key} is reserved: give it with the pod / container options")
        rule = refused_key_rule(key, settings.variable)
        if rule is not None:
            raise refuse(path, f"key {key} matches {rule} and may not be set from an env file")
        lines.append(_line(key, value, path))
    data = "".join(lines).encode("utf-8")
    if len(data) > settings.max_bytes:
        raise refuse(
            path, f"would be {len(data)} bytes, over the limit of {settings.max_bytes} (env-file.max-bytes)"
        )
    return data


def _line(key: str, value: str, path: str) -> str:
    """Return one ``KEY="value"`` line, refusing values the hook cannot read back."""
    if "\0" in value:
        raise refuse(path, f"the value of {key} contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise refuse(path, f"the value of {key} is not encodable as UTF-8") from None
    return f"{key}={quote_value(value)}\n"


def write_env_file(
    path: str,
    values: "Mapping[str, str]",
    *,
    pod_uid: str | None = None,
    container: str | None = None,
    settings: EnvFileSettings | None = None,
    owner: tuple[int, int] | None = ROOT_OWNER,
    pod_namespace: str | None = None,
    pod_name: str | None = None,
) -> None:
    """Write the env file atomically (temp file beside it, fsync, rename, fsync the directory), owned by
    root, mode 0600 (its variables may be secrets), inside the configured directories: the hook never sees a
    partial file.

    The directory that holds the file is reached by the hook's own walk (hook.util.beneath): below the
    configured directory no symlink is followed, so the writer (root) never writes where the hook would
    not read. The write then goes through that opened directory (its descriptor), whatever is renamed
    on the way meanwhile.
    """
    from hook.util.atomicwrite import write_atomic

    settings = settings or default_env_file_settings()
    split_beneath(path, settings.directories)
    data = build_env_file(
        values,
        pod_uid=pod_uid,
        container=container,
        settings=settings,
        path=path,
        pod_namespace=pod_namespace,
        pod_name=pod_name,
    )
    try:
        directory_fd, name = open_directory_beneath(path, settings.directories)
    except EnvFileMissingError:
        raise refuse(path, "its directory does not exist (create it root-owned, mode 0700)") from None
    try:
        write_atomic(name, data, mode=FILE_MODE, owner=owner, dir_fd=directory_fd)
    except OSError as err:
        raise os_error("write env file", path, err) from None
    finally:
        os.close(directory_fd)


# --- the checker -----------------------------------------------------------------------------------------


class CheckStep:
    """One check the hook makes, as the checker reports it."""

    __slots__ = ("detail", "name", "ok")

    def __init__(self, *, name: str, ok: bool, detail: str) -> None:
        self.name = name
        self.ok = ok
        self.detail = detail


class EnvFileReport:
    """What :func:`check_env_file` found: each step in the hook's order, and the variables on success."""

    __slots__ = ("path", "pins", "steps", "values")

    def __init__(
        self, *, path: str, steps: list[CheckStep], values: dict[str, str], pins: dict[str, str]
    ) -> None:
        self.path = path
        self.steps = steps
        self.values = values
        self.pins = pins

    @property
    def pinned_pod_uid(self) -> str | None:
        """The pod UID the file is pinned to, if any."""
        return self.pins.get(pod.UID)

    @property
    def pinned_container(self) -> str | None:
        """The container name the file is pinned to, if any."""
        return self.pins.get(pod.CONTAINER)

    @property
    def ok(self) -> bool:
        """Tell whether the hook would accept the file."""
        return all(step.ok for step in self.steps)


def check_env_file(
    path: str,
    settings: EnvFileSettings | None = None,
    *,
    pod_uid: str | None = None,
    container: str | None = None,
    pod_namespace: str | None = None,
    pod_name: str | None = None,
) -> EnvFileReport:
    """Run the hook's checks on ``path`` in its order, stopping at the first failure.

    ``pod_uid`` / ``pod_namespace`` / ``pod_name`` / ``container`` stand for the container's pod annotations:
    given, the pin is checked against them as the hook would; not given, only ``require-pod-binding`` is
    checked. ``settings`` None: the node's, as the installed hook has them (its config.toml and the engine it
    runs for: see ``hook.pipeline.config.load_node_settings``).
    """
    given = pod.pod_pins(uid=pod_uid, namespace=pod_namespace, name=pod_name, container=container)
    if settings is None:
        from hook.pipeline.config import load_node_settings

        settings = load_node_settings(None, os.environ).env_file
    steps: list[CheckStep] = []
    values: dict[str, str] = {}
    reserved: dict[str, str] = {}

    def report() -> EnvFileReport:
        return EnvFileReport(path=path, steps=steps, values=values, pins=dict(reserved))

    try:
        directory, _ = split_beneath(path, settings.directories)
    except EnvFileError as err:
        steps.append(CheckStep(name="location", ok=False, detail=str(err)))
        return report()
    steps.append(CheckStep(name="location", ok=True, detail=f"inside {directory}, no '.' or '..'"))
    try:
        data = load_env_file_bytes(path, settings)
        info = _lstat(path)
    except HookError as err:  # a refusal, or the system's (an I/O error): one line either way
        steps.append(CheckStep(name="file", ok=False, detail=str(err)))
        return report()
    steps.append(
        CheckStep(
            name="file",
            ok=True,
            detail=(
                f"regular file, no symlink on the way, uid {info.st_uid}, "
                f"mode {stat.S_IMODE(info.st_mode):04o}, {info.st_nlink} link, "
                f"{len(data)} bytes (limit {settings.max_bytes})"
            ),
        )
    )
    # As the hook: the file is read and its pin checked before any content rule is applied.
    try:
        text = read_env_file(data, path)
        reserved.update(find_pins(text.bindings, path))
    except EnvFileError as err:  # the pin cannot be found in a file that does not parse
        steps.append(CheckStep(name="content", ok=False, detail=str(err)))
        return report()
    steps.append(_binding_step(reserved, path, settings, given=given))
    if not steps[-1].ok:
        return report()
    try:
        values.update(check_content(text, path, variable=settings.variable))
    except EnvFileError as err:
        steps.append(CheckStep(name="content", ok=False, detail=str(err)))
        return report()
    names = ", ".join(values) or "none"
    steps.append(
        CheckStep(
            name="content",
            ok=True,
            detail=f"{len(values)} variable{'' if len(values) == 1 else 's'}: {names}",
        )
    )
    return report()


def _lstat(path: str) -> os.stat_result:
    """Return the file's own status (the checker reports its mode and links), or the one-line error."""
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError as err:
        raise os_error("inspect env file", path, err) from None


def _binding_step(
    reserved: dict[str, str], path: str, settings: EnvFileSettings, *, given: dict[str, str]
) -> CheckStep:
    """Check the pod pin as the hook would, against the given pod (and container) when there is one."""
    # The container's annotations as the engine in effect (pod-binding-engine) would set them; without a
    # given pod, only the pin's shape (and whether the engine can check a pin) is checked.
    annotations = pod.as_annotations(given if pod.is_pinned(given) else reserved, settings.pod_binding_engine)
    try:
        pinned = check_pins(reserved, annotations, path, settings)
    except EnvFileError as err:
        return CheckStep(name="binding", ok=False, detail=str(err))
    if not pinned:
        return CheckStep(name="binding", ok=True, detail="not pinned to a pod (require-pod-binding is off)")
    checked = (
        " (matches)"
        if pod.is_pinned(given)
        else " (give --pod-uid, or --pod-namespace and --pod-name, to check it against a pod)"
    )
    return CheckStep(name="binding", ok=True, detail=f"pinned to {pod.describe_pin(reserved)}{checked}")


# --- collecting ------------------------------------------------------------------------------------------

_HEX = frozenset("0123456789abcdef")


def is_written_name(name: str) -> bool:
    """Tell whether ``name`` is one ``env-file write`` makes: 32 hex digits (16 before the naming key) and
    ``.env``. Other files in the directory are not ours and are never touched."""
    stem = name.removesuffix(SUFFIX)
    return name.endswith(SUFFIX) and len(stem) in (16, 32) and set(stem) <= _HEX


def gc_env_files(
    live_pods: frozenset[str], settings: EnvFileSettings, *, names_known: bool = True
) -> tuple[list[str], list[str]]:
    """Remove the env files of pods that are gone, in every configured directory: files named as ``env-file
    write`` names them whose pin (read with the hook's own reader) names a pod not in ``live_pods`` (UIDs
    and ``namespace/name`` pairs; with ``names_known`` False a file pinned by namespace and name only is
    kept). An unpinned file is kept (nothing says whose it is). Every file is tried: return the paths
    removed and one line per file that could not be read or removed.

    A file judged gone is removed by ``hook.util.atomicwrite.remove_if``, which judges it once more under a
    private name: a device plugin that renames a new pod's file over the name meanwhile keeps it."""
    import functools

    from hook.util.atomicwrite import remove_if

    removed: list[str] = []
    failed: list[str] = []

    def gone(fd: int, path: str) -> bool:
        check_descriptor(fd, path)
        data = read_bounded(fd, settings.max_bytes, path)
        pins = find_pins(read_env_file(data, path).bindings, path)
        owner = pins.get(pod.UID) or f"{pins.get(pod.NAMESPACE, '')}/{pins.get(pod.NAME, '')}"
        if not pod.is_pinned(pins) or owner in live_pods:
            return False
        return pod.UID in pins or names_known

    for directory in settings.directories:
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as err:
            failed.append(str(os_error("list env files", directory, err)))
            continue
        try:
            for name in filter(is_written_name, sorted(os.listdir(dir_fd))):
                path = os.path.join(directory, name)
                try:
                    fd = open_beneath(path, settings.directories)  # the first look, as the hook opens it
                    try:
                        if not gone(fd, path):
                            continue
                    finally:
                        os.close(fd)
                    if remove_if(name, dir_fd, functools.partial(gone, path=path)):
                        removed.append(path)
                except EnvFileMissingError:
                    continue
                except HookError as err:
                    failed.append(f"{err} (kept)")
                except OSError as err:
                    failed.append(str(os_error("remove env file", path, err)))
        except OSError as err:  # the listing itself
            failed.append(str(os_error("list env files", directory, err)))
        finally:
            os.close(dir_fd)
    return removed, failed
