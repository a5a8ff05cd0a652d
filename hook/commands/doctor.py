"""``doctor``: check a node (or a tree under ``--root``) and say, per check, what holds and what to do.

Checks: the config parses; nvidia-container-cli is found; each env-file directory exists, is a real
directory owned by root and not group- or world-writable (nor are its parents); for each engine found
(podman, CRI-O, containerd, Docker) the hook or the shim is registered; each registered entry runs Python
isolated (``-I``). Paths come from ``hook.util.paths``.
"""

import json
import os
import re
import stat
from typing import Any, NamedTuple

from hook.install.coexist import under
from hook.launcher import LOADER
from hook.util import paths
from hook.util.errors import HookError
from hook.util.safetext import os_reason

_BINARY_DIRS = tuple(paths.FIXED_PATH.split(":"))
_PYTHON = re.compile(r"(^|/)python[0-9.]*$")
_MAX_SCRIPT_BYTES = 64 * 1024


class Check(NamedTuple):
    """One line of the report: ``ok`` is True, False or None (not applicable)."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""


def run_checks(
    *,
    root: str,
    config: str | None,
    environ: dict[str, str] | os._Environ[str],
    engine: str | None = None,
) -> list[Check]:
    """Run every check against the tree under ``root`` and return them in report order (``engine``: the
    ``--engine`` option, whose pod annotations pins are checked against; else as the installed hook has
    it: ``GPU_ENV_HOOK_ENGINE``, else the install record)."""
    from hook.pipeline.configfile import installed_engines

    installed = installed_engines(root)
    settings, config_check = check_config(root, config, environ, engine)
    checks = [config_check, check_installed(installed), check_cli(root, settings)]
    checks += [check_env_directory(root, directory) for directory in settings.env_file.directories]
    from hook.commands.cdidoctor import cdi_checks

    checks += [Check(*finding) for finding in cdi_checks(root, settings)]
    registered: list[tuple[str, list[str]]] = []
    finders = (("podman", _podman), ("crio", _crio), ("containerd", _containerd), ("docker", _docker))
    for name, find in finders:
        check, entry = find(root, name in installed)
        checks.append(check)
        if entry is not None:
            registered.append(entry)
    checks.append(check_containerd_imports(root))
    seen: set[str] = set()
    for path, args in registered:
        if path not in seen:
            seen.add(path)
            checks.append(check_isolated(root, path, args))
    checks.append(check_pod_binding(settings.env_file))
    checks.append(check_nri(root, installed=installed))
    checks.append(check_env_file_guard(root, installed))
    checks += coexistence_checks(root)
    checks.append(check_runtime_tree(root))
    return checks


def coexistence_checks(root: str) -> list[Check]:
    """What else on the node changes what the hook does (``hook.install.coexist``): NVIDIA's hooks.d entry
    beside ours, NVIDIA's runtime in a CDI mode under --as-nvidia-hook, hooks.d entries with a missing
    executable, engines that have not loaded what install changed."""
    from hook.install import coexist

    findings = [
        coexist.check_nvidia_hook_json(root),
        coexist.check_nvidia_runtime_mode(root),
        coexist.check_hooks_executables(root),
        *coexist.check_engines_loaded(root),
    ]
    return [Check(*finding) for finding in findings]


# --- config, cli, directories ----------------------------------------------------------------------------


def check_installed(installed: tuple[str, ...]) -> Check:
    """The engines gpu-env-hook is installed for on this node (their install records)."""
    where = os.path.dirname(paths.install_record("podman"))
    if not installed:
        return Check("installed for", ok=None, detail=f"no engine (no install record in {where})")
    return Check("installed for", ok=True, detail=f"{', '.join(installed)} (install records in {where})")


def check_config(
    root: str, config: str | None, environ: dict[str, str] | os._Environ[str], engine: str | None = None
) -> tuple[Any, Check]:
    """Parse config.toml as the hook finds it (defaults when it fails, so the other checks still run), with
    the pod-binding engine the installed hook has."""
    from hook.pipeline.config import parse_config
    from hook.pipeline.configfile import find_config_path, load_config_text, resolve_node_engine

    path, required = find_config_path(config, environ)
    if config is None:
        path = under(root, path)
    try:
        text = load_config_text(path, required=required)
        node_engine = resolve_node_engine(engine, environ, root)
        settings = parse_config(text, source=path if text is not None else None, engine=node_engine)
    except HookError as err:
        return parse_config(None), Check(
            "config", ok=False, detail=str(err), fix="fix the file (gpu-env-hook validate config-toml)"
        )
    detail = f"{path} parses" if text is not None else f"{path} absent: defaults apply"
    return settings, Check("config", ok=True, detail=detail)


def check_nri(
    root: str, processes: list[tuple[int, list[str]]] | None = None, installed: tuple[str, ...] | None = None
) -> Check:
    """The NRI path (docs/nri.md): whether the runtime serves NRI at the socket its config names
    (``nri_socket``), whether ``gpu-env-hook nri``
    runs (looked for among the processes only on the node itself, not under another ``--root``) and whether
    ``install --nri`` wrote its unit, so which path an env-file pod takes: NRI on the default handler, else
    the runtime shim (a RuntimeClass) or hooks.d, as the engines installed (``installed``) have them.
    Informational: a node may use the shim or hooks.d instead."""
    from hook.install.nri import UNIT_NAME, UNIT_PATH

    name = "NRI plugin"
    other = f"pods take {fallback_path(installed)}"
    unit = f"; unit {UNIT_NAME} written" if os.path.isfile(under(root, UNIT_PATH)) else ""
    socket, off = nri_socket(root, installed)
    if off:
        fix = "set enable_nri = true in [crio.nri] (install --engine crio --nri does), then restart crio"
        return Check(name, ok=None, detail=f"NRI off: {off}{unit}: {other}", fix=fix)
    try:
        is_socket = stat.S_ISSOCK(os.stat(under(root, socket)).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        return Check(name, ok=None, detail=f"no NRI socket at {socket}{unit}: {other}")
    if processes is None:
        if os.path.abspath(root) != "/":
            detail = f"{socket} present{unit}; the plugin is not looked for under --root"
            return Check(name, ok=None, detail=detail)
        processes = _processes()
    running = [pid for pid, argv in processes if _is_nri_plugin(argv)]
    if running:
        detail = (
            f"{socket} present, gpu-env-hook nri running (pid {running[0]}){unit}: "
            "env-file pods take the NRI path on the default handler"
        )
        return Check(name, ok=True, detail=detail)
    detail = f"{socket} present, gpu-env-hook nri not running{unit}: {other}"
    if unit:
        fix = f"systemctl daemon-reload && systemctl enable --now {UNIT_NAME}"
    else:
        fix = "to use NRI, install --engine containerd --nri (docs/nri.md)"
    return Check(name, ok=None, detail=detail, fix=fix)


# containerd's CRI runtime plugin (config version 3, containerd 2.x; version 2) and its CDI settings.
_CRI_RUNTIME_TABLES = ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri")
_CDI_DIRS_DEFAULT = ("/etc/cdi", "/var/run/cdi")


def check_env_file_guard(root: str, installed: tuple[str, ...]) -> Check:
    """Whether env-file containers are protected (hook.install.guard): the guard's CDI spec present,
    root-owned, not writable by others and the bytes' meaning install writes; and containerd's config
    neither switches CDI off nor reads specs from directories without it, nor CRI-O's."""
    name, spec = "env-file guard", paths.ENV_FILE_GUARD_SPEC
    if not {"containerd", "crio"} & set(installed) and not os.path.lexists(under(root, spec)):
        return Check(name, ok=None, detail="not installed for containerd or CRI-O")
    from hook.install.guard import guard_problem

    fix = "gpu-env-hook install --engine containerd (or crio) writes it"
    problem = guard_problem(root)
    if problem:
        return Check(name, ok=False, detail=problem, fix=fix)
    cdi = _containerd_cdi(root) if "containerd" in installed else ""
    if cdi:
        return Check(name, ok=False, detail=cdi, fix=f"enable CDI with /etc/cdi in {paths.CONTAINERD_CONFIG}")
    cdi = _crio_cdi(root) if "crio" in installed else ""
    if cdi:
        return Check(name, ok=False, detail=cdi, fix="add /etc/cdi to that cdi_spec_dirs")
    return Check(
        name,
        ok=True,
        detail=(
            f"{spec} in place: a container given {paths.ENV_FILE_GUARD_DEVICE} starts only once the NRI "
            "plugin or gpu-env-runtime applied its env file"
        ),
    )


