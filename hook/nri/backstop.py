"""``gpu-env-hook nri-backstop``: the OCI hook that keeps an env-file container from running unhandled.

NRI creates a container without any adjustment while no plugin is connected (not started yet, restarting,
dropped after a timeout). The plugin removes the variable naming the env file from every container it
handles, so a container whose config.json still names a file was not handled: this hook, installed for
every container of the runtime (containerd's ``base_runtime_spec``), refuses it in one line and the
runtime never starts it. Any other container passes at the cost of reading config.json: without the
variable's name in its bytes, it is not even decoded.
"""

from hook.util.errors import EnvFileError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import BinaryIO


def backstop_entry(command: list[str], config_path: str | None, lib: str) -> dict[str, object]:
    """The backstop's OCI hook entry, started as our prestart hook is
    (``hook.stages.shim.build_hook_entry``)."""
    from hook.stages.shim import build_hook_entry

    entry = build_hook_entry(command, config_path, {}, lib=lib)
    args = entry["args"]
    assert isinstance(args, list)  # noqa: S101 - build_hook_entry builds a list
    return {**entry, "args": [*args[:-1], "nri-backstop"]}


def run_backstop(stdin: "BinaryIO", environ: "dict[str, str] | os._Environ[str]", config: str | None) -> int:
    """Refuse a container that names an env file the NRI plugin did not handle; 0 for any other."""
    from hook.pipeline.bundle import check_spec, load_state, parse_env, parse_spec, process_env, spec_path
    from hook.pipeline.configfile import find_config_path, load_config_text
    from hook.pipeline.specenv import spec_may_matter

    state = load_state(stdin)
    config_path, required = find_config_path(config, environ)
    config_text = load_config_text(config_path, required=required)
    path = spec_path(state.bundle)
    with open(path, "rb") as fh:
        raw = fh.read()
    if not spec_may_matter(raw, config_text, gpu=False):
        return 0
    document = parse_spec(raw)
    check_spec(document)
    from hook.pipeline.config import parse_config

    variable = parse_config(config_text, source=config_path).env_file.variable
    named = parse_env(process_env(document)).get(variable)
    if not named:
        return 0
    from hook.util.beneath import show_path

    raise EnvFileError(
        f"env file {show_path(named)}: not handled by the NRI plugin (is `gpu-env-hook nri` running?); "
        "the container is not started without its variables"
    )
