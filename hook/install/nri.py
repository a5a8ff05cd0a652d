"""``install --engine containerd --nri``: register the NRI plugin (docs/nri.md) on a containerd node.

Three parts, all decided before anything is written:

* the containerd version, from ``containerd --version`` (``--containerd-binary``, else ``containerd`` on the
  node's fixed PATH beneath the root): NRI exists from 1.7 on; an older containerd is refused in one line;
* NRI switched on in containerd's config where it is off: containerd 1.7 has it off by default, so a config
  with no ``[plugins."io.containerd.nri.v1.nri"]`` table gets ``disable = false`` in install's own block (or
  drop-in), which uninstall takes out byte for byte; 2.x has it on by default and is left alone unless a
  config turns it off, where install's drop-in (merged per key) switches it back on. A config that turns NRI
  off itself where install appends a block is refused: install never rewrites a table the node wrote;
* a systemd unit that runs the plugin (``Restart=always``), written but not started. The plugin needs
  protobuf, so the unit runs the interpreter of the environment install was run from (the pip-installed
  one, ``nri_python``), not the engines' ``-S`` wrappers. The unit is CRI-O's too (``install --engine crio
  --nri``, ``hook.install.crio``: after crio.service, on the socket CRI-O's ``nri_listen`` names).

An env-file container never runs without the plugin through the env-file guard (``hook.install.guard``),
which install writes for containerd whether or not ``--nri`` is given.
"""

import os
import re
import subprocess
from typing import Any

from hook.install.common import CONFIG_MODE, InstallError, InstallOptions, PlannedFile, check_trusted, rooted
from hook.install.rootfs import NodeRoot
from hook.util import paths

NRI_PLUGIN = "io.containerd.nri.v1.nri"
UNIT_NAME = "gpu-env-hook-nri"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}.service"
# What `systemctl enable` makes for the unit (its WantedBy): while it is there, uninstall leaves the unit.
UNIT_WANTS = f"/etc/systemd/system/multi-user.target.wants/{UNIT_NAME}.service"
MINIMUM = (1, 7)
# Version 2 on from containerd 1.7's NRI: version 1 names plugins differently.
MINIMUM_CONFIG_VERSION = 2
VERSION_TIMEOUT = 10.0
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
# What a unit's ExecStart may hold unquoted (systemd expands %, $ and splits on spaces).
_PLAIN_PATH = re.compile(r"^/[A-Za-z0-9/._+-]+$")


def parse_version(output: str) -> tuple[int, int] | None:
    """Return (major, minor) from ``containerd --version`` (``containerd <module> <version> <revision>``)."""
    fields = output.split()
    match = _VERSION.match(fields[2]) if len(fields) >= 3 and fields[0] == "containerd" else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def find_binary(options: InstallOptions) -> str:
    """Return the containerd binary (node path): ``--containerd-binary``, else the first on the fixed PATH."""
    if options.containerd_binary is not None:
        if not os.path.isabs(options.containerd_binary):
            raise InstallError(f"--containerd-binary {options.containerd_binary}: must be an absolute path")
        return options.containerd_binary
    for directory in paths.FIXED_PATH.split(":"):
        candidate = os.path.join(directory, "containerd")
        if os.access(rooted(options.root, candidate), os.X_OK):
            return candidate
    raise InstallError(
        f"--nri: no containerd on the node's PATH beneath {options.root}; give --containerd-binary PATH"
    )


# What ``--no-nri-unit`` (the NRI DaemonSet, which is for containerd 2.0 and later) takes a node whose
# containerd is not on the fixed PATH for (k3s and RKE2 keep theirs elsewhere).
DAEMONSET_MINIMUM = (2, 0)


