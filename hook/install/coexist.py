"""What else on the node changes what gpu-env-hook does, said aloud: ``doctor`` reports each finding as a
check, ``install`` prints the ones that concern what it just installed as warnings.

* NVIDIA's own ``oci-nvidia-hook.json`` (or any hooks.d entry running NVIDIA's hook) beside ours: podman and
  CRI-O run both, so every GPU container gets a second GPU hook;
* NVIDIA's runtime in ``cdi`` or ``jit-cdi`` mode (``[nvidia-container-runtime] mode`` in its config.toml):
  it removes prestart hooks named ``nvidia-container-runtime-hook`` from the spec, so ``--as-nvidia-hook``
  does nothing for containers it runs;
* a hooks.d entry whose executable is missing: podman and CRI-O skip it without a word (no GPU, no error);
* an engine that has not loaded what install changed: its process started before the file install wrote
  (dockerd, containerd, CRI-O: a restart; dockerd's runtimes: a reload), or a runtime wrapper an uninstall
  kept for containers still running.

Every path is read under ``root`` (the node's ``/`` as seen from here); processes from ``<root>/proc``.
"""

import json
import os
from typing import Any, NamedTuple

from hook.util import paths

NVIDIA_HOOK_JSON = "oci-nvidia-hook.json"
NVIDIA_HOOK_NAMES = ("nvidia-container-toolkit", "nvidia-container-runtime-hook")
NVIDIA_RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
CDI_MODES = ("cdi", "jit-cdi")
_MAX_BYTES = 1 << 20
# The engines' processes (their command names in /proc/<pid>/stat) and how each reloads what install wrote.
ENGINE_PROCESSES = {"docker": "dockerd", "containerd": "containerd", "crio": "crio"}
RESTART = {
    "docker": "systemctl restart docker",
    "containerd": "systemctl restart containerd",
    "crio": "systemctl restart crio",
}


class Finding(NamedTuple):
    """One thing said about the node: ``ok`` True (fine), False (acts against you), None (worth knowing)."""

    name: str
    ok: bool | None
    detail: str
    fix: str = ""


def under(root: str, path: str, *, follow: bool = True) -> str:
    """Return the node path ``path`` as seen from here, its links resolved beneath ``root`` as the node
    resolves them (``hook.install.rootfs.NodeRoot.resolve``; ``follow``: the last component's too): the
    node's ``/var/run`` is often a link to ``/run``, which taken as is from a pod that sees the node at
    ``/host`` would lead to the pod's own ``/run``. The one way doctor turns a node path into a path here."""
    if root in ("", "/"):
        return path
    from hook.install.rootfs import NodeRoot

    return NodeRoot(root).resolve(path, follow=follow)