def _containerd_cdi(root: str) -> str:
    """What in containerd's config keeps it from resolving the guard's device ('' when nothing is seen):
    ``enable_cdi = false``, or ``cdi_spec_dirs`` without the guard's directory (containerd 2.x has CDI on,
    with /etc/cdi and /var/run/cdi, by default; 1.7 has it off)."""
    plugins = _containerd_plugins(root)
    directory = os.path.dirname(paths.ENV_FILE_GUARD_SPEC)
    for table in _CRI_RUNTIME_TABLES:
        settings = plugins.get(table) if isinstance(plugins, dict) else None
        if not isinstance(settings, dict):
            continue
        if settings.get("enable_cdi") is False:
            return f"{paths.CONTAINERD_CONFIG}: enable_cdi = false in [plugins.'{table}']"
        dirs = settings.get("cdi_spec_dirs", _CDI_DIRS_DEFAULT)
        if isinstance(dirs, list) and directory not in dirs:
            return f"{paths.CONTAINERD_CONFIG}: cdi_spec_dirs in [plugins.'{table}'] leaves out {directory}"
    return ""


def _containerd_plugins(root: str) -> dict[str, Any] | None:
    """The ``plugins`` tables of the config containerd runs with (the main config and its imports, merged as
    install reads them); None when there is none or it cannot be read."""
    from hook.install.common import InstallError
    from hook.install.containerd import effective_config, load_chain

    try:
        with open(under(root, paths.CONTAINERD_CONFIG), "rb") as fh:
            plugins = effective_config(load_chain(root, paths.CONTAINERD_CONFIG, fh.read())).get("plugins")
    except (OSError, InstallError):
        return None
    return plugins if isinstance(plugins, dict) else {}