def containerd_version(options: InstallOptions) -> tuple[int, int]:
    """Run ``containerd --version`` and return (major, minor); refuse what has no NRI (before 1.7). With
    ``--no-nri-unit`` and no containerd found, containerd 2.0 (``DAEMONSET_MINIMUM``)."""
    if not options.nri_unit and options.containerd_binary is None:
        try:
            find_binary(options)
        except InstallError:
            return DAEMONSET_MINIMUM
    binary = find_binary(options)
    where = rooted(options.root, binary)
    try:
        done = subprocess.run(
            [where, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise InstallError(f"--nri: cannot run {where} --version ({type(err).__name__})") from None
    version = parse_version(done.stdout) if done.returncode == 0 else None
    if version is None:
        raise InstallError(f"--nri: {where} --version did not name a containerd version")
    if version < MINIMUM:
        raise InstallError(
            f"--nri: containerd {version[0]}.{version[1]} has no NRI (it came in 1.7); "
            "upgrade containerd, or use the runtime handler alone (install without --nri)"
        )
    return version


def nri_tables(
    version: tuple[int, int],
    config_version: int,
    effective: dict[str, Any],
    own_tables: list[str],
    *,
    dropin: bool = False,
) -> tuple[tuple[tuple[str, ...], dict[str, Any]], ...]:
    """Return the table install adds to switch NRI on (none when it is on already).

    ``effective``: the config containerd runs with; ``own_tables``: the files that have an NRI table;
    ``dropin``: install writes a drop-in merged per key (containerd 2.x), which can switch a table the node
    wrote back on (the whole table, every other key as it was, so the merged config keeps them)."""
    if config_version < MINIMUM_CONFIG_VERSION:
        raise InstallError(
            f"--nri: containerd config version {config_version} names plugins by short names; migrate it "
            "to version 2 first (containerd config migrate)"
        )
    plugins = effective.get("plugins")
    table = plugins.get(NRI_PLUGIN) if isinstance(plugins, dict) else None
    table = table if isinstance(table, dict) else {}
    off_by_default = version < (2, 0)
    if table.get("disable", off_by_default) is not True:
        return ()
    if own_tables and dropin:
        return ((("plugins", NRI_PLUGIN), {**table, "disable": False}),)
    if own_tables:
        raise InstallError(
            f'{own_tables[-1]}: [plugins."{NRI_PLUGIN}"] switches NRI off; set disable = false there, '
            "then install --nri"
        )
    return ((("plugins", NRI_PLUGIN), {"disable": False}),)


def build_unit(
    python: str, config: str | None, *, engine: str = "containerd", socket: str = paths.NRI_SOCKET
) -> bytes:
    """Return the systemd unit that runs the plugin from ``python`` (an environment with protobuf) on the
    NRI socket of ``engine`` (``containerd`` or ``crio``)."""
    for path in (python, socket, *([config] if config is not None else [])):
        if not _PLAIN_PATH.match(path):
            raise InstallError(
                f"--nri: {path!r} cannot be written unquoted in a systemd unit; use a plain path"
            )
    config_flag = f" -config {config}" if config is not None else ""
    text = (
        f"# gpu-env-hook: the NRI plugin (docs/nri.md); `gpu-env-hook uninstall --engine {engine}` "
        "removes this file.\n"
        "[Unit]\n"
        "Description=gpu-env-hook NRI plugin\n"
        f"After={engine}.service\n"
        "\n"
        "[Service]\n"
        f"ExecStart={python} -I -m hook{config_flag} nri {socket}\n"
        "Restart=always\n"
        "RestartSec=1\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )
    return text.encode()


def check_protobuf(python: str) -> None:
    """Refuse a plugin interpreter that cannot load protobuf (it would restart forever, never serving)."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", "import google.protobuf, hook.nri.plugin"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=VERSION_TIMEOUT * 3,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise InstallError(f"--nri: cannot run {python} ({type(err).__name__})") from None
    if done.returncode != 0:
        raise InstallError(
            f"--nri: {python} cannot load the plugin (protobuf missing?); install with the gpu-env-hook "
            "that pip installed"
        )


def plan_unit(options: InstallOptions, socket: str = paths.NRI_SOCKET) -> tuple[PlannedFile, str]:
    """Return the unit file (the plugin on ``socket``) and what the user runs next."""
    python = options.nri_python
    if python is None:
        raise InstallError("--nri: no interpreter for the plugin; give --nri-python PATH")
    check_trusted("--nri-python", python, options.root)
    if options.root in ("", "/"):
        check_protobuf(python)
    unit = PlannedFile(
        UNIT_PATH, build_unit(python, options.config, engine=options.engine, socket=socket), CONFIG_MODE
    )
    note = (
        f"next: start the NRI plugin: systemctl daemon-reload && systemctl enable --now {UNIT_NAME} "
        f"(written to {rooted(options.root, UNIT_PATH)})"
    )
    return unit, note


def uninstall_note() -> str:
    """What the user runs once uninstall removed the unit (not enabled: ``check_unit_disabled``)."""
    return (
        f"next: systemctl stop {UNIT_NAME}; systemctl daemon-reload (the NRI plugin's unit file is gone; "
        "stop ends the plugin if it still runs)"
    )


def check_unit_disabled(node: NodeRoot) -> None:
    """Refuse to remove the unit while it is enabled: `systemctl disable` needs its file (and the plugin
    would go on adding hooks that start the tree uninstall removes)."""
    if node.lstat(UNIT_WANTS) is not None:
        raise InstallError(
            f"uninstall: the NRI plugin's unit is enabled ({node.show(UNIT_WANTS)}): run "
            f"`systemctl disable --now {UNIT_NAME}` first (uninstall removes its unit file)"
        )
