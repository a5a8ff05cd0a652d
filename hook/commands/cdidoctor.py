"""doctor's CDI checks: NVIDIA's runtime mode against ours, NVIDIA's generated spec present and current, the
YAML loader and the spec cache.

NVIDIA's ``nvidia-container-runtime`` (toolkit 1.18 and later) runs in ``jit-cdi`` mode by default
(``mode = "auto"``), as in ``cdi`` mode: it then drops prestart hooks named
``nvidia-container-runtime-hook`` and never calls ``nvidia-container-cli``. Our ``device-mode = "legacy"``
behind NVIDIA's runtime in those modes would hand GPUs over twice or not at all, so that pairing fails.
NVIDIA's generated spec (``nvidia-ctk cdi generate``, or the ``nvidia-cdi-refresh`` service) is current when
every host path it names — device nodes, driver libraries, hook binaries — still exists: a driver upgrade
renames the versioned libraries and leaves an old spec pointing at files that are gone.
"""

import os

from hook.install.coexist import Finding, under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CDI_MODES = ("cdi", "jit-cdi")
NVIDIA_KIND = "nvidia.com/gpu"
REGENERATE = "nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml (or enable nvidia-cdi-refresh)"


def cdi_checks(root: str, settings: "Any") -> list[Finding]:
    """The CDI lines of doctor's report, in order."""
    runtime = nvidia_runtime_installed(root)
    return [
        check_nvidia_runtime_mode(settings, runtime_installed=runtime),
        check_nvidia_spec(root, settings),
        check_skipped_specs(root, settings),
        check_yaml_loader(settings),
        check_spec_cache(root, settings),
    ]


def nvidia_runtime_installed(root: str) -> bool:
    """Tell whether ``nvidia-container-runtime`` is an executable on the fixed PATH under ``root``."""
    from hook.util.paths import FIXED_PATH

    return any(
        os.access(under(root, os.path.join(directory, "nvidia-container-runtime")), os.X_OK)
        for directory in FIXED_PATH.split(":")
    )


def check_nvidia_runtime_mode(settings: "Any", *, runtime_installed: bool = True) -> Finding:
    """NVIDIA's ``[nvidia-container-runtime] mode`` and whether our ``[gpu-env] device-mode`` fits it (a
    mismatch fails only where NVIDIA's runtime is installed: elsewhere its mode acts on nothing)."""
    mode, ours = settings.mode, settings.device_mode
    meaning = {
        "auto": "jit-cdi with toolkit 1.18 and later, legacy before",
        "legacy": "NVIDIA's hook and nvidia-container-cli",
        "csv": "Tegra CSV files",
        "cdi": "CDI devices from the specs; hooks named nvidia-container-runtime-hook dropped",
        "jit-cdi": "CDI specs generated per container; hooks named nvidia-container-runtime-hook dropped",
    }.get(mode, "unknown mode")
    detail = f"NVIDIA runtime mode {mode} ({meaning}); ours device-mode {ours}"
    if mode in CDI_MODES and ours == "legacy" and runtime_installed:
        return Finding(
            "device mode",
            ok=False,
            detail=detail,
            fix='set [gpu-env] device-mode = "cdi": NVIDIA\'s runtime ignores the legacy hook in this mode',
        )
    return Finding("device mode", ok=True if ours == "cdi" or mode == "legacy" else None, detail=detail)


def check_nvidia_spec(root: str, settings: "Any") -> Finding:
    """NVIDIA's spec (kind ``nvidia.com/gpu``) in the spec directories: present, valid, current."""
    from hook.cdi.registry import load_registry

    name = "NVIDIA CDI spec"
    needed = settings.device_mode == "cdi"
    dirs = tuple(under(root, directory) for directory in settings.cdi.spec_dirs)
    registry = load_registry(dirs)
    specs = [spec for spec in registry.specs if spec.kind == NVIDIA_KIND]
    broken = [path for path in registry.errors if os.path.basename(path).startswith("nvidia")]
    if broken:
        first = registry.errors[broken[0]][0]
        return Finding(name, ok=False, detail=first, fix=REGENERATE)
    if not specs:
        detail = f"no spec of kind {NVIDIA_KIND} in {', '.join(dirs)}"
        return Finding(name, ok=False if needed else None, detail=detail, fix=REGENERATE)
    spec = specs[-1]
    missing = [path for path in host_paths(spec.document) if not os.path.lexists(under(root, path))]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        detail = f"{spec.path} is stale: {missing[0]}{more} no longer exist(s)"
        return Finding(name, ok=False, detail=detail, fix=REGENERATE)
    devices = sorted(n for n in registry.devices if n.startswith(NVIDIA_KIND + "="))
    conflicts = sorted(n for n in registry.conflicts if n.startswith(NVIDIA_KIND + "="))
    if conflicts:
        return Finding(
            name, ok=False, detail=f"conflicting {', '.join(conflicts)}", fix="keep one spec per kind"
        )
    detail = f"{spec.path}: cdiVersion {spec.document.get('cdiVersion')}, {len(devices)} devices, current"
    return Finding(name, ok=True, detail=detail)


