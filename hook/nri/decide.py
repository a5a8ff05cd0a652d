"""The NRI plugin's decision for one container being created: the adjustment, or a refusal.

A container whose environment names no env file gets no adjustment at all. For one that does, the file is
resolved by the hook's own code (``hook.pipeline.envfile``: trusted directories, owner and mode, content
rules) and its pin checked against the pod identity the runtime sent in the NRI request (``PodSandbox.uid``
and the container's name): the subset of NRI's protocol we decode has no annotations, so nothing a pod spec
chooses can stand in for the identity. The answer:

- the file's variables as env adjustments, and the variable naming the file set empty: a container whose
  environment still names a file was not handled by the plugin (the backstop hook refuses it);
- legacy mode: our prestart hook, handed the decision as the runtime shim hands it
  (``-env-file-merged=pinned:NAMES``): the hook never reads the file again and calls nvidia-container-cli
  once; none is added when the container already has a GPU hook;
- CDI mode: the requested devices as CDI device names (``NVIDIA_VISIBLE_DEVICES=void``), which the runtime
  resolves itself: containerd >= 2.1. containerd 2.0 ignores CDI names, so there the container is refused.

A refusal raises a HookError whose one line the plugin returns as the request's error: the runtime fails
the creation with it.
"""

from __future__ import annotations

from hook.nri import nri_pb2
from hook.util import envvars

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from hook.pipeline.config import Settings

BACKSTOP = "nri-backstop"
# containerd sets these annotations itself from the same identity; the pin rules are written against them.
ENGINE = "containerd"


class Context:
    """What the plugin knows for every decision: the settings, the config text, the runtime, our hook."""

    __slots__ = ("config_text", "hook", "runtime_name", "runtime_version", "settings")

    def __init__(
        self,
        *,
        settings: Settings,
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


def pod_identity(pod: nri_pb2.PodSandbox, container: nri_pb2.Container) -> dict[str, str]:
    """The pod identity from the NRI request (uid, namespace, name, the container's name), under the
    annotation keys containerd writes itself, which the pin rules check (``hook.pipeline.pod``)."""
    from hook.pipeline.pod import as_annotations, pod_pins

    pins = pod_pins(
        uid=pod.uid or None,
        namespace=pod.namespace or None,
        name=pod.name or None,
        container=container.name or None,
    )
    return as_annotations(pins, ENGINE)


def cdi_names_applied(runtime_name: str, runtime_version: str) -> bool:
    """Tell whether the runtime applies an adjustment's CDI device names: containerd >= 2.1."""
    if runtime_name != "containerd":
        return False
    parts = runtime_version.lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return False
    return (major, minor) >= (2, 1)


def hook_entries(hooks: nri_pb2.Hooks) -> dict[str, object]:
    """The container's prestart and createRuntime hooks as a spec's ``hooks`` (what hook.pipeline.handoff
    reads), without our backstop (``nri-backstop``: not a GPU hook)."""

    def entries(stage: Iterable[nri_pb2.Hook]) -> list[dict[str, object]]:
        return [
            {"path": hook.path, "args": list(hook.args)} for hook in stage if BACKSTOP not in hook.args[-1:]
        ]

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
    from hook.pipeline.envfile import resolve_env_file

    env_settings = settings.env_file._replace(pod_binding_engine=ENGINE)
    env_file = resolve_env_file(env, pod_identity(pod, container), env_settings)
    adjust = nri_pb2.ContainerAdjustment()
    # Handled: the variable set empty, which the backstop lets through. (Not removed: containerd 2.3 with
    # NRI 0.12 drops an adjustment's removal of a variable the container had.) Each name once: NRI refuses
    # an adjustment that sets a variable twice.
    variables = {variable: ""}
    if env_file is not None:  # else a missing file, ignored by [env-file] on-missing
        variables.update(env_file.values)
        merged = {**env, **env_file.values}
        del merged[variable]
        if settings.device_mode == "cdi":
            trusted = frozenset(env_file.values) if env_file.pinned else frozenset()
            if _name_cdi_devices(adjust, container, merged, trusted, context):
                from hook.pipeline.cdidevices import VOID

                variables[envvars.NVIDIA_VISIBLE_DEVICES] = VOID
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


def _name_cdi_devices(
    adjust: nri_pb2.ContainerAdjustment,
    container: nri_pb2.Container,
    env: dict[str, str],
    trusted: frozenset[str],
    context: Context,
) -> bool:
    """CDI mode: the devices the merged environment asks for (the hook's privilege gate, a container never
    counted privileged here), named for the runtime to resolve; whether there were any."""
    from hook.pipeline.cdidevices import cdi_device_names
    from hook.pipeline.devices import resolve_devices

    settings = context.settings
    devices = resolve_devices(
        env,
        [(mount.source, mount.destination) for mount in container.mounts],
        swarm_resource=settings.swarm_resource,
        accept_volume_mounts=settings.accept_volume_mounts,
        accept_envvar_unprivileged=settings.accept_envvar_unprivileged,
        privileged=False,
        trusted=trusted,
    )
    if not devices:
        return False
    if not cdi_names_applied(context.runtime_name, context.runtime_version):
        from hook.util.errors import CdiError

        raise CdiError(
            f"gpu-env-hook nri: CDI mode needs containerd >= 2.1 to apply CDI device names "
            f"(the runtime is {context.runtime_name} {context.runtime_version})"
        )
    for name in cdi_device_names(devices, settings.cdi.default_kind):
        adjust.CDI_devices.add(name=name)
    return True
