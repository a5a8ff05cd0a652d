"""CRI-O: a crio.conf.d drop-in registering the runtime handler, based on CRI-O's default runtime, plus the
oci-hooks.d JSON.

CRI-O reads ``/etc/crio/crio.conf``, then every file under ``/etc/crio/crio.conf.d`` in lexical order
(recursively), each decoded over the configuration so far: a scalar a later file sets wins, and each
``[crio.runtime.runtimes.NAME]`` table a file defines *replaces* that handler whole (other handlers stay).
So the drop-in holds one complete handler: the default runtime's table as those files leave it
(``runtime_root``, ``monitor_env``, ``monitor_path``, ``monitor_cgroup``, ``allowed_annotations``,
``runtime_config_path``, ... — as nvidia-ctk's CRI-O engine copies it), with ``runtime_path`` set to the
runtime wrapper. ``monitor_env`` (conmon's environment, which conmon hands to the runtime it starts) also
carries ``GPU_ENV_HOOK_ENGINE=crio``. The runtime the shim then execs is the default runtime's binary
(crun on many distributions), which ``plan`` returns for the runtime wrapper.

``--nri``: the same drop-in carries the ``[crio.nri]`` keys the plugin needs (``nri_settings``), and the
plugin's systemd unit (``hook.install.nri``) runs it on the socket CRI-O listens on.
"""

import copy
import os
from typing import Any, NamedTuple

from hook import __version__
from hook.install.common import CONFIG_MODE, EnginePlan, InstallError, InstallOptions, PlannedFile, rooted
from hook.install.podman import plan_hooks
from hook.install.rootfs import NodeRoot
from hook.util import paths

CRIO_CONFIG = "/etc/crio/crio.conf"
ENGINE_ENV = "GPU_ENV_HOOK_ENGINE"
# CRI-O's own defaults (pkg/config, Linux): the default runtime when no file names one, and the
# environment conmon gets when a handler sets no monitor_env.
DEFAULT_RUNTIME = "crun"
DEFAULT_MONITOR_ENV = [f"PATH={paths.FIXED_PATH}"]
# Runtime types whose runtime is called with a runc command line (conmon or conmon-rs); "vm" is not.
OCI_TYPES = ("", "oci", "pod")
# Keys of a handler that say how CRI-O finds or inherits the runtime: ours are set, not copied.
NOT_COPIED = ("runtime_path", "inherit_default_runtime", "platform_runtime_paths")


class CrioConfig(NamedTuple):
    """One file CRI-O reads: its node path and parsed document."""

    path: str
    document: dict[str, Any]


def dropin_path() -> str:
    """The node path of our drop-in."""
    return os.path.join(paths.CRIO_DROPIN_DIR, paths.CRIO_DROPIN_NAME)


def load_configs(root: str, *, ours: bool = False) -> list[CrioConfig]:
    """Return the files CRI-O reads, in its order (crio.conf, then crio.conf.d walked in lexical order),
    without our own drop-in (``ours``: with it, as CRI-O reads them); refuse one that is not valid TOML."""
    import tomllib

    node = NodeRoot(root)
    node_paths = [CRIO_CONFIG] if node.read(CRIO_CONFIG) is not None else []
    top = rooted(root, paths.CRIO_DROPIN_DIR)
    for directory, subdirs, names in os.walk(top):
        subdirs.sort()
        for name in sorted(names):
            found = os.path.join(paths.CRIO_DROPIN_DIR, os.path.relpath(os.path.join(directory, name), top))
            if ours or found != dropin_path():
                node_paths.append(found)
    configs = []
    for found in node_paths:
        where = rooted(root, found)
        data = node.read(found) or b""
        try:
            document = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise InstallError(f"{where}: not valid TOML ({err}); fix it first") from None
        configs.append(CrioConfig(found, document))
    return configs


def runtime_section(document: dict[str, Any]) -> dict[str, Any]:
    """Return a file's ``[crio.runtime]`` table (empty when it has none)."""
    crio = document.get("crio")
    section = crio.get("runtime") if isinstance(crio, dict) else None
    return section if isinstance(section, dict) else {}


def merge_configs(configs: list[CrioConfig]) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """Apply CRI-O's merge: the last ``default_runtime`` set wins; each handler is the last file's table."""
    default: str | None = None
    runtimes: dict[str, dict[str, Any]] = {}
    for config in configs:
        section = runtime_section(config.document)
        if isinstance(section.get("default_runtime"), str) and section["default_runtime"]:
            default = section["default_runtime"]
        tables = section.get("runtimes", {})
        if isinstance(tables, dict):
            runtimes.update({name: table for name, table in tables.items() if isinstance(table, dict)})
    return default, runtimes