def nri_socket(root: str, installed: tuple[str, ...] | None) -> tuple[str, str]:
    """The socket the runtime serves NRI on, as its config names it, and why NRI is off ('' when it is not
    seen off): containerd's ``socket_path`` in ``[plugins."io.containerd.nri.v1.nri"]`` (main config and
    imports), CRI-O's ``[crio.nri] nri_listen`` and ``enable_nri`` (its files, ours among them). The engines
    installed are asked, else (neither containerd nor CRI-O installed) whichever has a config, containerd
    first; else the default socket."""
    from hook.install.common import InstallError
    from hook.install.crio import load_configs, nri_section
    from hook.install.crio import nri_socket as crio_socket
    from hook.install.nri import NRI_PLUGIN

    engines = [engine for engine in ("containerd", "crio") if installed and engine in installed]
    for engine in engines or ["containerd", "crio"]:
        if engine == "containerd":
            plugins = _containerd_plugins(root)
            if plugins is None:
                continue
            table = plugins.get(NRI_PLUGIN)
            socket = table.get("socket_path") if isinstance(table, dict) else None
            return (socket if isinstance(socket, str) and socket else paths.NRI_SOCKET), ""
        try:
            configs = load_configs(root, ours=True)
        except InstallError:
            continue
        if not configs:
            continue
        section = nri_section(configs)
        off = "CRI-O's [crio.nri] enable_nri = false" if section.get("enable_nri") is False else ""
        return crio_socket(section), off
    return paths.NRI_SOCKET, ""


def _crio_cdi(root: str) -> str:
    """What in CRI-O's files keeps it from resolving the guard's device ('' when nothing is seen): a
    ``cdi_spec_dirs`` without the guard's directory, in the file whose value CRI-O uses (the last to set it;
    CRI-O has CDI on, with /etc/cdi and /var/run/cdi, by default)."""
    from hook.install.common import InstallError
    from hook.install.crio import load_configs, runtime_section

    try:
        configs = load_configs(root)
    except InstallError:
        return ""
    found = [(config.path, runtime_section(config.document).get("cdi_spec_dirs")) for config in configs]
    setting = [(path, dirs) for path, dirs in found if isinstance(dirs, list)]
    directory = os.path.dirname(paths.ENV_FILE_GUARD_SPEC)
    if setting and directory not in setting[-1][1]:
        return f"{setting[-1][0]}: cdi_spec_dirs in [crio.runtime] leaves out {directory}"
    return ""


