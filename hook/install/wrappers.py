"""How the engines start our Python: the wrappers, the oci-hooks.d ``hook`` entry, and the runtime tree.

Every start runs the node's own copy of the package (``hook.install.tree``: ``/opt/gpu-env-hook/current``)
with a fixed interpreter, ``<python> -I -S -B -X utf8 -c <launch code>`` (``hook.launcher``), where
``<python>`` is the node's interpreter or, with ``--python tree``, the tree's own started through its loader
(``hook.launcher.python_command``: then nothing here needs the node's Python or C library, and only the
runtime and hook wrappers need a ``/bin/sh``):

* the **runtime wrapper** (``<engine>/gpu-env-runtime``, one per engine, POSIX sh): finds runc's command
  among its global flags and
  execs the real runtime directly for everything but ``create``/``run``; only those start Python, with the
  same runtime handed to the shim (``main(runtime=...)``: create and delete always reach one runtime), and
  ``GPU_ENV_HOOK_ENGINE`` set to its engine (the pod-binding engine of the hook the shim injects). It
  keeps the engine's environment (runc and hooks without an ``env`` read it), less the loader's variables.
* the **hook wrapper** (``gpu-env-hook``, and the ``--as-nvidia-hook`` alias): ``env -i`` and a fixed
  PATH plus the variables upstream reads to find its config (and the engine's name), because whoever runs
  it may hand it any environment (``docker --gpus`` gives the hook runc's own).
* the **oci-hooks.d entry**: no wrapper at all — the runtime starts the interpreter directly with the
  entry's own ``env`` (a fixed PATH, ``GPU_ENV_HOOK_ENGINE``, the config), which is the whole environment
  runc gives a hook with an ``env``; and the OCI ``timeout``.
"""

import os
import shlex
from typing import Any

from hook import __version__
from hook.install.common import (
    CONFIG_MODE,
    EXECUTABLE_MODE,
    InstallError,
    InstallOptions,
    PlannedFile,
    check_trusted,
    fill_template,
)
from hook.install.rootfs import NodeRoot
from hook.launcher import PYTHON_FLAGS, build_code, literal, python_command
from hook.util import envvars, paths
from hook.util.safetext import escape

HOOK_ENTRY = "hook.__main__"
RUNTIME_ENTRY = "hook.stages.shim"
# Variables the hook wrapper lets through from its caller (when non-empty); all others are dropped: the two
# upstream reads to find its config, and the engine's name (the oci-hooks.d entries of older installs, and
# engines that set it for the runtime, like CRI-O's monitor_env).
HOOK_KEEP_ENV = (envvars.NVIDIA_CTK_CONFIG_FILE_PATH, envvars.XDG_CONFIG_HOME, envvars.GPU_ENV_HOOK_ENGINE)
LOADER_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")
LOOP_MESSAGE = (
    "refusing to run: the runtime it executed started it again (a loop); set the real runtime (runc, crun) "
    "with `install --runtime PATH` or [gpu-env-runtime] runtime"
)


def value_flags_pattern() -> str:
    """Return the sh ``case`` pattern of runc's and crun's global flags that take a value (``--root DIR``;
    the ``--root=DIR`` form needs none), one or two dashes, from the shim's own list."""
    from hook.stages.shim import GLOBAL_VALUE_FLAGS

    return " | ".join(f"-{flag} | --{flag}" for flag in sorted(GLOBAL_VALUE_FLAGS))


def build_runtime_wrapper(
    *, python: str, runtime: str, engine: str, tree: str = paths.RUNTIME_TREE, config: str | None = None
) -> bytes:
    """Build ``engine``'s runtime wrapper: ``runtime`` (a node path, or a name looked up on the fixed PATH
    at each call) for every command, the shim (handed the same runtime, and the engine's name in
    GPU_ENV_HOOK_ENGINE, which the hook it injects inherits) for ``create`` and ``run``."""
    call = f"runtime={literal(runtime)}"
    exported = {envvars.GPU_ENV_HOOK_ENGINE: engine}
    if config is not None:
        exported[envvars.NVIDIA_CTK_CONFIG_FILE_PATH] = config
    exports = "".join(f"{name}={shlex.quote(value)}\nexport {name}\n" for name, value in exported.items())
    text = fill_template(
        "runtime.sh.in",
        {
            "NAME": paths.RUNTIME_WRAPPER_NAME,
            "VERSION": __version__,
            "RUNTIME": escape(runtime),  # in a comment: a newline must not end it
            "RUNTIME_QUOTED": shlex.quote(runtime),
            "PYTHON": shlex.quote(python_command(python, tree)[0]),
            "COMMAND": shlex.join(python_command(python, tree)),
            "SEARCH": " ".join(shlex.quote(directory) for directory in paths.FIXED_PATH.split(":")),
            "LOOP": LOOP_MESSAGE.replace("'", ""),
            "VALUE_FLAGS": value_flags_pattern(),
            "EXPORTS": exports,
            "CODE": shlex.quote(build_code(RUNTIME_ENTRY, "gpu-env-runtime", tree=tree, call=call)),
        },
    )
    return text.encode()


