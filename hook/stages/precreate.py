"""podman's precreate stage: the proposed config.json on stdin, the same with the env file merged on stdout.

podman runs precreate hooks (oci-hooks.d, ``"stages": ["precreate"]``) before it hands the spec to the
runtime, so the variables reach the container process, which a prestart hook cannot do. Nothing but
``process.env`` changes, and the args of our own prestart hook that podman already put in the spec get the
env-file decision (``hook.pipeline.handoff``: the hook never reads the file again); a spec that names no env
file goes back byte for byte. A refusal raises (the entry point prints the one line and exits non-zero) before
anything is written, so podman gets no config.
"""

from hook.pipeline.bundle import (
    check_spec,
    dump_spec,
    parse_spec,
    process_env,
    set_process_env,
    spec_annotations,
)
from hook.pipeline.configfile import config_mentions, find_config_path, load_config_text
from hook.pipeline.specenv import merge_spec_env, spec_may_matter
from hook.util.envvars import GPU_ENV_HOOK_ENGINE
from hook.util.errors import os_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import BinaryIO

    from hook.stages.prestart import Options


def resolve_precreate(
    raw: bytes, config_text: str | None, *, source: str | None, engine: str | None = None
) -> bytes:
    """Return the config to give podman: ``raw`` itself unless the env file changes ``process.env`` or, in
    CDI mode (``[gpu-env] device-mode = "cdi"``), the requested devices' CDI edits change it."""
    if not spec_may_matter(raw, config_text, gpu=config_mentions(config_text, ("device-mode",))):
        return raw
    document = parse_spec(raw)
    check_spec(document)

    from hook.pipeline.config import parse_config

    settings = parse_config(config_text, source=source, engine=engine)
    env_file, entries = merge_spec_env(document, spec_annotations(document), settings.env_file)
    edited = (
        document
        if env_file is None or entries == process_env(document)
        else set_process_env(document, entries)
    )
    if settings.device_mode == "cdi":  # the devices' CDI edits, before the runtime reads the spec
        from hook.pipeline.cdidevices import resolve_cdi_spec

        edited = resolve_cdi_spec(edited, settings, env_file) or edited
    # podman has already put the oci-hooks.d prestart hooks in the spec: tell ours what was merged, so that
    # it never reads the env file a second time (a rewrite in between would mix two versions).
    from hook.pipeline.handoff import build_handoff, hand_off_to_our_hooks, has_our_hook

    if has_our_hook(document):
        pinned = env_file.pinned if env_file is not None else None
        names = list(env_file.values) if env_file is not None else []
        edited = hand_off_to_our_hooks(edited, build_handoff(pinned, names))
    return raw if edited is document else dump_spec(edited, "the proposed spec")


def load_proposed_spec(stdin: "BinaryIO") -> bytes:
    """Read the proposed config.json from stdin, whatever its size (the runtime would run it)."""
    try:
        return stdin.read()
    except OSError as err:
        raise os_error("read the proposed spec from", "stdin", err) from None


def run_precreate(
    options: "Options", stdin: "BinaryIO", stdout: "BinaryIO", environ: "dict[str, str] | os._Environ[str]"
) -> int:
    """The precreate stage: read the spec, decide, and only then write the result to stdout."""
    config_path, required = find_config_path(options.config, environ)
    config_text = load_config_text(config_path, required=required)
    raw = load_proposed_spec(stdin)
    source = config_path if config_text is not None else None
    result = resolve_precreate(raw, config_text, source=source, engine=environ.get(GPU_ENV_HOOK_ENGINE))
    try:
        stdout.write(result)
        stdout.flush()
    except OSError as err:
        raise os_error("write the spec to", "stdout", err) from None
    return 0