def fallback_path(installed: tuple[str, ...] | None) -> str:
    """Which path an env-file pod takes without the NRI plugin, by the engines installed (None: unknown)."""
    if installed is None:
        return "the runtime shim or hooks.d"
    found = []
    if any(engine in installed for engine in ("containerd", "crio", "docker")):
        found.append(f"the runtime shim (handler {paths.RUNTIME_HANDLER})")
    if any(engine in installed for engine in ("podman", "crio")):
        found.append("hooks.d")
    return " or ".join(found) if found else "no gpu-env-hook path (nothing installed)"


def _is_nri_plugin(argv: list[str]) -> bool:
    """Tell whether a command line runs ``gpu-env-hook ... nri``: our wrapper, ``-m hook`` or our launch code,
    with the command word ``nri``."""
    from hook.launcher import CODE_MARK

    if "nri" not in argv:
        return False
    ours = any(os.path.basename(arg) == "gpu-env-hook" or arg.startswith(CODE_MARK) for arg in argv)
    return ours or any(argv[i : i + 2] == ["-m", "hook"] for i in range(len(argv) - 1))


def _processes() -> list[tuple[int, list[str]]]:
    """Every process's pid and command line (those that vanish while read are left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        found.append((int(entry), [part.decode(errors="replace") for part in raw.split(b"\0") if part]))
    return found


def check_pod_binding(env_file: Any) -> Check:
    """Which engine's annotations a pod pin is checked against (``[env-file] pod-binding-engine``, else
    ``GPU_ENV_HOOK_ENGINE`` as doctor sees it), and whether env files can pass at all."""
    name = "pod binding"
    engine = env_file.pod_binding_engine
    from hook.pipeline import pod

    keys = pod.ENGINE_KEYS.get(engine)
    if keys is not None:
        return Check(name, ok=True, detail=f"{engine}: pins checked against {', '.join(keys.values())}")
    fix = (
        'set [env-file] pod-binding-engine = "containerd" or "crio" on a Kubernetes node '
        "(install --engine sets GPU_ENV_HOOK_ENGINE for the hook)"
    )
    why = "no engine set" if engine == "none" else f"{engine}'s annotations are chosen by the user"
    if env_file.require_pod_binding:
        detail = f"{engine} ({why}): every env file is refused, as require-pod-binding is on"
        return Check(name, ok=False, detail=detail, fix=fix)
    return Check(name, ok=None, detail=f"{engine} ({why}): pinned env files are refused", fix=fix)


def check_cli(root: str, settings: Any) -> Check:
    """Find nvidia-container-cli as the hook does (configured path, else the standard directories)."""
    from hook.pipeline.nvcli import CLI_NAME, SEARCH_DIRS

    fix = "install libnvidia-container-tools or set [nvidia-container-cli] path"
    if settings.cli.path:
        candidates = [settings.cli.path]
    else:
        prefixes = [settings.cli.root] if settings.cli.root not in ("", "/") else []
        candidates = [os.path.join(p + d, CLI_NAME) for p in [*prefixes, ""] for d in SEARCH_DIRS]
    for candidate in candidates:
        if _is_executable(under(root, candidate)):
            return Check("nvidia-container-cli", ok=True, detail=candidate)
    return Check(
        "nvidia-container-cli", ok=False, detail=f"not found ({', '.join(candidates[:2])}...)", fix=fix
    )


def check_env_directory(root: str, directory: str) -> Check:
    """The env-file directory: exists, a real directory, root-owned, not group/world-writable, and so is
    every directory on the way to it (the walk install and the key use: the one holding it strictly, a
    root-owned sticky one further up allowed)."""
    name = f"env dir {directory}"
    fix = f"mkdir -p {directory} && chown root:root {directory} && chmod 0700 {directory}"
    path = under(root, directory, follow=False)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Check(name, ok=False, detail="does not exist", fix=fix)
    except OSError as err:
        return Check(name, ok=False, detail=f"cannot stat: {os_reason(err)}", fix=fix)
    if not stat.S_ISDIR(info.st_mode):
        return Check(name, ok=False, detail="is not a directory (a symlink is not accepted)", fix=fix)
    problem = _unsafe(info)
    if problem:
        return Check(name, ok=False, detail=problem, fix=fix)
    from hook.util.beneath import untrusted_on_the_way

    try:
        found = untrusted_on_the_way(directory, root=root)
    except OSError as err:
        return Check(name, ok=False, detail=f"cannot stat a parent: {os_reason(err)}", fix=fix)
    if found is not None:
        parent = under(root, found[0])
        return Check(name, ok=False, detail=f"parent {parent} {found[1]}", fix=f"chmod go-w {parent}")
    return Check(name, ok=True, detail=f"root-owned, mode {stat.S_IMODE(os.stat(path).st_mode):04o}")


def check_runtime_tree(root: str) -> Check:
    """The version of the package the engines run (``/opt/gpu-env-hook/current``): everything in it
    root-owned and writable by root alone (an earlier install under a loose umask left its caches
    world-writable), and byte-compiled (a start never writes caches there: without them every start
    compiles the package in memory)."""
    name = "runtime tree"
    tree = under(root, paths.RUNTIME_TREE)
    try:
        target = os.readlink(f"{tree}/current")
    except OSError:
        return Check(name, ok=None, detail=f"no {paths.RUNTIME_TREE}/current (not installed)")
    version = f"{paths.RUNTIME_TREE}/{os.path.basename(target.rstrip('/'))}"
    fix = "gpu-env-hook install again (it sets the tree's modes and writes its caches anew)"
    for parent, _, files in os.walk(under(root, version)):
        for entry in (parent, *(os.path.join(parent, file) for file in files)):
            info = os.lstat(entry)
            problem = "" if stat.S_ISLNK(info.st_mode) else _unsafe(info)
            if problem:
                shown = paths.join(version, os.path.relpath(entry, under(root, version)))
                detail = f"{shown.removesuffix('/.')} {problem}: whoever can write there runs code as root"
                return Check(name, ok=False, detail=detail, fix=fix)
    caches = under(root, f"{version}/lib/hook/__pycache__")
    if not (os.path.isdir(caches) and any(entry.startswith("launcher.") for entry in os.listdir(caches))):
        return Check(
            name,
            ok=False,
            detail=f"{version} is not byte-compiled: every start compiles the package",
            fix="gpu-env-hook install again once the interpreter the engines run is on the node",
        )
    return Check(name, ok=True, detail=f"{version}: root-owned, writable by root alone, byte-compiled")


def _unsafe(info: os.stat_result) -> str:
    """Say what is unsafe about an entry's owner or mode ('' when nothing): the rule install and the
    hook hold it to (``hook.util.beneath.trust_problem``)."""
    from hook.util.beneath import trust_problem

    return trust_problem(info.st_uid, info.st_mode) or ""


# --- engines ---------------------------------------------------------------------------------------------


def _find_binary(root: str, name: str) -> str | None:
    """Return the engine binary's path in the fixed PATH under ``root``, or None."""
    for directory in _BINARY_DIRS:
        candidate = os.path.join(directory, name)
        if _is_executable(under(root, candidate)):
            return candidate
    return None