def check_skipped_specs(root: str, settings: "Any") -> Finding:
    """Spec files (or directories) the shim skips: unreadable, undecodable, invalid or untrusted (not root's,
    or group/world-writable: a spec's hooks run as root)."""
    from hook.cdi.registry import load_registry

    registry = load_registry(tuple(under(root, directory) for directory in settings.cdi.spec_dirs))
    if not registry.skipped:
        return Finding("skipped CDI specs", ok=True if registry.specs else None, detail="none")
    first = registry.errors[registry.skipped[0]][0]
    more = f" (and {len(registry.skipped) - 1} more)" if len(registry.skipped) > 1 else ""
    return Finding(
        "skipped CDI specs",
        ok=False,
        detail=f"{first}{more}",
        fix="fix or remove the file; a spec and its directory must be root's and not group/world-writable",
    )


def check_yaml_loader(settings: "Any") -> Finding:
    """PyYAML with libyaml's ``CSafeLoader``: without it every YAML spec is parsed in pure Python on every
    create (several times slower; the verdicts are the same), and without PyYAML YAML specs are refused."""
    name = "YAML specs"
    needed = settings.device_mode == "cdi"
    try:
        import yaml
    except ImportError:
        return Finding(
            name,
            ok=False if needed else None,
            detail="PyYAML is not installed: YAML specs are skipped",
            fix="install PyYAML (built with libyaml), or write the specs as JSON",
        )
    if not hasattr(yaml, "CSafeLoader"):
        return Finding(
            name,
            ok=False if needed else None,
            detail=f"PyYAML {yaml.__version__} lacks libyaml (CSafeLoader): YAML specs are read in pure "
            "Python",
            fix="install PyYAML built with libyaml (Debian: python3-yaml), or write the specs as JSON",
        )
    return Finding(name, ok=True, detail=f"PyYAML {yaml.__version__} with libyaml's CSafeLoader")


def check_spec_cache(root: str, settings: "Any") -> Finding:
    """The cache of decoded YAML specs (``[gpu-env.cdi] spec-cache``): off, usable, or not used because its
    directory is not root's with mode 0700 (then every create decodes its YAML specs again)."""
    from hook.cdi.speccache import directory_problem

    name, directory = "CDI spec cache", settings.cdi.spec_cache
    if not directory:
        return Finding(name, ok=None, detail="off (spec-cache is empty): each create decodes its YAML specs")
    problem = directory_problem(under(root, directory))
    if problem is not None:
        return Finding(
            name,
            ok=False if settings.device_mode == "cdi" else None,
            detail=f"{directory} {problem}: not used, each create decodes its YAML specs",
            fix=f"remove {directory}: the next create makes it again (root's, mode 0700)",
        )
    return Finding(name, ok=True if settings.device_mode == "cdi" else None, detail=f"{directory}")


def host_paths(document: "dict[str, Any]") -> list[str]:
    """Every host path a spec names: device nodes, mount sources, hook executables (in file order)."""
    edits = [document.get("containerEdits") or {}]
    edits += [device.get("containerEdits") or {} for device in document.get("devices", [])]
    paths: list[str] = []
    for edit in edits:
        paths += [node.get("hostPath") or node["path"] for node in edit.get("deviceNodes", [])]
        paths += [mount["hostPath"] for mount in edit.get("mounts", []) if mount["hostPath"].startswith("/")]
        paths += [hook["path"] for hook in edit.get("hooks", [])]
    return list(dict.fromkeys(paths))
