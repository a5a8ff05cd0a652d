"""``cdi`` commands for people and device plugins: list, validate, and per-allocation specs (write/remove/gc).

Registered on the app by ``register(app)``; each command calls the functions the shim and the producer
call, so what they print is what happens. ``describe_cdi`` is what ``resolve`` shows in CDI mode.
"""

import os
from typing import Annotated, Any

import typer

from hook.util.errors import CdiError, HookError, UsageError

PROG = "gpu-env-hook"
# The options of both gc commands (`cdi alloc gc`, `env-file gc`): which pods still exist.
LivePods = Annotated[
    list[str] | None,
    typer.Option(
        "--live", metavar="POD", help="a pod that still exists: UID or NAMESPACE/NAME (pod-resources List)"
    ),
]
KubeletPods = Annotated[
    str, typer.Option("--kubelet-pods", metavar="DIR", help="else: pods kubelet keeps a directory for")
]


def report_gc(removed: list[str], failed: list[str]) -> None:
    """Print what a gc command removed, and one line per entry it could not (then exit status 1)."""
    for path in removed:
        typer.echo(f"removed {path}")
    for line in failed:
        typer.echo(f"{PROG}: {line}", err=True)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer, config: str | None = None) -> None:
    """Add the ``cdi`` command group to the app."""
    group = typer.Typer(
        help="CDI specs: list the node's devices, check a spec, write per-allocation specs.",
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
    )
    _add_list(group, config)
    _add_validate(group)
    _add_alloc(group, config)
    app.add_typer(group, name="cdi")


def _fail(err: HookError) -> typer.Exit:
    typer.echo(f"{PROG}: {err}", err=True)
    return typer.Exit(err.exit_code)


def load_cdi_settings(config: str | None) -> Any:
    """The node's settings (config.toml as the hook finds it)."""
    from hook.pipeline.config import parse_config
    from hook.pipeline.configfile import find_config_path, load_config_text

    path, required = find_config_path(config, os.environ)
    text = load_config_text(path, required=required)
    return parse_config(text, source=path if text is not None else None)


# --- list ------------------------------------------------------------------------------------------------


def build_list_document(spec_dirs: tuple[str, ...]) -> dict[str, Any]:
    """Describe what the spec directories offer: devices with their file, conflicts, files in error."""
    from hook.cdi.registry import load_registry

    registry = load_registry(spec_dirs)
    return {
        "spec_dirs": list(spec_dirs),
        "devices": [
            {"name": name, "spec": spec.path, "cdiVersion": spec.document.get("cdiVersion", "")}
            for name, (spec, _) in sorted(registry.devices.items())
        ],
        "conflicts": sorted(registry.conflicts),
        "errors": {path: list(messages) for path, messages in sorted(registry.errors.items())},
    }


def format_list_document(document: dict[str, Any]) -> str:
    """The human form of ``cdi list``."""
    lines = [f"spec directories (later wins): {', '.join(document['spec_dirs'])}"]
    if not document["devices"]:
        lines.append("no CDI devices")
    width = max((len(device["name"]) for device in document["devices"]), default=0)
    lines += [f"{device['name']:<{width}}  {device['spec']}" for device in document["devices"]]
    lines += [
        f"conflict: {name} (defined twice at one priority; no engine resolves it)"
        for name in document["conflicts"]
    ]
    for path, messages in document["errors"].items():
        lines += [
            f"error: {message}"
            if message.startswith(("invalid CDI spec", "conflicting"))
            else f"error: {path}: {message}"
            for message in messages
        ]
    return "\n".join(lines) + "\n"