def _read(path: str) -> bytes | None:
    """Read a small regular file (never a FIFO or device); None when it is not one."""
    from hook.install.inuse import read_small

    return read_small(path, _MAX_BYTES)


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def hooks_entries(root: str, directories: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """Return every hooks.d JSON in ``directories`` (node path, document) that parses as an object."""
    found = []
    for directory in directories:
        try:
            names = sorted(os.listdir(under(root, directory)))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(directory, name)
            data = _read(under(root, path))
            try:
                document = json.loads(data) if data is not None else None
            except ValueError:
                continue
            if isinstance(document, dict):
                found.append((path, document))
    return found


def _hook_path(document: dict[str, Any]) -> str | None:
    hook = document.get("hook")
    path = hook.get("path") if isinstance(hook, dict) else None
    return path if isinstance(path, str) else None


def _is_ours(document: dict[str, Any]) -> bool:
    """Tell whether a hooks.d entry runs our hook: the hook wrapper, or the interpreter with our launch script
    (what install writes) or launch code (what earlier installs wrote)."""
    from hook.launcher import is_launch_code

    hook = document.get("hook")
    args = hook.get("args") if isinstance(hook, dict) else None
    if _hook_path(document) == paths.HOOK_WRAPPER:
        return True
    return isinstance(args, list) and (paths.LAUNCH_SCRIPT in args or is_launch_code(args))


def check_nvidia_hook_json(root: str, directories: tuple[str, ...] = paths.OCI_HOOKS_DIRS) -> Finding:
    """NVIDIA's hook registered in a hooks directory beside ours: both run for every container."""
    name = "NVIDIA hooks.d entry"
    entries = hooks_entries(root, directories)
    ours = [path for path, document in entries if _is_ours(document)]
    nvidia = [
        path
        for path, document in entries
        if os.path.basename(path) == NVIDIA_HOOK_JSON
        or os.path.basename(_hook_path(document) or "") in NVIDIA_HOOK_NAMES
    ]
    if not nvidia:
        return Finding(name, ok=True, detail=f"none in {' or '.join(directories)}")
    if not ours:
        return Finding(
            name, ok=None, detail=f"{', '.join(nvidia)}: NVIDIA's hook is registered (ours is not)"
        )
    return Finding(
        name,
        ok=False,
        detail=f"{', '.join(nvidia)} beside {', '.join(ours)}: podman and CRI-O run both, so every GPU "
        "container gets a second GPU hook (NVIDIA's ignores NVIDIA_ENV_FROM_FILE)",
        fix=f"remove {nvidia[0]} (gpu-env-hook does what it does), or uninstall gpu-env-hook",
    )


def nvidia_runtime_mode(root: str) -> str | None:
    """Return ``[nvidia-container-runtime] mode`` from NVIDIA's config.toml, or None when not set/readable."""
    data = _read(under(root, NVIDIA_RUNTIME_CONFIG))
    if data is None:
        return None
    import tomllib

    try:
        document = tomllib.loads(data.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError:
        return None
    table = document.get("nvidia-container-runtime")
    mode = table.get("mode") if isinstance(table, dict) else None
    return mode if isinstance(mode, str) else None


def alias_is_ours(root: str) -> bool:
    """Tell whether ``nvidia-container-runtime-hook`` on the node is our wrapper (``--as-nvidia-hook``)."""
    data = _read(under(root, paths.NVIDIA_HOOK_ALIAS))
    return data is not None and b"gpu-env-hook install" in data


def check_nvidia_runtime_mode(root: str, *, as_nvidia_hook: bool | None = None) -> Finding:
    """NVIDIA's runtime in cdi/jit-cdi mode drops prestart hooks named nvidia-container-runtime-hook: our
    alias then never runs for the containers it starts."""
    name = "NVIDIA runtime mode"
    installed = alias_is_ours(root) if as_nvidia_hook is None else as_nvidia_hook
    mode = nvidia_runtime_mode(root)
    if not installed:
        return Finding(name, ok=None, detail=f"{paths.NVIDIA_HOOK_ALIAS} is not ours: not concerned")
    if mode in CDI_MODES:
        return Finding(
            name,
            ok=False,
            detail=f'{NVIDIA_RUNTIME_CONFIG} sets mode = "{mode}": NVIDIA\'s runtime removes prestart hooks '
            f"named nvidia-container-runtime-hook, so {paths.NVIDIA_HOOK_ALIAS} (gpu-env-hook) does not run "
            "for the containers it starts",
            fix=f'set mode = "legacy" in {NVIDIA_RUNTIME_CONFIG}, or use the gpu-env runtime instead of '
            "--as-nvidia-hook",
        )
    if mode is None and _is_executable(under(root, "/usr/bin/nvidia-container-runtime")):
        return Finding(
            name,
            ok=None,
            detail=f'NVIDIA\'s runtime is installed and {NVIDIA_RUNTIME_CONFIG} sets no mode: "auto" picks '
            "CDI (dropping nvidia-container-runtime-hook) on toolkit 1.18 and later",
            fix=f'set mode = "legacy" in {NVIDIA_RUNTIME_CONFIG} where NVIDIA\'s runtime should run our hook',
        )
    return Finding(name, ok=True, detail=f"mode = {mode or 'not set'}: the hook alias runs")


def check_hooks_executables(root: str, directories: tuple[str, ...] = paths.OCI_HOOKS_DIRS) -> Finding:
    """A hooks.d entry whose executable is missing is skipped by podman and CRI-O without a word."""
    name = "hooks.d executables"
    missing = [
        f"{path} ({hook_path})"
        for path, document in hooks_entries(root, directories)
        if (hook_path := _hook_path(document)) is not None and not _is_executable(under(root, hook_path))
    ]
    if not missing:
        return Finding(name, ok=True, detail="every entry names an executable")
    return Finding(
        name,
        ok=False,
        detail=f"{', '.join(missing)}: missing or not executable; podman and CRI-O skip such an entry "
        "silently (the container starts without that hook: no GPU, no error)",
        fix="reinstall what wrote it (gpu-env-hook install --engine ...), or remove the JSON",
    )


# --- engines that have not loaded what install changed -----------------------------------------------


def _boot_time(proc: str) -> float | None:
    data = _read(os.path.join(proc, "stat"))
    for line in (data or b"").decode("ascii", "replace").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def engine_start_times(proc: str) -> dict[str, float]:
    """Return when each engine's oldest process started (seconds since the epoch), from ``proc``."""
    boot = _boot_time(proc)
    if boot is None:
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    wanted = {command: engine for engine, command in ENGINE_PROCESSES.items()}
    found: dict[str, float] = {}
    try:
        pids = [entry for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        data = _read(os.path.join(proc, pid, "stat"))
        if data is None:
            continue
        text = data.decode("utf-8", "replace")
        command, _, rest = text.partition("(")[2].rpartition(")")
        engine = wanted.get(command)
        fields = rest.split()
        if engine is None or len(fields) < 20:
            continue
        started = boot + int(fields[19]) / ticks
        found[engine] = min(found.get(engine, started), started)
    return found


def check_engines_loaded(root: str, proc: str | None = None) -> list[Finding]:
    """For each engine install wrote config for and whose daemon runs: did it start after that file changed?
    A running dockerd needs a reload for its runtimes, a restart for the hook alias; containerd and CRI-O a
    restart. Also: a runtime wrapper an uninstall kept for running containers."""
    from hook.install.manifest import RETIRED_PATH, load_manifest

    findings = []
    proc = proc if proc is not None else under(root, "/proc")
    starts = engine_start_times(proc) if os.path.isdir(proc) else {}
    for engine, command in ENGINE_PROCESSES.items():
        try:
            manifest = load_manifest(root, engine)
        except Exception:  # noqa: BLE001 - a damaged manifest is another check's business
            manifest = None
        if manifest is None or engine not in starts:
            continue
        # What the daemon itself loads: not the hook wrapper, the hooks JSON, the launch script (read at
        # each start) nor the tmpfiles.d entry (systemd's).
        unloaded = (paths.HOOK_WRAPPER, paths.LAUNCH_SCRIPT, paths.TMPFILES_CONF)
        configs = [
            entry["path"]
            for entry in manifest["files"]
            if entry["path"] not in unloaded and not entry["path"].endswith(".json")
        ]
        changed = {path: _mtime(under(root, path)) for path in configs}
        late = [path for path, mtime in changed.items() if mtime is not None and mtime > starts[engine]]
        name = f"{engine} loaded"
        if not late:
            findings.append(Finding(name, ok=True, detail=f"{command} started after install wrote its files"))
            continue
        reload_only = engine == "docker" and paths.NVIDIA_HOOK_ALIAS not in late
        how = "systemctl reload docker (or SIGHUP)" if reload_only else RESTART[engine]
        findings.append(
            Finding(
                name,
                ok=False,
                detail=f"{command} started before install changed {', '.join(late)}: it runs without them",
                fix=how,
            )
        )
    retired = _read(under(root, RETIRED_PATH))
    if retired is not None:
        findings.append(
            Finding(
                "retired runtime",
                ok=None,
                detail=f"a runtime wrapper ({paths.LIBEXEC_DIR}/ENGINE/{paths.RUNTIME_WRAPPER_NAME}) is kept "
                "as a passthrough for containers created before an "
                f"uninstall ({RETIRED_PATH})",
                fix="gpu-env-hook uninstall --purge removes it once no container uses it",
            )
        )
    return findings


def _mtime(path: str) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def install_warnings(root: str, engine: str, *, as_nvidia_hook: bool, hooks_dir: str) -> list[str]:
    """The findings that concern what ``install --engine engine`` just wrote, as ``warning:`` lines."""
    findings = []
    if engine in ("podman", "crio"):
        directories = tuple(dict.fromkeys((hooks_dir, *paths.OCI_HOOKS_DIRS)))
        findings.append(check_nvidia_hook_json(root, directories))
        findings.append(check_hooks_executables(root, directories))
    if as_nvidia_hook:
        findings.append(check_nvidia_runtime_mode(root, as_nvidia_hook=True))
    return [
        f"warning: {finding.detail}" + (f"; {finding.fix}" if finding.fix else "")
        for finding in findings
        if finding.ok is not True
    ]
