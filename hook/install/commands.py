"""The ``install`` and ``uninstall`` commands: typer options in, the installer's report out."""

import enum
import os
import sys
from typing import Annotated

import typer

from hook.install.installer import detect_engine, write_install, write_uninstall
from hook.install.reuse import resolve_options
from hook.util import paths

# The umask install and uninstall run under, whatever the caller's: every file and directory they write
# gets its mode explicitly (and the runtime tree is settled after: hook.install.tree.settle_modes); this
# also covers what a child process (compileall) or a later change creates without one.
INSTALL_UMASK = 0o022


class Engine(enum.StrEnum):
    """The engines install knows, and ``auto`` (the CRI engine whose socket the node has)."""

    auto = "auto"
    podman = "podman"
    crio = "crio"
    containerd = "containerd"
    docker = "docker"


def default_python() -> str:
    """Return the interpreter this one is based on (a venv's base, not the venv: the wrappers run the
    node's tree with -S and need no venv, and a venv rebuilt or removed must not break a node), its path
    as given (``/usr/bin/python3`` stays: an OS upgrade to another minor version keeps it working)."""
    return os.path.abspath(getattr(sys, "_base_executable", None) or sys.executable)


def resolve_engine(engine: Engine, root: str) -> str:
    """Return the engine to act for: ``engine`` itself, or for ``auto`` the one the node's socket names (said
    on stdout first, so the report shows what was chosen)."""
    if engine is not Engine.auto:
        return engine.value
    chosen, line = detect_engine(os.path.abspath(root))
    typer.echo(line)
    return chosen


def install_command(
    *,
    engine: Annotated[
        Engine,
        typer.Option(
            help="The engine to install for (auto: CRI-O, else containerd, by the node's CRI socket)."
        ),
    ],
    root: Annotated[
        str, typer.Option(help="The node's / as seen from here (e.g. /host in a DaemonSet).")
    ] = "/",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print each file it would write; write nothing.")
    ] = False,
    as_nvidia_hook: Annotated[
        bool | None,
        typer.Option(
            "--as-nvidia-hook/--no-as-nvidia-hook",
            help=f"Also install as {paths.NVIDIA_HOOK_ALIAS} (default: as the last install, else off).",
            show_default=False,
        ),
    ] = None,
    precreate: Annotated[
        bool | None,
        typer.Option(
            "--precreate/--no-precreate",
            help="podman: also install the precreate hook (env reaches the process; default: as the last "
            "install, else off).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(help="config.toml the wrappers use (baked in as NVIDIA_CTK_CONFIG_FILE_PATH)."),
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(
            help="Interpreter the engines run, as a node path (default: this one's base, not a venv); "
            "tree: a copy of this one's base, with its loader and libraries, in the node's tree (the node "
            "then needs no Python and no C library of its own)."
        ),
    ] = None,
    runtime: Annotated[
        str | None,
        typer.Option(
            help="The real runtime the shim execs, as a node path (default: the engine's default runtime, "
            "else [gpu-env-runtime] runtime, else runc or crun on the node)."
        ),
    ] = None,
    hooks_dir: Annotated[
        str | None,
        typer.Option(
            help=f"oci-hooks.d directory (podman, CRI-O; default: as the last install, else "
            f"{paths.OCI_HOOKS_DIRS[0]})."
        ),
    ] = None,
    containerd_config: Annotated[
        str | None,
        typer.Option(
            help="containerd's config to add the handler to, as a node path (k3s/RKE2: the "
            "config.toml.tmpl beside the config.toml they generate; default: as the last install, else "
            f"{paths.CONTAINERD_CONFIG})."
        ),
    ] = None,
    containerd_config_version: Annotated[
        int | None,
        typer.Option(min=1, max=4, help="containerd: the version of a config file install creates."),
    ] = None,
    nri: Annotated[
        bool | None,
        typer.Option(
            "--nri/--no-nri",
            help="containerd >= 1.7, CRI-O: also register the NRI plugin (a systemd unit, NRI switched on "
            "where it is off; CRI-O: no hooks JSON; docs/nri.md; default: as the last install, else off).",
            show_default=False,
        ),
    ] = None,
    containerd_binary: Annotated[
        str | None,
        typer.Option(
            help="--nri: the containerd binary whose --version is checked, as a node path (default: "
            "containerd on the node's PATH)."
        ),
    ] = None,
    nri_python: Annotated[
        str | None,
        typer.Option(
            help="--nri: the interpreter the plugin's unit runs, one with protobuf (default: this one)."
        ),
    ] = None,
    nri_unit: Annotated[
        bool | None,
        typer.Option(
            "--nri-unit/--no-nri-unit",
            help="--nri: write the plugin's systemd unit; --no-nri-unit when the plugin runs elsewhere, as "
            "in the NRI DaemonSet's container (default: as the last install, else on).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Install the hook and the runtime shim for one engine (undo with uninstall); install again (an
    upgrade) reuses each option of the last install that is not given."""
    os.umask(INSTALL_UMASK)
    chosen = resolve_engine(engine, root)
    given = {
        "python": python,
        "config": config,
        "as_nvidia_hook": as_nvidia_hook,
        "precreate": precreate,
        "hooks_dir": hooks_dir,
        "containerd_config_version": containerd_config_version,
        "containerd_config": containerd_config,
        "runtime": runtime,
        "nri": nri,
        "containerd_binary": containerd_binary,
        "nri_unit": nri_unit,
    }
    options, reused = resolve_options(chosen, os.path.abspath(root), given, default_python())
    options = options._replace(nri_python=nri_python or os.path.abspath(sys.executable))
    for line in [*reused, *write_install(options, dry_run=dry_run)]:
        typer.echo(line)


def uninstall_command(
    *,
    engine: Annotated[
        Engine | None,
        typer.Option(help="The engine to uninstall for (auto: as install; omit with --purge: only purge)."),
    ] = None,
    root: Annotated[str, typer.Option(help="The node's / as seen from here (as given to install).")] = "/",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what it would do; change nothing.")
    ] = False,
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="Also remove what uninstall keeps: a runtime wrapper an earlier uninstall kept for running "
            "containers, once none uses it (every uninstall does this too), and, once no install is "
            "left, the refusal log and the naming key.",
        ),
    ] = False,
    proc: Annotated[
        str | None,
        typer.Option(
            help="The node's /proc as seen from here, to see which containers still run "
            "(default: <root>/proc)."
        ),
    ] = None,
) -> None:
    """Remove what install wrote for one engine and restore what it replaced; a runtime wrapper that
    running containers still use is kept as a passthrough until they are gone."""
    if engine is None and not purge:
        from hook.install.common import InstallError

        raise InstallError("uninstall: give --engine, or --purge to remove only what earlier uninstalls kept")
    os.umask(INSTALL_UMASK)
    chosen = resolve_engine(engine, root) if engine is not None else None
    lines = write_uninstall(chosen, os.path.abspath(root), dry_run=dry_run, proc=proc, purge=purge)
    for line in lines:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add the ``install`` and ``uninstall`` commands to ``app``."""
    app.command("install")(install_command)
    app.command("uninstall")(uninstall_command)