def _add_list(group: typer.Typer, config: str | None) -> None:
    @group.command("list")
    def list_devices(
        spec_dirs: Annotated[
            list[str] | None,
            typer.Option(
                "--spec-dir", metavar="DIR", help="read these directories (default: [gpu-env.cdi] spec-dirs)"
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print a JSON document")] = False,
    ) -> None:
        """List the CDI devices the spec directories define, from which file, and conflicts and errors."""
        import json

        try:
            dirs = tuple(spec_dirs) if spec_dirs else load_cdi_settings(config).cdi.spec_dirs
            document = build_list_document(dirs)
        except HookError as err:
            raise _fail(err) from None
        if as_json:
            typer.echo(json.dumps(document, indent=2))
        else:
            typer.echo(format_list_document(document), nl=False)
        if document["errors"]:
            raise typer.Exit(1)


# --- validate --------------------------------------------------------------------------------------------


def validate_command(path: str) -> str:
    """Check one spec file as an engine would; return the one-line verdict (raise CdiError if invalid, or
    valid but not to be trusted where it is: not root's, or group/world-writable, as file or directory)."""
    from hook.cdi.spec import load_spec, untrusted_reason
    from hook.cdi.version import minimum_version

    spec = load_spec(path, trust=False, reveal=True)
    count = len(spec.devices)
    verdict = (
        f"{path}: valid CDI spec, kind {spec.kind}, cdiVersion {spec.document.get('cdiVersion')} "
        f"(its fields need {minimum_version(spec.document)}), {count} device{'s' if count != 1 else ''}"
    )
    untrusted = untrusted_reason(path)
    if untrusted is not None:
        raise CdiError(f"{verdict}; but untrusted where it is ({untrusted}): the shim skips it")
    return verdict + "\n"


def _add_validate(group: typer.Typer) -> None:
    @group.command("validate")
    def validate(
        path: Annotated[str, typer.Argument(metavar="FILE", help="a .json or .yaml CDI spec")],
    ) -> None:
        """Check a CDI spec file with the rules engines apply (versions, fields, names, edits)."""
        try:
            typer.echo(validate_command(path), nl=False)
        except HookError as err:
            raise _fail(err) from None


# --- per-allocation specs --------------------------------------------------------------------------------


def alloc_write_command(
    config: str | None,
    *,
    ids: list[str],
    devices: list[str],
    assignments: list[str],
    pod_uid: str,
    directory: str | None,
    pod_namespace: str = "",
    pod_name: str = "",
) -> str:
    """Compose and write the allocation's spec; return what to print (the device name and the file)."""
    from hook.cdi.registry import load_registry
    from hook.producer.alloc import (
        DEFAULT_DIRECTORY,
        alloc_name,
        alloc_pins,
        build_alloc_spec,
        write_alloc_spec,
    )
    from hook.producer.envfile import parse_assignments
    from hook.producer.namekey import checked_ids, legacy_name

    pins = alloc_pins(pod_uid, pod_namespace, pod_name)
    values = parse_assignments(assignments, "cdi alloc write")
    settings = load_cdi_settings(config)
    target = directory or DEFAULT_DIRECTORY
    name = alloc_name(ids)
    registry = load_registry(settings.cdi.spec_dirs)
    spec = build_alloc_spec(name, devices, values, registry, default_kind=settings.cdi.default_kind)
    unkeyed = legacy_name(checked_ids(ids, "cdi alloc"))  # its spec goes if another pod's
    refuse = settings.cdi.unkeyed_alloc_names == "refuse"
    path = write_alloc_spec(spec, pins, target, unkeyed=unkeyed, refuse_unkeyed=refuse)
    return f"gpu-env.dev/alloc={name}\t{path}\n"


def _add_alloc(group: typer.Typer, config: str | None) -> None:
    alloc = typer.Typer(
        help="Per-allocation CDI specs a device plugin writes (engines with native CDI need no shim).",
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
    )
    group.add_typer(alloc, name="alloc")

    @alloc.command("name")
    def name(
        ids: Annotated[list[str], typer.Argument(metavar="ID...", help="the allocated device ids")],
    ) -> None:
        """Print the CDI device for a set of allocated ids (for Allocate's CdiDevices; any order)."""
        from hook.producer.alloc import alloc_device

        try:
            typer.echo(alloc_device(ids))
        except HookError as err:
            raise _fail(err) from None

    @alloc.command("write")
    def write(  # noqa: PLR0917 - typer passes each option as a parameter
        assignments: Annotated[
            list[str] | None,
            typer.Argument(metavar="KEY=VALUE...", help="variables for the container (optional)"),
        ] = None,
        ids: Annotated[
            list[str] | None,
            typer.Option("--id", metavar="ID", help="an allocated device id, as kubelet gave it"),
        ] = None,
        devices: Annotated[
            list[str] | None,
            typer.Option("--device", metavar="DEVICE", help="a real device: CDI name, id or UUID (repeat)"),
        ] = None,
        pod_uid: Annotated[str, typer.Option("--pod-uid", metavar="UID", help="the pod it is for")] = "",
        pod_namespace: Annotated[
            str,
            typer.Option("--pod-namespace", metavar="NS", help="or: the pod's namespace (and --pod-name)"),
        ] = "",
        pod_name: Annotated[
            str,
            typer.Option("--pod-name", metavar="NAME", help="and the pod's name (from pod-resources List)"),
        ] = "",
        directory: Annotated[
            str | None, typer.Option("--dir", metavar="DIR", help="spec directory (default /var/run/cdi)")
        ] = None,
    ) -> None:
        """Write the allocation's spec: the real devices' edits from the node's specs, plus the variables."""
        try:
            if not ids:
                raise UsageError("cdi alloc write: at least one --id is required")
            out = alloc_write_command(
                config,
                ids=ids,
                devices=devices or [],
                assignments=assignments or [],
                pod_uid=pod_uid,
                directory=directory,
                pod_namespace=pod_namespace,
                pod_name=pod_name,
            )
        except HookError as err:
            raise _fail(err) from None
        typer.echo(out, nl=False)

    @alloc.command("remove")
    def remove(
        ids: Annotated[list[str], typer.Argument(metavar="ID...", help="the allocated device ids")],
        directory: Annotated[
            str | None, typer.Option("--dir", metavar="DIR", help="spec directory (default /var/run/cdi)")
        ] = None,
    ) -> None:
        """Remove the allocation's spec (every pod's)."""
        from hook.producer.alloc import DEFAULT_DIRECTORY, remove_alloc_specs

        try:
            for path in remove_alloc_specs(ids, directory or DEFAULT_DIRECTORY):
                typer.echo(f"removed {path}")
        except HookError as err:
            raise _fail(err) from None

    @alloc.command("gc")
    def gc(
        live: LivePods = None,
        kubelet_pods: KubeletPods = "/var/lib/kubelet/pods",
        directory: Annotated[
            str | None, typer.Option("--dir", metavar="DIR", help="spec directory (default /var/run/cdi)")
        ] = None,
    ) -> None:
        """Remove the per-allocation specs whose pod no longer exists (without --live, specs pinned by
        namespace and name are kept: kubelet's directories name pods by UID only), and every spec named
        before the naming key when [gpu-env.cdi] unkeyed-alloc-names is 'refuse'."""
        from hook.producer.alloc import DEFAULT_DIRECTORY, gc_alloc_specs, live_pods_from_kubelet

        try:
            refuse = load_cdi_settings(config).cdi.unkeyed_alloc_names == "refuse"
            pods = frozenset(live) if live else live_pods_from_kubelet(kubelet_pods)
            removed, failed = gc_alloc_specs(
                pods, directory or DEFAULT_DIRECTORY, names_known=bool(live), refuse_unkeyed=refuse
            )
        except HookError as err:
            raise _fail(err) from None
        report_gc(removed, failed)


# --- resolve in CDI mode ---------------------------------------------------------------------------------


def describe_cdi(resolution: Any) -> dict[str, Any]:
    """What the shim would do for a resolved container in CDI mode: the CDI devices and every edit applied
    (the very functions the shim calls), or the error that would stop the container."""
    from hook.cdi.edits import merge_edits
    from hook.cdi.registry import load_registry, resolve_edits
    from hook.pipeline.bundle import set_process_env
    from hook.pipeline.cdidevices import cdi_device_names, inject_requested

    settings = resolution.settings
    names = cdi_device_names(resolution.request.devices, settings.cdi.default_kind)
    document = set_process_env(resolution.spec.document, resolution.entries)
    inject_requested(document, resolution.request.devices, settings, resolution.env_file)  # the shim's checks
    registry = load_registry(settings.cdi.spec_dirs)
    edits = merge_edits(resolve_edits(registry, names)) if names else {}
    files = sorted({registry.devices[name][0].path for name in names})
    return {
        "devices": names,
        "spec_files": files,
        "edits": {key: value for key, value in edits.items() if value not in (None, [])},
        "env_after": "NVIDIA_VISIBLE_DEVICES=void",
    }


def format_cdi_edits(cdi: dict[str, Any]) -> str:
    """The human form of the CDI part of ``resolve``: devices, spec files, then each kind of edit."""
    lines = ["", f"CDI devices: {', '.join(cdi['devices']) or '-'}"]
    lines += [f"  from {path}" for path in cdi["spec_files"]]
    edits = cdi["edits"]
    lines += [f"env: {entry}" for entry in edits.get("env", [])]
    for node in edits.get("deviceNodes", []):
        host = node.get("hostPath", node["path"])
        lines.append(f"device node: {node['path']}" + (f" (host {host})" if host != node["path"] else ""))
    lines += [f"mount: {m['hostPath']} -> {m['containerPath']}" for m in edits.get("mounts", [])]
    lines += [
        f"hook ({h['hookName']}): {' '.join(h.get('args') or [h['path']])}" for h in edits.get("hooks", [])
    ]
    lines += [f"additional gid: {gid}" for gid in edits.get("additionalGids", [])]
    lines += [f"net device: {n['hostInterfaceName']} -> {n['name']}" for n in edits.get("netDevices", [])]
    if "intelRdt" in edits:
        lines.append(f"intelRdt: {edits['intelRdt']}")
    lines.append(f"then: {cdi['env_after']}")
    return "\n".join(lines) + "\n"
