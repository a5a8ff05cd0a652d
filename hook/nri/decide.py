"""The NRI plugin's decision for one container being created: the adjustment, or a refusal.

A container whose environment names no env file gets no adjustment at all. For one that does, the file is
resolved by the hook's own code (``hook.pipeline.envfile``: trusted directories, owner and mode, content
rules) and its pin checked against the pod identity the runtime sent in the NRI request (``PodSandbox.uid``
and the container's name; judged under the annotation keys of the runtime that configured the plugin,
containerd's or CRI-O's, so a refusal names the key that runtime's users know): the subset of NRI's
protocol we decode has no annotations, so nothing a pod spec chooses can stand in for the identity. (CRI-O
names the container by kubelet's ``io.kubernetes.container.name`` label, set over any pod annotation.)
The answer:

- the file's variables as env adjustments, the variable naming the file set empty, and the env-file guard's
  mount removed (the CDI device ``gpu-env-hook.io/env-file=required`` the device plugin names next to the
  file: a bind mount from a path that cannot exist, which the runtime fails to make unless it goes);
- legacy mode: our prestart hook, handed the decision as the runtime shim hands it
  (``-env-file-merged=pinned:NAMES``): the hook never reads the file again and calls nvidia-container-cli
  once; none is added when the container already has a GPU hook;
- CDI mode: the requested devices, checked as the runtime shim checks them (defined by a spec; an
  allocation only for its own pod), as CDI device names that containerd >= 2.1 and CRI-O >= 1.34 resolve
  themselves, or as their edits (device nodes, mounts, hooks, variables) for containerd 2.0 (and an older
  CRI-O), which ignore names;
  ``NVIDIA_VISIBLE_DEVICES=void`` either way.

A refusal raises a HookError whose one line the plugin returns as the request's error: the runtime fails
the creation with it.
"""

from hook.nri import nri_pb2
from hook.util import envvars, paths
from hook.util.errors import CdiError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from hook.pipeline.config import Settings
    from hook.pipeline.envfile import EnvFile

# The runtime sets these annotations itself from the same identity; the pin rules are written against them
# (containerd's keys until Configure names the runtime: the plugin is refused nothing before it).
ENGINE = "containerd"
# Our engine name for an NRI runtime name (Configure's ``runtime_name``) whose annotations differ.
ENGINES = {"cri-o": "crio"}
# The first version of each runtime that applies an adjustment's CDI device names itself.
CDI_NAMES_FROM = {"containerd": (2, 1), "cri-o": (1, 34)}


class Context:
    """What the plugin knows for every decision: the settings, the config text, the runtime, our hook."""

    __slots__ = ("config_text", "hook", "runtime_name", "runtime_version", "settings")

    def __init__(
        self,
        *,
        settings: "Settings",
        config_text: str | None,
        hook: dict[str, object],
        runtime_name: str = "",
        runtime_version: str = "",
    ) -> None:
        self.settings = settings
        self.config_text = config_text
        self.hook = hook
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version


def engine_of(runtime_name: str) -> str:
    """The engine whose annotation keys name the identity: ``crio`` for CRI-O, else ``containerd``."""
    return ENGINES.get(runtime_name, ENGINE)


def pod_identity(
    pod: nri_pb2.PodSandbox, container: nri_pb2.Container, engine: str = ENGINE
) -> dict[str, str]:
    """The pod identity from the NRI request (uid, namespace, name, the container's name), under the
    annotation keys ``engine`` writes itself, which the pin rules check (``hook.pipeline.pod``)."""
    from hook.pipeline.pod import as_annotations, pod_pins

    pins = pod_pins(
        uid=pod.uid or None,
        namespace=pod.namespace or None,
        name=pod.name or None,
        container=container.name or None,
    )
    return as_annotations(pins, engine)


