"""containerd: a conf.d drop-in registering the runtime handler, in the main config's version."""

from __future__ import annotations

import fnmatch
import os

from hook import __version__, paths
from hook.install.common import (
    CONFIG_MODE,
    EnginePlan,
    InstallError,
    InstallOptions,
    PlannedFile,
    fill_template,
    read_file,
    rooted,
    toml_key,
    toml_string,
)

CONTAINERD_IMPORT = paths.CONTAINERD_DROPIN_DIR + "/*.toml"


def build_containerd_dropin(version: int) -> bytes:
    """Build the containerd drop-in registering the runtime wrapper as handler RUNTIME_HANDLER."""
    values = {
        "VERSION": __version__,
        "HANDLER": toml_key(paths.RUNTIME_HANDLER),
        "RUNTIME": toml_string(paths.RUNTIME_WRAPPER),
    }
    return fill_template(f"containerd-v{version}.toml.in", values).encode()


def resolve_containerd_version(main_config: str | None, where: str) -> int:
    """Return the config version the drop-in should use: 3 when the main config is version 3, else 2."""
    if main_config is None:
        return 2
    import tomllib

    try:
        version = tomllib.loads(main_config).get("version", 2)
    except tomllib.TOMLDecodeError as err:
        raise InstallError(f"{where}: not valid TOML ({err}); fix it first") from None
    return 3 if version == 3 else 2


def containerd_imports_dropin(main_config: str | None) -> bool:
    """Tell whether the main containerd config's ``imports`` already reads our drop-in."""
    if main_config is None:
        return False
    import tomllib

    try:
        imports = tomllib.loads(main_config).get("imports", [])
    except tomllib.TOMLDecodeError:
        return False
    dropin = paths.CONTAINERD_DROPIN_DIR + "/" + paths.CONTAINERD_DROPIN_NAME
    return isinstance(imports, list) and any(
        isinstance(pattern, str) and fnmatch.fnmatchcase(dropin, pattern) for pattern in imports
    )


def plan(options: InstallOptions) -> EnginePlan:
    """Return the drop-in for the node's main config, and what the user must do next."""
    main_config_bytes = read_file(rooted(options.root, paths.CONTAINERD_CONFIG))
    main_config = main_config_bytes.decode("utf-8", "replace") if main_config_bytes is not None else None
    version = options.containerd_config_version or resolve_containerd_version(
        main_config, rooted(options.root, paths.CONTAINERD_CONFIG)
    )
    path = os.path.join(paths.CONTAINERD_DROPIN_DIR, paths.CONTAINERD_DROPIN_NAME)
    notes = []
    if not containerd_imports_dropin(main_config):
        notes.append(
            f"next: add this line at the top of {paths.CONTAINERD_CONFIG} (containerd reads drop-ins "
            f"only through it): imports = [{toml_string(CONTAINERD_IMPORT)}]"
        )
    notes.append(
        f"next: restart containerd (systemctl restart containerd) to load the runtime handler "
        f"{paths.RUNTIME_HANDLER!r} (config version {version}); pods select it with a RuntimeClass "
        f"whose handler is {paths.RUNTIME_HANDLER!r}"
    )
    return EnginePlan((PlannedFile(path, build_containerd_dropin(version), CONFIG_MODE),), tuple(notes))