def _hook_json(root: str) -> tuple[str, dict[str, Any]] | None:
    """Return the first valid oci-hooks.d file of ours and its document, or None."""
    for directory in paths.OCI_HOOKS_DIRS:
        path = os.path.join(directory, paths.HOOK_JSON_NAME)
        try:
            with open(under(root, path), "rb") as fh:
                document = json.loads(fh.read())
        except (OSError, ValueError):
            continue
        if isinstance(document, dict):
            return path, document
    return None


def _not_ours(name: str, binary: str) -> tuple[Check, None]:
    """An engine on the node that gpu-env-hook is not installed for (no install record, nothing of ours
    registered): not applicable, not a failure."""
    engine = name.lower().replace("-", "")
    detail = f"{binary} found; gpu-env-hook is not installed for it (gpu-env-hook install --engine {engine})"
    return Check(name, ok=None, detail=detail), None


def _find_engine(root: str, binary_name: str, installed: bool) -> str | None:
    """The engine's binary on the node, else (installed for it under --root) its bare name, else None."""
    return _find_binary(root, binary_name) or (binary_name if installed else None)


def _hooks_dir_check(
    root: str, engine: str, binary: str, installed: bool
) -> tuple[Check, tuple[str, list[str]] | None]:
    """Check that our oci-hooks.d file is present, valid, and names an executable."""
    from hook.install.schema import validate_document

    found = _hook_json(root)
    fix = f"gpu-env-hook install --engine {engine.lower().replace('-', '')}"
    if found is None:
        if not installed:
            return _not_ours(engine, binary)
        where = " or ".join(paths.OCI_HOOKS_DIRS)
        return Check(
            engine, ok=False, detail=f"{binary} found, no {paths.HOOK_JSON_NAME} in {where}", fix=fix
        ), None
    path, document = found
    problems = validate_document(document, "hooks-json")
    if problems:
        return Check(engine, ok=False, detail=f"{path}: {problems[0]}", fix=fix), None
    hook_path = document["hook"]["path"]
    if not _is_executable(under(root, hook_path)):
        return Check(
            engine, ok=False, detail=f"{path} names {hook_path}, which is not executable", fix=fix
        ), None
    args = [str(arg) for arg in document["hook"].get("args", [])]
    return Check(engine, ok=True, detail=f"hook registered in {path}"), (hook_path, args)