def cdi_names_applied(runtime_name: str, runtime_version: str) -> bool:
    """Tell whether the runtime applies an adjustment's CDI device names: containerd >= 2.1, CRI-O >= 1.34."""
    first = CDI_NAMES_FROM.get(runtime_name)
    if first is None:
        return False
    parts = runtime_version.lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return False
    return (major, minor) >= first


def hook_entries(hooks: nri_pb2.Hooks) -> dict[str, object]:
    """The container's prestart and createRuntime hooks as a spec's ``hooks`` (what hook.pipeline.handoff
    reads)."""

    def entries(stage: "Iterable[nri_pb2.Hook]") -> list[dict[str, object]]:
        return [{"path": hook.path, "args": list(hook.args)} for hook in stage]

    return {"hooks": {"prestart": entries(hooks.prestart), "createRuntime": entries(hooks.create_runtime)}}


def adjust_container(
    pod: nri_pb2.PodSandbox, container: nri_pb2.Container, context: Context
) -> nri_pb2.ContainerAdjustment | None:
    """Return the adjustment for a container being created, None to leave it untouched; refuse a bad file."""
    from hook.pipeline.bundle import parse_env

    settings = context.settings
    variable = settings.env_file.variable
    entries = list(container.env)
    env = parse_env(entries)
    if not env.get(variable):
        return None
    import copy

    from hook.pipeline.envfile import resolve_env_file

    # The records are plain classes: a copy of the settings with this plugin's engine as the binding's.
    settings = copy.copy(settings)
    settings.env_file = copy.copy(settings.env_file)
    engine = engine_of(context.runtime_name)
    settings.env_file.pod_binding_engine = engine
    identity = pod_identity(pod, container, engine)
    env_file = resolve_env_file(env, identity, settings.env_file)
    adjust = nri_pb2.ContainerAdjustment()
    # Handled: the variable set empty, the mark of a container the plugin handled. (Not removed: containerd
    # 2.3 with NRI 0.12 drops an adjustment's removal of a variable the container had.) Each name once: NRI
    # refuses an adjustment that sets a variable twice.
    variables = {variable: ""}
    # Applied: the guard device's mount goes, so the runtime can start the container (docs/nri.md).
    adjust.mounts.add(destination="-" + paths.ENV_FILE_GUARD_TARGET)
    if env_file is not None:  # else a missing file, ignored by [env-file] on-missing
        variables.update(env_file.values)
        merged = {**env, **env_file.values}
        del merged[variable]
        if settings.device_mode == "cdi":
            variables.update(
                _cdi_devices(
                    adjust, container, merged, env_file, identity=identity, settings=settings, context=context
                )
            )
        else:
            _add_our_hook(adjust, container, env_file.pinned, list(env_file.values), context)
    for name, value in variables.items():
        adjust.env.add(key=name, value=value)
    return adjust


def _add_our_hook(
    adjust: nri_pb2.ContainerAdjustment,
    container: nri_pb2.Container,
    pinned: bool,
    names: list[str],
    context: Context,
) -> None:
    """Legacy mode: add our prestart hook with the decision in its args, unless a GPU hook is there."""
    from hook.pipeline.handoff import build_handoff, with_handoff
    from hook.stages.shim import has_gpu_hook

    if has_gpu_hook(hook_entries(container.hooks)):
        return
    entry = with_handoff(context.hook, build_handoff(pinned, names))
    hook = adjust.hooks.prestart.add(path=str(entry["path"]))
    hook.args.extend(str(arg) for arg in entry["args"])  # type: ignore[attr-defined]  # a list of str
    hook.env.extend(str(item) for item in entry.get("env", []))  # type: ignore[attr-defined]
    hook.timeout.value = context.settings.hook_timeout


