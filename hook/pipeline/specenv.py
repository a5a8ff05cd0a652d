"""The env file merged into a proposed config.json before the runtime reads it (shim and precreate).

A prestart hook runs after the runtime has read ``process.env``, so only a step before the runtime (the
``gpu-env-runtime`` shim, podman's precreate hook) can give the container process the file's variables.
Both decide here, with the same checks the hook applies (``hook.pipeline.envfile``).
"""

from hook.pipeline.bundle import parse_env, process_env
from hook.pipeline.configfile import config_may_select
from hook.util import envvars
from hook.util.paths import DEVICE_LIST_ROOT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.pipeline.config import EnvFileSettings
    from hook.pipeline.envfile import EnvFile

# Bytes without which a config.json can name no env file under the default variable. ``\u`` because a JSON
# key may spell a letter as an escape.
ENV_FILE_MARKERS = (envvars.NVIDIA_ENV_FROM_FILE.encode(), b"\\u")
# ... nor ask for a GPU (the names ``prestart.may_request_gpu`` looks at).
GPU_MARKERS = (
    envvars.NVIDIA_VISIBLE_DEVICES.encode(),
    envvars.CUDA_VERSION.encode(),
    DEVICE_LIST_ROOT.rsplit("/", 1)[1].encode(),
)


def spec_may_matter(raw: bytes, config_text: str | None, *, gpu: bool) -> bool:
    """Tell, without decoding it, whether config.json could name an env file (or, with ``gpu``, a GPU).

    False means: pass the spec on untouched. A config that may rename the variable always says True.
    """
    markers = ENV_FILE_MARKERS + GPU_MARKERS if gpu else ENV_FILE_MARKERS
    return any(marker in raw for marker in markers) or config_may_select(config_text)


def merge_spec_env(
    document: dict[str, object], annotations: dict[str, str], settings: "EnvFileSettings"
) -> "tuple[EnvFile | None, list[str]]":
    """Resolve the env file a checked spec names; return it and ``process.env`` with it merged.

    The entries come back unchanged (and the file as None) when the spec names none, or a missing one
    that the configuration ignores. A refused file raises ``EnvFileError``.
    """
    entries = process_env(document)
    env = parse_env(entries)
    if not env.get(settings.variable):  # names no file: the env-file code stays unloaded
        return None, entries
    from hook.pipeline.envfile import merge_env, resolve_env_file

    env_file = resolve_env_file(env, annotations, settings)
    if env_file is None:
        return None, entries
    return env_file, merge_env(entries, env_file.values)
