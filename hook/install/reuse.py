"""``install`` again: the options of the last install (its record, the manifest) are reused unless given.

An upgrade is ``install`` again with the new version. Each option the install record holds and the command
line does not give keeps its recorded value (``--precreate`` stays on; ``--no-precreate`` turns it off), and
install says, before its report, each option it kept and each it changed, so a forgotten flag never silently
removes a hook.
"""

from typing import Any

from hook.install.common import InstallOptions
from hook.install.manifest import load_manifest
from hook.install.rootfs import check_root

# The options the record keeps (InstallOptions field names; the flag is --NAME with - for _).
RECORDED = (
    "python",
    "config",
    "as_nvidia_hook",
    "precreate",
    "hooks_dir",
    "containerd_config",
    "containerd_config_version",
    "runtime",
    "nri",
    "containerd_binary",
    "nri_unit",
)
_DEFAULTS = InstallOptions(engine="", python="")


def flag(name: str, value: Any) -> str:
    """Return the command-line form of one option's value (``--precreate``, ``--no-precreate``, ``--x V``)."""
    option = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return option if value else option.replace("--", "--no-", 1)
    return f"{option} {value}" if value is not None else f"{option} (none)"


def resolve_options(
    engine: str, root: str, given: dict[str, Any], default_python: str
) -> tuple[InstallOptions, list[str]]:
    """Return the options for ``install --engine engine``: each ``given`` one (None: not given), else the
    one in the install record under ``root``, else the default; and a line for each option kept from the
    record that is not the default, and for each given one that changes the record."""
    check_root(root)
    record = load_manifest(root, engine)
    recorded: dict[str, Any] = (record or {}).get("options", {})
    defaults = {name: getattr(_DEFAULTS, name) for name in RECORDED} | {"python": default_python}
    chosen: dict[str, Any] = {}
    lines: list[str] = []
    for name in RECORDED:
        value = given.get(name)
        if value is not None:
            chosen[name] = value
            if name in recorded and recorded[name] != value:
                lines.append(
                    f"changed {flag(name, recorded[name])} of the last install to {flag(name, value)}"
                )
        elif name in recorded:
            chosen[name] = recorded[name]
            if recorded[name] != defaults[name]:
                value = recorded[name]
                change = flag(name, not value) if isinstance(value, bool) else flag(name, "VALUE")
                lines.append(f"kept {flag(name, value)} from the last install ({change} changes it)")
        else:
            chosen[name] = defaults[name]
    return InstallOptions(engine=engine, root=root, **chosen), lines
