"""The wrappers the engines execute: small shell scripts that run this package's Python isolated (-I)."""

from __future__ import annotations

import os
import shlex
import subprocess

from hook import __version__, envvars, paths
from hook.install.common import (
    EXECUTABLE_MODE,
    InstallError,
    InstallOptions,
    PlannedFile,
    fill_template,
    rooted,
)

# Console-script targets the wrappers run (pyproject's [project.scripts]).
HOOK_ENTRY = "hook.__main__"
RUNTIME_ENTRY = "hook.shim"
# Variables a wrapper lets through from its caller (when non-empty); all others are dropped.
# The hook keeps only the variables upstream reads to find its config.
# GPU_ENV_HOOK_ENGINE: set by the oci-hooks.d JSON install writes (the engine whose annotations pin files).
HOOK_KEEP_ENV = (envvars.NVIDIA_CTK_CONFIG_FILE_PATH, envvars.XDG_CONFIG_HOME, envvars.GPU_ENV_HOOK_ENGINE)
# The runtime shim must hand runc the engine's environment (NOTIFY_SOCKET, XDG_RUNTIME_DIR, proxies for
# hooks that inherit runc's environment, ...): None keeps it, less the dynamic loader's variables.
RUNTIME_KEEP_ENV: tuple[str, ...] | None = None
LOADER_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")


def build_wrapper(
    name: str, entry: str, *, python: str, keep: tuple[str, ...] | None, config: str | None
) -> bytes:
    """Build the shell wrapper that runs ``entry``'s ``main`` under ``python -I``.

    ``keep``: the environment is built from scratch (``env -i``, a fixed PATH, then only these variables when
    the caller set them); None: the caller's environment is kept, less LD_PRELOAD, LD_LIBRARY_PATH and
    LD_AUDIT. ``config`` (a config.toml path) is baked in as NVIDIA_CTK_CONFIG_FILE_PATH, winning over the
    caller's.
    """
    if keep is None:
        parts = [f"-u {variable}" for variable in LOADER_ENV]
        doc = (
            "# The caller's environment is kept (runc, and the hooks that inherit it, need it), less the\n"
            f"# dynamic loader's variables: {', '.join(LOADER_ENV)}."
        )
    else:
        parts = ["-i", f"PATH={shlex.quote(paths.FIXED_PATH)}"]
        doc = (
            "# The environment is built from scratch by `env -i`: a fixed PATH, then only the variables\n"
            "# named below, and those only when the caller set them. LD_PRELOAD, LD_LIBRARY_PATH,\n"
            "# PYTHONPATH and every other inherited variable are dropped."
        )
    if config is not None:
        parts.append(shlex.quote(f"{envvars.NVIDIA_CTK_CONFIG_FILE_PATH}={config}"))
    for variable in keep or ():
        if config is not None and variable == envvars.NVIDIA_CTK_CONFIG_FILE_PATH:
            continue
        parts.append(f'${{{variable}:+"{variable}=${variable}"}}')
    text = fill_template(
        "wrapper.sh.in",
        {
            "NAME": name,
            "VERSION": __version__,
            "ENVDOC": doc,
            "ENV": "".join(f"    {part} \\\n" for part in parts),
            "PYTHON": shlex.quote(python),
            "CODE": shlex.quote(f"from {entry} import main; raise SystemExit(main())"),
        },
    )
    return text.encode()


def check_python(options: InstallOptions) -> list[str]:
    """Refuse an interpreter that is not there or that imports another copy of ``hook`` (root ``/``); under
    another root, warn when it is not there yet (an image build or a DaemonSet may put it there later)."""
    if not os.path.isabs(options.python):
        raise InstallError(f"--python {options.python}: must be an absolute path")
    found = rooted(options.root, options.python)
    there = os.path.isfile(found) and os.access(found, os.X_OK)
    if options.root not in ("", "/"):
        return [] if there else [f"warning: no executable at {found} yet; the wrappers run {options.python}"]
    if not there:
        raise InstallError(f"--python {options.python}: no executable file there")
    import hook

    ours = os.path.dirname(os.path.realpath(hook.__file__))
    probe = "import hook, os, sys; sys.stdout.write(os.path.dirname(os.path.realpath(hook.__file__)))"
    proc = subprocess.run(
        [options.python, "-I", "-c", probe],
        env={"PATH": paths.FIXED_PATH},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0 or proc.stdout != ours:
        got = proc.stdout or "no hook package"
        raise InstallError(f"--python {options.python}: imports {got} under -I, not {ours}")
    return []


def plan(options: InstallOptions) -> tuple[list[PlannedFile], list[str]]:
    """Return the wrappers every engine gets (the NVIDIA alias with ``--as-nvidia-hook``) and their notes."""

    def wrapper(path: str, entry: str, keep: tuple[str, ...] | None) -> PlannedFile:
        data = build_wrapper(
            os.path.basename(path), entry, python=options.python, keep=keep, config=options.config
        )
        return PlannedFile(path, data, EXECUTABLE_MODE)

    notes: list[str] = []
    files = [
        wrapper(paths.HOOK_WRAPPER, HOOK_ENTRY, HOOK_KEEP_ENV),
        wrapper(paths.RUNTIME_WRAPPER, RUNTIME_ENTRY, RUNTIME_KEEP_ENV),
    ]
    if options.as_nvidia_hook:
        files.append(wrapper(paths.NVIDIA_HOOK_ALIAS, HOOK_ENTRY, HOOK_KEEP_ENV))
        notes.append(
            f"next: {paths.NVIDIA_HOOK_ALIAS} runs gpu-env-hook: `docker run --gpus` (and whatever else "
            "looks nvidia-container-runtime-hook up on a PATH with /usr/local/bin first) now uses it"
        )
    return files, notes