def resolve_base_runtime(configs: list[CrioConfig], where: str) -> tuple[str, dict[str, Any]]:
    """Return CRI-O's default runtime and its table (CRI-O's built-in crun when no file defines it)."""
    default, runtimes = merge_configs(configs)
    if paths.RUNTIME_HANDLER in runtimes:
        raise InstallError(
            f"{where}: a runtime handler {paths.RUNTIME_HANDLER!r} is already configured, not by install; "
            "remove it first"
        )
    name = default or DEFAULT_RUNTIME
    table = runtimes.get(name)
    if table is None:
        if default is not None:
            raise InstallError(
                f"{where}: default_runtime {default!r} has no [crio.runtime.runtimes.{default}] table; "
                "CRI-O does not start like this; fix it first"
            )
        table = {"runtime_type": "oci"}
    if table.get("runtime_type", "") not in OCI_TYPES:
        raise InstallError(
            f"{where}: the default runtime {name!r} is of type {table['runtime_type']!r}; the shim wraps "
            "only runtimes called like runc (oci, pod)"
        )
    return name, table


def build_handler(base: dict[str, Any], wrapper: str) -> dict[str, Any]:
    """Return our handler's table: the base's, ``runtime_path`` = the wrapper, the engine in monitor_env."""
    table = {key: copy.deepcopy(value) for key, value in base.items() if key not in NOT_COPIED}
    table["runtime_path"] = wrapper
    table.setdefault("runtime_type", "oci")
    env = [item for item in (base.get("monitor_env") or DEFAULT_MONITOR_ENV) if isinstance(item, str)]
    env = [item for item in env if not item.startswith(ENGINE_ENV + "=")]
    table["monitor_env"] = [*env, f"{ENGINE_ENV}=crio"]
    return dict(sorted(table.items()))


def resolve_real_runtime(root: str, name: str, base: dict[str, Any]) -> str | None:
    """Return the binary the default runtime runs: its ``runtime_path``, else ``name`` looked up on the fixed
    PATH under ``root`` as CRI-O looks it up (None when it is not there)."""
    path = base.get("runtime_path")
    if isinstance(path, str) and path:
        return path
    for directory in paths.FIXED_PATH.split(":"):
        candidate = os.path.join(directory, name)
        if os.access(rooted(root, candidate), os.X_OK):
            return candidate
    return None


def nri_settings(configs: list[CrioConfig], root: str) -> tuple[dict[str, Any], str]:
    """``--nri``: the ``[crio.nri]`` keys our drop-in sets so that the plugin can connect, and the socket it
    connects to (``nri_listen`` as the files set it, else CRI-O's default).

    CRI-O has NRI on by default from 1.30 (off from 1.26 to 1.29), and every scalar a later file sets wins:
    ``enable_nri = true`` is written unless the files already set it true, and ``nri_disable_connections =
    false`` where a file set it true (no external plugin could connect). A file read after our drop-in that
    sets either the other way would undo it: refused, install never rewrites a file the node wrote."""
    for config in configs:
        crio = config.document.get("crio")
        table = crio.get("nri") if isinstance(crio, dict) else None
        if not isinstance(table, dict):
            continue
        if _read_after_ours(config.path):
            for key, bad in (("enable_nri", False), ("nri_disable_connections", True)):
                if table.get(key) is bad:
                    raise InstallError(
                        f"{rooted(root, config.path)}: [crio.nri] {key} = {str(bad).lower()} is read after "
                        f"{dropin_path()} and would keep the NRI plugin out; change it there, then install "
                        "--nri"
                    )
    merged = nri_section(configs)
    wanted: dict[str, Any] = {}
    if merged.get("enable_nri") is not True:
        wanted["enable_nri"] = True
    if merged.get("nri_disable_connections") is True:
        wanted["nri_disable_connections"] = False
    return wanted, nri_socket(merged)


def nri_section(configs: list[CrioConfig]) -> dict[str, Any]:
    """The ``[crio.nri]`` keys as CRI-O takes them from its files (each key: the last file to set it)."""
    merged: dict[str, Any] = {}
    for config in configs:
        crio = config.document.get("crio")
        table = crio.get("nri") if isinstance(crio, dict) else None
        if isinstance(table, dict):
            merged.update(table)
    return merged


def nri_socket(section: dict[str, Any]) -> str:
    """The socket CRI-O serves NRI on: ``nri_listen`` as ``section`` (``nri_section``) has it, else its
    default."""
    socket = section.get("nri_listen")
    return socket if isinstance(socket, str) and socket else paths.NRI_SOCKET