def _podman(root: str, installed: bool) -> tuple[Check, tuple[str, list[str]] | None]:
    """podman: our oci-hooks.d file."""
    binary = _find_engine(root, "podman", installed)
    if binary is None:
        return Check("podman", ok=None, detail="not installed"), None
    return _hooks_dir_check(root, "podman", binary, installed)


def _crio(root: str, installed: bool) -> tuple[Check, tuple[str, list[str]] | None]:
    """CRI-O: our oci-hooks.d file, or a crio.conf.d drop-in naming the shim."""
    binary = _find_engine(root, "crio", installed)
    if binary is None:
        return Check("CRI-O", ok=None, detail="not installed"), None
    dropin = os.path.join(paths.CRIO_DROPIN_DIR, paths.CRIO_DROPIN_NAME)
    wrapper = paths.runtime_wrapper("crio")
    if wrapper in _read_text(under(root, dropin)):
        return Check("CRI-O", ok=True, detail=f"runtime registered in {dropin}"), (wrapper, [])
    return _hooks_dir_check(root, "CRI-O", binary, installed)


def _containerd(root: str, installed: bool) -> tuple[Check, tuple[str, list[str]] | None]:
    """containerd: which definition of the runtime handler takes effect in the config containerd runs with
    (the main config plus its imports, merged as containerd merges them), and that it runs our wrapper."""
    from hook.install.common import InstallError
    from hook.install.containerd import find_handler, load_chain

    binary = _find_engine(root, "containerd", installed)
    if binary is None:
        return Check("containerd", ok=None, detail="not installed"), None
    wrapper = paths.runtime_wrapper("containerd")
    fix = "gpu-env-hook install --engine containerd, then restart containerd"
    try:
        with open(under(root, paths.CONTAINERD_CONFIG), "rb") as fh:
            data = fh.read()
        found = find_handler(load_chain(root, paths.CONTAINERD_CONFIG, data, keep_blocks=True))
    except FileNotFoundError:
        if not installed:
            return _not_ours("containerd", binary)
        return Check(
            "containerd", ok=False, detail=f"{binary} found, {wrapper} not registered", fix=fix
        ), None
    except OSError as err:
        detail = f"cannot read {paths.CONTAINERD_CONFIG}: {os_reason(err)}"
        return Check("containerd", ok=False, detail=detail, fix=fix), None
    except InstallError as err:
        return Check("containerd", ok=False, detail=str(err), fix=f"fix {paths.CONTAINERD_CONFIG}"), None
    handler = paths.RUNTIME_HANDLER
    if found.in_effect is None and not found.defined_in and not installed:
        return _not_ours("containerd", binary)
    if found.in_effect is None:
        detail = f"{binary} found, {wrapper} not registered"
        if found.defined_in:
            detail = (
                f"runtime handler {handler} in {', '.join(found.defined_in)} does not take effect: a later "
                "file's CRI table replaces it (containerd 1.x uses only the last one)"
            )
        return Check("containerd", ok=False, detail=detail, fix=fix), None
    if found.binary != wrapper:
        detail = (
            f"runtime handler {handler} takes effect from {found.in_effect}, but runs {found.binary!r}, "
            f"not {wrapper}"
        )
        return Check("containerd", ok=False, detail=detail, fix=fix), None
    kind = (
        "the marked block in the main config" if found.in_effect == paths.CONTAINERD_CONFIG else "a drop-in"
    )
    detail = f"runtime handler {handler} takes effect from {found.in_effect} ({kind})"
    overridden = [path for path in found.defined_in if path != found.in_effect]
    if overridden:
        detail += f"; also defined in {', '.join(overridden)} (overridden)"
    return Check("containerd", ok=True, detail=detail), (wrapper, [])


