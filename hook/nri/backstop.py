"""``gpu-env-hook nri-backstop``: kept so that nodes set up by an earlier release keep working.

Earlier releases documented this OCI hook for containerd's ``base_runtime_spec`` (put there by hand): it
refuses a container whose config.json still names an env file, which the NRI plugin sets empty in every
container it handles. The env-file guard (a CDI device whose mount the plugin removes, ``hook.install.guard``)
replaces it and costs no process, but a base spec still naming this command must not start failing every
container on an upgrade: it keeps refusing only what it refused, and passes every other container at the
cost of reading config.json (not even decoded without the variable's name in its bytes). Take it out of the
base spec (docs/upgrading.md).
"""

from hook.util.errors import EnvFileError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import BinaryIO


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