def _read_after_ours(path: str) -> bool:
    """Tell whether CRI-O reads the file at ``path`` after our drop-in (crio.conf.d, lexical order)."""
    if not path.startswith(paths.CRIO_DROPIN_DIR + "/"):
        return False
    return os.path.relpath(path, paths.CRIO_DROPIN_DIR).split(os.sep)[0] > paths.CRIO_DROPIN_NAME


def build_crio_dropin(
    table: dict[str, Any], base: str, nri: dict[str, Any] | None = None, *, with_nri: bool = False
) -> bytes:
    """Build the crio.conf.d drop-in registering ``table`` as handler RUNTIME_HANDLER, with the ``[crio.nri]``
    keys ``nri`` when there are any (verified by reading it back); ``with_nri``: install --nri (no hooks
    JSON beside it)."""
    from hook.install.tomlwrite import render_tables

    beside = (
        "Env files on the default runtime: the NRI plugin\n# (install --nri; no oci-hooks.d JSON)."
        if with_nri
        else "The oci-hooks.d JSON installed beside it\n# covers every container."
    )
    header = (
        f"# Written by `gpu-env-hook install --engine crio` (gpu-env-hook {__version__}); `gpu-env-hook "
        "uninstall\n# --engine crio` removes it. Registers gpu-env-runtime as the runtime handler "
        f"{paths.RUNTIME_HANDLER} (a RuntimeClass\n# with `handler: {paths.RUNTIME_HANDLER}` selects it), "
        f"with the settings of CRI-O's default runtime, {base}.\n# {beside}\n"
    )
    body = render_tables(("crio", "runtime", "runtimes", paths.RUNTIME_HANDLER), table, indent="")
    if nri:
        body += "\n# NRI switched on for the gpu-env-hook NRI plugin (install --nri).\n" + render_tables(
            ("crio", "nri"), nri, indent=""
        )
    return (header + body).encode()


def plan(options: InstallOptions) -> EnginePlan:
    """Return the drop-in, then the hooks JSON (written last: CRI-O reads it on every create).

    ``--nri``: no hooks JSON. Its hook would run for every container on the node (a process for each, GPU or
    not), and the plugin adds no hook of its own to a container that already has a GPU hook: the env-file
    containers would get hooks.d's, which is not told that the plugin applied a pinned file (a strict
    ``accept-nvidia-visible-devices-envvar-when-unprivileged = false`` would then pass none of its devices).
    The plugin's prestart hook, with the decision, goes only to containers that name an env file."""
    hooks = plan_hooks(options) if not options.nri else EnginePlan((), ())
    configs = load_configs(options.root)
    where = rooted(options.root, paths.CRIO_DROPIN_DIR)
    base_name, base = resolve_base_runtime(configs, where)
    table = build_handler(base, paths.runtime_wrapper("crio"))
    nri: dict[str, Any] = {}
    unit: tuple[PlannedFile, ...] = ()
    nri_notes: tuple[str, ...] = ()
    if options.nri:
        from hook.install.nri import plan_unit

        nri, socket = nri_settings(configs, options.root)
        if options.nri_unit:
            planned_unit, note = plan_unit(options, socket)
            unit, nri_notes = (planned_unit,), (note,)
    dropin = PlannedFile(
        dropin_path(), build_crio_dropin(table, base_name, nri, with_nri=options.nri), CONFIG_MODE
    )
    restart = (
        f"next: restart CRI-O (systemctl restart crio) to load the runtime handler {paths.RUNTIME_HANDLER} "
        f"(the settings of CRI-O's default runtime, {base_name})"
        + ("" if options.nri else "; the hooks JSON applies to new containers without it")
    )
    runtime = resolve_real_runtime(options.root, base_name, base)
    notes = [*hooks.notes, restart, *nri_notes]
    if runtime is None:
        notes.insert(
            0, f"warning: CRI-O's default runtime {base_name} is not on the node's PATH; the shim execs runc"
        )
    return EnginePlan((dropin, *unit, *hooks.files), tuple(notes), runtime)


def uninstall_notes() -> tuple[str, ...]:
    """What the user must do after uninstall: CRI-O keeps the handler it loaded until it restarts."""
    return (
        (
            f"next: restart CRI-O (systemctl restart crio) when no container uses runtime handler "
            f"{paths.RUNTIME_HANDLER}: it keeps the handlers it loaded until then (it notices hooks.d "
            "changes by itself)"
        ),
    )
