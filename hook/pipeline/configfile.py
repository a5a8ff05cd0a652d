"""config.toml's location, text and TOML: found the way upstream finds it, and read as TOML in one place.

Kept apart from ``hook.pipeline.config`` (defaults, validation, typed settings) so that a stage can locate
and read the file, and tell whether it could matter, without importing ``typing`` or ``tomllib``.
``read_toml`` is the one reader of the file's TOML: ``hook.pipeline.config`` builds ``Settings`` from it,
and the two stage shortcuts (``config_may_select``, the shim's runtime keys) read their keys from it too.
"""

from hook.util import envvars, paths
from hook.util.errors import ConfigError
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import Any

SYSTEM_CONFIG = "/etc/nvidia-container-runtime/config.toml"
CONFIG_ERROR_PREFIX = "error getting hook config: failed to load config: "
_PREFIX = CONFIG_ERROR_PREFIX
# Words that, outside a comment line, may change which variables select GPUs or name the env file (a TOML
# escape can spell any key): without one, the hot path need not parse the file to know.
SELECTION_MARKERS = ("swarm-resource", "variable", "\\")
# The engines install knows (each has its install record, hook.util.paths.install_record), and those of them
# whose pods are Kubernetes pods.
INSTALL_ENGINES = ("podman", "crio", "containerd", "docker")
KUBERNETES_ENGINES = ("containerd", "crio")
# `[nvidia-container-runtime] runtimes` when the file does not set it (default_settings uses this): here so
# that the runtime shim, which needs only this key, can start without importing hook.pipeline.config.
DEFAULT_RUNTIMES = ("runc", "crun")


def find_config_path(flag: str | None, environ: "dict[str, str] | os._Environ[str]") -> tuple[str, bool]:
    """Return the config path upstream would use and whether it is required to exist."""
    if flag:
        return flag, True
    explicit = environ.get(envvars.NVIDIA_CTK_CONFIG_FILE_PATH, "")
    if explicit:
        return explicit, True
    xdg = environ.get(envvars.XDG_CONFIG_HOME, "")
    if xdg:
        return paths.join(xdg, "nvidia-container-runtime", "config.toml"), False
    return SYSTEM_CONFIG, False


def installed_engines(root: str = "/") -> tuple[str, ...]:
    """Return the engines ``install`` recorded on the node whose ``/`` is ``root`` (their install record is
    there), in the order install knows them."""
    found = []
    for engine in INSTALL_ENGINES:
        record = paths.install_record(engine)
        if paths.isfile(record if root in ("", "/") else paths.join(root, record.lstrip("/"))):
            found.append(engine)
    return tuple(found)


def resolve_node_engine(
    engine: str | None, environ: "dict[str, str] | os._Environ[str]", root: str = "/"
) -> str | None:
    """Return the engine the installed hook runs for, as the commands for people take it: ``engine`` (their
    ``--engine``), else ``GPU_ENV_HOOK_ENGINE`` (what the installed wrappers set), else the engine whose
    install record is on the node — of several, the one Kubernetes engine (containerd or CRI-O) among them.
    None when that does not decide (no install, or several alike)."""
    chosen = engine or environ.get(envvars.GPU_ENV_HOOK_ENGINE)
    if chosen:
        return chosen
    installed = installed_engines(root)
    kubernetes = [name for name in installed if name in KUBERNETES_ENGINES]
    if len(installed) == 1:
        return installed[0]
    return kubernetes[0] if len(kubernetes) == 1 else None


def config_mentions(text: str | None, markers: tuple[str, ...] = SELECTION_MARKERS) -> bool:
    """Tell whether a line of config.toml that is not a comment mentions one of ``markers`` (pure, no TOML).

    With the default markers: whether the file could change which variables name GPUs or the env file.
    """
    if text is None:
        return False
    return any(
        not line.lstrip().startswith("#") and any(marker in line for marker in markers)
        for line in text.splitlines()
    )


def config_may_select(text: str | None) -> bool:
    """Tell whether config.toml could change which variables name GPUs or the env file (then parse it).

    True when a non-comment line mentions swarm-resource, ``variable`` or a TOML escape and the file is not
    valid TOML; for valid TOML (``read_toml``) only a non-empty
    ``swarm-resource`` or an ``[env-file] variable`` other than the default counts — so the file
    ``gpu-env-hook config default`` writes does not make every container parse it. A value of the wrong
    type counts too, so that parsing reports it.
    """
    if not config_mentions(text):
        return False
    assert text is not None  # noqa: S101 - config_mentions is False for None
    try:
        document = read_toml(text, "<config>")
    except ConfigError:
        return True  # parsing it reports the error, with the file's path
    env_file = document.get("env-file")
    variable = env_file.get("variable", envvars.NVIDIA_ENV_FROM_FILE) if isinstance(env_file, dict) else None
    return document.get("swarm-resource", "") != "" or (
        env_file is not None and variable != envvars.NVIDIA_ENV_FROM_FILE
    )


def load_config_text(path: str, *, required: bool) -> str | None:
    """Read the config file's text; ``None`` when an optional file does not exist."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        if required:
            raise ConfigError(
                f"{_PREFIX}couldn't open required configuration file {path}: file does not exist"
            ) from None
        return None
    except OSError as err:
        raise ConfigError(f"{_PREFIX}couldn't open configuration file {path}: {os_reason(err)}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{_PREFIX}{path}: the file is not valid UTF-8") from None


def read_toml(text: str, where: str) -> "dict[str, Any]":
    """Read config.toml's TOML: its plain subset without tomllib (``hook.util.tomlsubset``: most files, at a
    fraction of tomllib's import, which pulls in ``typing``), else tomllib. Invalid TOML is a ConfigError
    naming ``where``."""
    from hook.util.tomlsubset import parse_toml_subset

    document = parse_toml_subset(text)
    if document is not None:
        return document
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{_PREFIX}{where}: invalid TOML: {err}") from None
