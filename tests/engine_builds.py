"""Container engines built from their sources for a run, found through environment variables.

Debian 12 packages containerd 1.6 only; tests that need containerd 2.x take a build of it from
``GPU_ENV_HOOK_CONTAINERD2``: a directory holding ``containerd`` and ``containerd-shim-runc-v2`` (and
``ctr``), or the directory above such a ``bin/``. Tests that need CRI-O (not packaged for Debian 12 either)
take a build from ``GPU_ENV_HOOK_CRIO``: a directory holding ``crio`` and ``pinns`` (or above such a
``bin/``). Without them those tests are skipped.
"""

from __future__ import annotations

import os
from pathlib import Path


def containerd2_dir() -> Path | None:
    """The directory of the containerd 2.x build named by GPU_ENV_HOOK_CONTAINERD2, if there is one."""
    named = os.environ.get("GPU_ENV_HOOK_CONTAINERD2", "")
    if not named:
        return None
    for candidate in (Path(named), Path(named) / "bin"):
        if (candidate / "containerd").is_file() and (candidate / "containerd-shim-runc-v2").is_file():
            return candidate
    return None


def containerd2() -> Path | None:
    """The containerd 2.x binary of :func:`containerd2_dir`, if there is one."""
    directory = containerd2_dir()
    return None if directory is None else directory / "containerd"


def crio_dir() -> Path | None:
    """The directory of the CRI-O build named by GPU_ENV_HOOK_CRIO (``crio`` and ``pinns``, or the directory
    above such a ``bin/``), if there is one. Debian 12 packages no CRI-O; tests that need it skip without."""
    named = os.environ.get("GPU_ENV_HOOK_CRIO", "")
    if not named:
        return None
    for candidate in (Path(named), Path(named) / "bin"):
        if (candidate / "crio").is_file() and (candidate / "pinns").is_file():
            return candidate
    return None


NVIDIA_RUNTIME_VAR = "GPU_ENV_HOOK_NVIDIA_RUNTIME"


def nvidia_toolkit_dir() -> Path | None:
    """The directory of the NVIDIA toolkit build whose ``nvidia-container-runtime`` GPU_ENV_HOOK_NVIDIA_RUNTIME
    names (``nvidia-container-runtime.legacy``, its hook, ``nvidia-cdi-hook`` and ``nvidia-ctk`` beside it), if
    there is one."""
    runtime = Path(os.environ.get(NVIDIA_RUNTIME_VAR, "") or "/nonexistent")
    directory = runtime.parent
    needed = (
        "nvidia-container-runtime.legacy",
        "nvidia-container-runtime-hook",
        "nvidia-cdi-hook",
        "nvidia-ctk",
    )
    if not runtime.is_file() or not all((directory / name).is_file() for name in needed):
        return None
    return directory