def _cdi_devices(
    adjust: nri_pb2.ContainerAdjustment,
    container: nri_pb2.Container,
    env: dict[str, str],
    env_file: "EnvFile",
    *,
    identity: dict[str, str],
    settings: "Settings",
    context: Context,
) -> dict[str, str]:
    """CDI mode: the devices the merged environment asks for (the hook's privilege gate; a container is never
    counted privileged here), checked and resolved as the runtime shim does (``inject_requested``: a device
    no spec defines, or another pod's allocation, is refused). containerd >= 2.1 and CRI-O >= 1.34 are given
    their names; containerd 2.0 (and an older CRI-O), which ignore names, their edits. Returns the variables
    to set."""
    from hook.pipeline.cdidevices import cdi_device_names, inject_requested
    from hook.pipeline.request import resolve_devices

    devices = resolve_devices(
        env,
        [(mount.source, mount.destination) for mount in container.mounts],
        swarm_resource=settings.swarm_resource,
        accept_volume_mounts=settings.accept_volume_mounts,
        accept_envvar_unprivileged=settings.accept_envvar_unprivileged,
        privileged=False,
        trusted=frozenset(env_file.values) if env_file.pinned else frozenset(),
    )
    if not devices:
        return {}
    entries = [f"{name}={value}" for name, value in env.items()]
    document: dict[str, object] = {"process": {"env": entries}, "annotations": identity}
    edited = inject_requested(document, devices, settings, env_file)
    if cdi_names_applied(context.runtime_name, context.runtime_version):
        for name in cdi_device_names(devices, settings.cdi.default_kind):
            adjust.CDI_devices.add(name=name)
        from hook.pipeline.cdidevices import VOID

        return {envvars.NVIDIA_VISIBLE_DEVICES: VOID}
    return _edits_as_adjustment(adjust, edited, env)


# The OCI hook stages an NRI adjustment can add to, by their field in nri_pb2.Hooks.
HOOK_STAGES = {
    "prestart": "prestart",
    "createRuntime": "create_runtime",
    "createContainer": "create_container",
    "startContainer": "start_container",
    "poststart": "poststart",
    "poststop": "poststop",
}


def _edits_as_adjustment(
    adjust: nri_pb2.ContainerAdjustment, edited: dict[str, object], env: dict[str, str]
) -> dict[str, str]:
    """containerd 2.0: the CDI edits ``apply_edits`` made to a spec of the container's environment, as
    adjustments: device nodes, mounts, hooks; the variables they set are returned. An edit NRI cannot carry
    (network devices, RDT, additional GIDs) is refused."""
    from hook.pipeline.bundle import parse_env, process_env

    linux = edited.get("linux")
    linux = linux if isinstance(linux, dict) else {}
    process = edited.get("process")
    user = process.get("user") if isinstance(process, dict) else None
    extra = [key for key in ("netDevices", "intelRdt") if key in linux]
    if isinstance(user, dict) and user.get("additionalGids"):
        extra.append("additionalGids")
    if extra:
        raise CdiError(
            f"gpu-env-hook nri: CDI edits ({', '.join(extra)}) cannot go through NRI on containerd 2.0"
        )
    for device in linux.get("devices", []):
        node = adjust.linux.devices.add(
            path=device["path"], type=device.get("type", ""), major=device["major"], minor=device["minor"]
        )
        for key, field in (("fileMode", node.file_mode), ("uid", node.uid), ("gid", node.gid)):
            if device.get(key) is not None:
                field.value = device[key]
    for mount in edited.get("mounts", []):  # type: ignore[attr-defined]  # a list of mounts
        adjust.mounts.add(
            destination=mount["destination"],
            type=mount.get("type", ""),
            source=mount.get("source", ""),
            options=mount.get("options", []),
        )
    hooks = edited.get("hooks")
    for stage, entries in (hooks if isinstance(hooks, dict) else {}).items():
        for entry in entries:
            hook = getattr(adjust.hooks, HOOK_STAGES[stage]).add(
                path=entry["path"], args=entry.get("args", []), env=entry.get("env", [])
            )
            if entry.get("timeout") is not None:
                hook.timeout.value = entry["timeout"]
    changed = parse_env(process_env(edited))
    return {name: value for name, value in changed.items() if env.get(name) != value}