def build_hook_wrapper(
    name: str, *, python: str, tree: str = paths.RUNTIME_TREE, config: str | None = None
) -> bytes:
    """Build the hook wrapper: an empty environment but a fixed PATH and the kept variables (``config``, a
    config.toml node path, baked in as NVIDIA_CTK_CONFIG_FILE_PATH and winning over the caller's)."""
    parts = [f"PATH={shlex.quote(paths.FIXED_PATH)}"]
    if config is not None:
        parts.append(shlex.quote(f"{envvars.NVIDIA_CTK_CONFIG_FILE_PATH}={config}"))
    for variable in HOOK_KEEP_ENV:
        if config is not None and variable == envvars.NVIDIA_CTK_CONFIG_FILE_PATH:
            continue
        parts.append(f'${{{variable}:+"{variable}=${variable}"}}')
    text = fill_template(
        "wrapper.sh.in",
        {
            "NAME": name,
            "VERSION": __version__,
            "TREE": tree,
            "ENV": "".join(f"    {part} \\\n" for part in parts),
            "COMMAND": shlex.join(python_command(python, tree)),
            "CODE": shlex.quote(build_code(HOOK_ENTRY, "gpu-env-hook", tree=tree)),
        },
    )
    return text.encode()


def build_hook_entry(
    stage: str,
    *,
    python: str,
    engine: str,
    timeout: int,
    tree: str = paths.RUNTIME_TREE,
    config: str | None = None,
) -> dict[str, Any]:
    """Build the oci-hooks.d ``hook`` entry that starts the hook at ``stage``: the interpreter itself running
    the launch script (``build_launch_script``), the refusal log named in the argv (podman shows a failing
    hook's argv and exit status, never its stderr), a fixed environment (PATH, the engine, the config) and
    the OCI ``timeout``."""
    env = [f"PATH={paths.FIXED_PATH}", f"{envvars.GPU_ENV_HOOK_ENGINE}={engine}"]
    if config is not None:
        env.append(f"{envvars.NVIDIA_CTK_CONFIG_FILE_PATH}={config}")
    command = python_command(python, tree)
    args = [*command, *PYTHON_FLAGS, paths.LAUNCH_SCRIPT, "-refusal-log", paths.REFUSAL_LOG, stage]
    return {"path": command[0], "args": args, "env": env, "timeout": timeout}


def build_launch_script(tree: str = paths.RUNTIME_TREE) -> bytes:
    """Build the launch script the oci-hooks.d entries run: the launch code (``hook.launcher``) as a file, so
    that the argv stays short (with ``-I`` the script's directory is not on ``sys.path``; the code puts the
    tree's ``lib`` there itself)."""
    return build_code(HOOK_ENTRY, "gpu-env-hook", tree=tree).encode()


def check_runtime(node: NodeRoot, runtime: str, root: str) -> list[str]:
    """Refuse a runtime that is the shim itself: the same file as the runtime wrapper, or (on this node,
    root ``/``) one that answers the shim's probe (a script leading back to it). A runtime that is not there
    is refused on ``/`` and a warning under another root (an image build may add it later)."""
    import stat

    found = node.stat(runtime)
    if found is None or not stat.S_ISREG(found.st_mode) or not found.st_mode & 0o111:
        if root not in ("", "/"):
            return [
                f"warning: no executable at {node.show(runtime)} yet; the runtime wrapper execs {runtime}"
            ]
        raise InstallError(f"--runtime {runtime}: no executable file at {node.show(runtime)}")
    check_trusted("--runtime", runtime, root)
    for wrapper in paths.RUNTIME_WRAPPERS:
        own = node.stat(wrapper)
        if own is not None and (own.st_dev, own.st_ino) == (found.st_dev, found.st_ino):
            raise InstallError(f"--runtime {runtime}: that is a runtime wrapper itself; give runc or crun")
    if root in ("", "/"):
        from hook.stages.shim import probe_is_shim

        if probe_is_shim(runtime, {"PATH": paths.FIXED_PATH}):
            raise InstallError(f"--runtime {runtime}: it leads back to gpu-env-runtime; give runc or crun")
    return []


def plan(options: InstallOptions, *, runtime: str) -> tuple[list[PlannedFile], list[str]]:
    """Return the wrappers every engine gets (the NVIDIA alias with ``--as-nvidia-hook``) and their notes."""

    def hook_wrapper(path: str) -> PlannedFile:
        data = build_hook_wrapper(os.path.basename(path), python=options.python, config=options.config)
        return PlannedFile(path, data, EXECUTABLE_MODE)

    notes: list[str] = []
    runtime_data = build_runtime_wrapper(
        python=options.python, runtime=runtime, engine=options.engine, config=options.config
    )
    files = [
        hook_wrapper(paths.HOOK_WRAPPER),
        PlannedFile(paths.runtime_wrapper(options.engine), runtime_data, EXECUTABLE_MODE),
        PlannedFile(paths.LAUNCH_SCRIPT, build_launch_script(), CONFIG_MODE),
    ]
    if options.as_nvidia_hook:
        files.append(hook_wrapper(paths.NVIDIA_HOOK_ALIAS))
        notes.append(
            f"{paths.NVIDIA_HOOK_ALIAS} runs gpu-env-hook: whatever looks nvidia-container-runtime-hook up "
            "on a PATH with /usr/local/bin first uses it (dockerd for `docker run --gpus`, once it restarts)"
        )
    return files, notes