def containerd_loaded_files(root: str, binary: str | None) -> tuple[list[str] | None, str]:
    """Return the config files containerd loads (main config first) and how that was learnt: from
    ``containerd config dump`` when containerd is installed on this node (root ``/``), else by reading the
    main config's ``imports`` as containerd does. None (with the reason) when the configs cannot be read."""
    if root in ("", "/") and binary is not None:
        loaded = _dump_imports(binary)
        if loaded is not None:
            return loaded, "containerd config dump"
    from hook.install.common import InstallError
    from hook.install.containerd import load_chain

    try:
        with open(under(root, paths.CONTAINERD_CONFIG), "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return [], f"no {paths.CONTAINERD_CONFIG}"
    except OSError as err:
        return None, f"cannot read {paths.CONTAINERD_CONFIG}: {os_reason(err)}"
    try:
        chain = load_chain(root, paths.CONTAINERD_CONFIG, data)
    except InstallError as err:
        return None, str(err)
    return [config.path for config in chain], f"the imports of {paths.CONTAINERD_CONFIG}"


def _dump_imports(binary: str) -> list[str] | None:
    """The files ``containerd config dump`` says it loaded (main config first), or None when it fails."""
    import subprocess
    import tomllib

    try:
        proc = subprocess.run(
            [binary, "config", "dump"],
            env={"PATH": paths.FIXED_PATH},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
        imports = tomllib.loads(proc.stdout.decode("utf-8")).get("imports") if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(imports, list):
        return None
    import glob

    # containerd 1.x lists the files it loaded; 2.x lists the imports as written (a glob stays a glob).
    loaded = []
    for path in imports:
        if isinstance(path, str):
            loaded += sorted(glob.glob(path)) if "*" in path else [path]
    return sorted(loaded, key=lambda path: path != paths.CONTAINERD_CONFIG)


def check_containerd_imports(root: str) -> Check:
    """A containerd drop-in (``/etc/containerd/conf.d/*.toml``) that no ``imports`` line loads is dead: the
    handler or settings in it never reach containerd."""
    name = "containerd drop-ins"
    directory = paths.CONTAINERD_DROPIN_DIR
    try:
        names = sorted(entry for entry in os.listdir(under(root, directory)) if entry.endswith(".toml"))
    except OSError:
        names = []
    if not names:
        return Check(name, ok=None, detail=f"none in {directory}")
    loaded, source = containerd_loaded_files(root, _find_binary(root, "containerd"))
    if loaded is None:
        return Check(name, ok=False, detail=source, fix=f"fix {paths.CONTAINERD_CONFIG}")
    dead = [os.path.join(directory, entry) for entry in names if os.path.join(directory, entry) not in loaded]
    if dead:
        return Check(
            name,
            ok=False,
            detail=f"{', '.join(dead)}: no imports line loads it (per {source})",
            fix=f'add imports = ["{directory}/*.toml"] to {paths.CONTAINERD_CONFIG} and restart containerd, '
            "or remove the file",
        )
    return Check(name, ok=True, detail=f"every file in {directory} is loaded (per {source})")


def _docker(root: str, installed: bool) -> tuple[Check, tuple[str, list[str]] | None]:
    """Docker: a ``runtimes`` entry in daemon.json naming the shim, or ours installed as NVIDIA's hook."""
    binary = _find_engine(root, "dockerd", installed)
    if binary is None:
        return Check("Docker", ok=None, detail="not installed"), None
    try:
        daemon = json.loads(_read_text(under(root, paths.DOCKER_DAEMON_JSON)) or "{}")
    except ValueError:
        daemon = {}
    runtimes = daemon.get("runtimes") if isinstance(daemon, dict) else None
    wrapper = paths.runtime_wrapper("docker")
    if isinstance(runtimes, dict):
        for name, entry in runtimes.items():
            if isinstance(entry, dict) and entry.get("path") == wrapper:
                detail = f"runtime {name!r} in {paths.DOCKER_DAEMON_JSON}"
                return Check("Docker", ok=True, detail=detail), (wrapper, [])
    if _is_executable(under(root, paths.NVIDIA_HOOK_ALIAS)):
        detail = f"installed as {paths.NVIDIA_HOOK_ALIAS}"
        return Check("Docker", ok=True, detail=detail), (paths.NVIDIA_HOOK_ALIAS, [])
    if not installed:
        return _not_ours("Docker", binary)
    return (
        Check(
            "Docker",
            ok=False,
            detail=f"{binary} found, no runtime in {paths.DOCKER_DAEMON_JSON} names {wrapper}",
            fix="gpu-env-hook install --engine docker, then restart dockerd",
        ),
        None,
    )


# --- isolation -------------------------------------------------------------------------------------------


def check_isolated(root: str, path: str, args: list[str]) -> Check:
    """A registered entry must start Python with ``-I`` (no PYTHONPATH, no user site, no cwd on sys.path)."""
    name = f"isolated {path}"
    fix = "reinstall: gpu-env-hook install (its wrappers run python -I)"
    if _PYTHON.search(path) or paths.basename(path) == LOADER:  # the tree's interpreter: through its loader
        ok = "-I" in args or any(_has_isolate_flag(arg) for arg in args[1:2])
        detail = "python started with -I" if ok else "python started without -I in the entry's args"
        return Check(name, ok=ok, detail=detail, fix=fix)
    text = _read_text(under(root, path))
    if not text:
        return Check(name, ok=False, detail="cannot read the wrapper (binary or missing)", fix=fix)
    # Lines that start Python: not comments, and not the runtime wrapper's `python=...` assignment or its
    # checks and message about that interpreter (`if [ ! -x "$python" ]`, `echo ...`).
    python_lines = [
        line
        for line in text.splitlines()
        if "python" in line and not line.lstrip().startswith(("# ", "python=", "if ", "echo "))
    ]
    if not python_lines:
        return Check(name, ok=False, detail="the wrapper does not start Python visibly", fix=fix)
    bad = [line for line in python_lines if not any(_has_isolate_flag(token) for token in line.split())]
    if bad:
        return Check(name, ok=False, detail="the wrapper starts Python without -I", fix=fix)
    return Check(name, ok=True, detail="the wrapper starts Python with -I")


def _has_isolate_flag(token: str) -> bool:
    """Tell whether a command-line token is ``-I`` or a short-flag cluster holding it (``-IB``)."""
    return token.startswith("-") and not token.startswith("--") and "I" in token[1:] and token[1:].isalpha()


def _is_executable(path: str) -> bool:
    """Tell whether ``path`` is an executable regular file (following symlinks)."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _read_text(path: str) -> str:
    """Read a small text file; '' when missing, unreadable, binary or too large."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_SCRIPT_BYTES + 1)
    except OSError:
        return ""
    if len(data) > _MAX_SCRIPT_BYTES or b"\0" in data:
        return ""
    return data.decode("utf-8", errors="replace")
