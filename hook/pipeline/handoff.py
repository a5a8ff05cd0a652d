"""The shim's env-file decision, handed to the hook it injects: one read of the env file per container.

The shim reads the env file once, checks it (location, owner, mode, keys, pod pin) and merges it into
``process.env`` before the runtime reads config.json. Were the hook to read the file again, a device plugin
rewriting it in between would give the container process one version and the GPUs of another. So the shim
puts its decision in the args of our hook entry (``-env-file-merged=...``), which no container can write: the
hook then takes the variables from ``process.env`` as the shim merged them and never opens the file.

The value is ``none`` (the spec names no file, or a missing one that is ignored), or ``pinned:`` /
``unpinned:`` followed by the comma-separated names the file set (variables, never values). A pinned file's
names are the ones the unprivileged check trusts, exactly as when the hook reads the file itself.
"""

from hook.util import paths
from hook.util.errors import EnvFileError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.pipeline.envfile import EnvFile

FLAG = "env-file-merged"
NONE = "none"
PINNED = "pinned"
UNPINNED = "unpinned"
HOOK_COMMANDS = ("prestart", "createRuntime")


class Handoff:
    """The shim's decision: whether a file was merged, whether it was pinned, and the names it set."""

    __slots__ = ("names", "pinned")

    def __init__(self, *, pinned: bool, names: tuple[str, ...]) -> None:
        self.pinned = pinned
        self.names = names


def build_handoff(pinned: bool | None, names: list[str] | tuple[str, ...]) -> str:
    """Return the flag's value: ``none`` when no file was merged (``pinned`` None), else the pin and names."""
    if pinned is None:
        return NONE
    return f"{PINNED if pinned else UNPINNED}:{','.join(names)}"


def parse_handoff(text: str) -> Handoff | None:
    """Decode the flag's value (None for ``none``); anything else than what the shim writes is refused."""
    if text == NONE:
        return None
    kind, sep, listed = text.partition(":")
    names = tuple(listed.split(",")) if listed else ()
    if not sep or kind not in (PINNED, UNPINNED) or not all(_is_name(name) for name in names):
        raise EnvFileError(f"-{FLAG}: expected none, pinned:NAMES or unpinned:NAMES (names of variables)")
    return Handoff(pinned=kind == PINNED, names=names)


def _is_name(name: str) -> bool:
    """Tell whether ``name`` is an environment variable name ``[A-Za-z_][A-Za-z0-9_]*``."""
    return name.isascii() and (name[:1].isalpha() or name[:1] == "_") and name.replace("_", "a").isalnum()


def add_handoff(args: list[object], value: str) -> list[object] | None:
    """Return a hook entry's args with ``-env-file-merged=<value>`` just before its command word (replacing
    one already there); None when the args name no prestart/createRuntime command."""
    kept = [arg for arg in args if not (isinstance(arg, str) and arg.startswith((f"-{FLAG}=", f"--{FLAG}=")))]
    for index in range(len(kept) - 1, 0, -1):
        if kept[index] in HOOK_COMMANDS:
            return [*kept[:index], f"-{FLAG}={value}", *kept[index:]]
    return None


def take_handoff(value: str, env: dict[str, str], variable: str) -> "EnvFile | None":
    """Turn the shim's decision into the env file the hook acts on, with the values ``process.env`` holds
    (the shim merged them there); refused when a name the shim merged is no longer in ``process.env``."""
    from hook.pipeline.envfile import EnvFile
    from hook.util.beneath import show_path

    handoff = parse_handoff(value)
    if handoff is None:
        return None
    path = env.get(variable, "")
    for name in handoff.names:
        if name not in env:
            raise EnvFileError(
                f"env file {show_path(path)}: the runtime shim merged {name} into process.env but "
                "config.json no longer holds it (config.json was changed after the shim)"
            )
    return EnvFile(path=path, values={name: env[name] for name in handoff.names}, pinned=handoff.pinned)


# The stages whose hooks can be a GPU hook (ours or NVIDIA's).
STAGES = ("prestart", "createRuntime")


# --- giving the decision to the hooks of ours in a spec (the shim, podman's precreate stage) ---------------


def stage_hooks(document: dict[str, object]) -> list[object]:
    """The entries of a spec's prestart and createRuntime hooks (the stages a GPU hook runs at)."""
    hooks = document.get("hooks")
    if not isinstance(hooks, dict):
        return []
    return [entry for stage in STAGES if isinstance(hooks.get(stage), list) for entry in hooks[stage]]


def has_our_hook(document: dict[str, object]) -> bool:
    """Tell whether a prestart or createRuntime hook runs our hook."""
    return any(map(is_our_hook, stage_hooks(document)))


def is_our_hook(entry: object) -> bool:
    """Tell whether a hook entry runs our hook (``gpu-env-hook``, ``-m hook`` or our launch code), which
    reads env files."""
    if not isinstance(entry, dict):
        return False
    path = entry.get("path")
    if isinstance(path, str) and paths.basename(path) == "gpu-env-hook":
        return True
    args = entry.get("args")
    if not isinstance(args, list):
        return False
    if any(args[i] == "-m" and args[i + 1] == "hook" for i in range(len(args) - 1)):
        return True
    if paths.LAUNCH_SCRIPT in args:  # the oci-hooks.d entries install writes
        return True
    from hook.launcher import is_launch_code

    return is_launch_code(args)


def with_handoff(entry: dict[str, object], handoff: str) -> dict[str, object]:
    """Return the hook entry with the shim's env-file decision in its args (as it is without a command)."""
    args = entry.get("args")
    marked = add_handoff(args, handoff) if isinstance(args, list) else None
    return entry if marked is None or marked == args else {**entry, "args": marked}


def hand_off_to_our_hooks(document: dict[str, object], handoff: str) -> dict[str, object]:
    """Return the spec with the decision given to every prestart/createRuntime hook of ours already there
    (an engine's oci-hooks.d entry); the same document when there is none."""
    hooks = document.get("hooks")
    if not isinstance(hooks, dict):
        return document
    changed: dict[str, object] = {}
    for stage in STAGES:
        entries = hooks.get(stage)
        if isinstance(entries, list) and any(is_our_hook(entry) for entry in entries):
            marked = [with_handoff(entry, handoff) if is_our_hook(entry) else entry for entry in entries]
            if marked != entries:
                changed[stage] = marked
    return {**document, "hooks": {**hooks, **changed}} if changed else document
