"""uninstall never strands a container: a runtime wrapper still in use is retired (a passthrough without
Python that refuses new containers) and removed by a later uninstall once no container uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hook.install import InstallOptions, write_install, write_uninstall
from hook.install.inuse import find_runtime_users, node_proc
from hook.install.retire import build_retired_wrapper
from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
WRAPPER = paths.runtime_wrapper("crio")
REFUSAL = (
    "gpu-env-runtime: gpu-env-hook was uninstalled from this node; this runtime only stops and deletes the "
    "containers created before; restart crio and do not select runtime gpu-env"
)


def snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: a file's mode and bytes, a directory's mode."""
    return {
        str(path.relative_to(root)): (path.stat().st_mode, path.read_bytes() if path.is_file() else None)
        for path in sorted(root.rglob("*"))
    }


class FakeProc:
    """A /proc-shaped tree: processes with a command line and, for shims, a bundle as working directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.add(1, ["/sbin/init"])

    def add(self, pid: int, argv: list[str], *, bundle_options: dict[str, Any] | None = None) -> None:
        """Add process ``pid`` running ``argv`` (a runc v2 shim when ``bundle_options`` is given)."""
        directory = self.root / str(pid)
        directory.mkdir(parents=True)
        (directory / "cmdline").write_bytes(b"\0".join(arg.encode() for arg in argv) + b"\0")
        if bundle_options is not None:
            bundle = self.root.parent / f"bundle-{pid}"
            bundle.mkdir()
            (bundle / "options.json").write_text(json.dumps(bundle_options))
            (directory / "cwd").symlink_to(bundle)

    def remove(self, pid: int) -> None:
        """End process ``pid``."""
        for path in sorted((self.root / str(pid)).iterdir()):
            path.unlink()
        (self.root / str(pid)).rmdir()


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    """An empty fake /proc (only an init)."""
    return FakeProc(tmp_path / "proc")


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node tree with a runc on its PATH."""
    root = tmp_path / "node"
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/sbin/runc").write_text("#!/bin/sh\n")
    (root / "usr/sbin/runc").chmod(0o755)
    return root


def install(node: Path, engine: str = "crio") -> list[str]:
    """Install for ``engine`` into ``node``."""
    return write_install(InstallOptions(engine=engine, python=PYTHON, root=str(node)))


# --- who uses the runtime --------------------------------------------------------------------------------


def test_users_are_shims_whose_bundle_names_the_wrapper_and_conmons_that_name_it(proc: FakeProc) -> None:
    """A runc v2 shim counts when its bundle's options.json names the wrapper; conmon when its command line
    does; other shims and processes do not."""
    shim = ["/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "a" * 64, "-address", "/x"]
    proc.add(10, shim, bundle_options={"binary_name": WRAPPER, "root": "/run/containerd/runc/k8s.io"})
    proc.add(11, [*shim[:4], "b" * 64], bundle_options={"binary_name": "/usr/sbin/runc"})
    proc.add(12, ["/usr/bin/conmon", "-c", "c" * 64, "-r", WRAPPER, "-b", "/run/x"])
    proc.add(13, ["/usr/bin/conmon", "-c", "d" * 64, "-r", "/usr/bin/crun"])
    users = find_runtime_users(str(proc.root), WRAPPER)
    assert users.users == ("conmon pid 12", f"containerd-shim-runc-v2 pid 10 (container {'a' * 12})")


def test_a_root_without_a_live_proc_runs_nothing(node: Path) -> None:
    """An image tree (no live /proc) runs no container; an explicit --proc that is not a live one tells
    nothing: whether a container uses the wrapper cannot be told (never idle)."""
    (node / "proc").mkdir()
    assert node_proc(str(node)) is None
    assert find_runtime_users(None, WRAPPER).idle
    users = find_runtime_users(node_proc(str(node), f"{node}/proc"), WRAPPER)
    assert (users.unseen, users.idle, users.users) == (True, False, ())


# --- the retired wrapper, run by a real /bin/sh -----------------------------------------------------------


@pytest.fixture
def retired(tmp_path: Path) -> tuple[Path, Path]:
    """A retired wrapper whose real runtime records its argv; returns (wrapper, record)."""
    record = tmp_path / "runtime-argv"
    runtime = tmp_path / "real-runtime"
    runtime.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    runtime.chmod(0o755)
    wrapper = tmp_path / "gpu-env-runtime"
    wrapper.write_bytes(build_retired_wrapper(str(runtime), "crio"))
    wrapper.chmod(0o755)
    return wrapper, record


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--root", "/run/runc", "kill", "abc", "SIGTERM"], id="kill"),
        pytest.param(
            ["--root=/run/runc", "--log", "/x/log.json", "--log-format", "json", "delete", "abc"],
            id="delete-with-log",
        ),
        pytest.param(["--systemd-cgroup", "state", "abc"], id="state"),
        pytest.param(["kill", "create", "9"], id="container-named-create"),
        pytest.param(["--root", "create", "list"], id="root-named-create"),
    ],
)
def test_retired_wrapper_passes_every_other_command_to_the_real_runtime(
    retired: tuple[Path, Path], args: list[str]
) -> None:
    """Anything but create/run/restore reaches the real runtime with the same argv, whatever the ids."""
    wrapper, record = retired
    proc = subprocess.run([str(wrapper), *args], capture_output=True, text=True, timeout=30, check=False)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert record.read_text().splitlines() == args


@pytest.mark.parametrize(
    ("args", "json_log"),
    [
        pytest.param(
            [
                "--root",
                "/run/runc",
                "--log",
                "LOG",
                "--log-format",
                "json",
                "create",
                "--bundle",
                "/b",
                "abc",
            ],
            True,
            id="create-json-log",
        ),
        pytest.param(["--log=LOG", "run", "abc"], False, id="run-text-log"),
        pytest.param(["restore", "abc"], None, id="restore-no-log"),
    ],
)
def test_retired_wrapper_refuses_new_containers_in_one_line(
    retired: tuple[Path, Path], tmp_path: Path, args: list[str], json_log: bool | None
) -> None:
    """create, run and restore are refused: one line on stderr and, as runc writes it, in --log (which the
    engine shows); the real runtime is never run."""
    wrapper, record = retired
    log = tmp_path / "log.json"
    argv = [arg.replace("LOG", str(log)) for arg in args]
    proc = subprocess.run([str(wrapper), *argv], capture_output=True, text=True, timeout=30, check=False)
    assert (proc.returncode, proc.stderr) == (1, REFUSAL + "\n")
    assert not record.exists()
    if json_log is None:
        assert not log.exists()
    elif json_log:
        line = json.loads(log.read_text())
        assert (line["level"], line["msg"]) == ("error", REFUSAL)
    else:
        assert log.read_text().endswith(f' level=error msg="{REFUSAL}"\n')


# --- uninstall, purge, install again ---------------------------------------------------------------------


def test_uninstall_retires_a_wrapper_in_use_and_purge_removes_it_once_unused(
    node: Path, proc: FakeProc
) -> None:
    """With a conmon still naming the wrapper, uninstall removes everything else and keeps the wrapper as a
    passthrough to the node's runc; while it runs, --purge keeps it; once it is gone, --purge restores the
    node exactly."""
    before = snapshot(node)
    install(node)
    proc.add(40, ["/usr/bin/conmon", "-r", WRAPPER])
    lines = write_uninstall("crio", str(node), proc=str(proc.root))
    assert (
        f"kept {node}{WRAPPER} as a passthrough to /usr/sbin/runc (no Python; it refuses new containers): "
        "1 process(es) still use it: conmon pid 40; `gpu-env-hook uninstall --purge` removes it once none does"
    ) in lines
    assert "exec /usr/sbin/runc" in (node / WRAPPER.lstrip("/")).read_text()
    assert not (node / "etc/crio/crio.conf.d/99-gpu-env-hook.conf").exists()
    assert not (node / paths.HOOK_WRAPPER.lstrip("/")).exists()
    assert json.loads((node / "var/lib/gpu-env-hook/retired.json").read_text())["engine"] == "retired"

    lines = write_uninstall(None, str(node), proc=str(proc.root))
    assert lines == [f"kept {node}{WRAPPER} (retired): 1 process(es) still use it: conmon pid 40"]
    proc.remove(40)
    lines = write_uninstall(None, str(node), proc=str(proc.root), dry_run=True)
    assert f"would remove {node}{WRAPPER}" in lines
    lines = write_uninstall(None, str(node), proc=str(proc.root))
    assert f"remove {node}{WRAPPER}" in lines
    assert f"removed {node}/var/lib/gpu-env-hook/retired.json" in lines
    assert snapshot(node) == before
    assert write_uninstall(None, str(node), proc=str(proc.root)) == [
        f"nothing retired under {node} (no {node}/var/lib/gpu-env-hook/retired.json)"
    ]


def test_uninstall_without_the_nodes_processes_keeps_the_wrapper_until_they_can_be_seen(
    node: Path, tmp_path: Path
) -> None:
    """`uninstall --proc DIR` where DIR is not a live /proc (a DaemonSet pod that sees the node's / without
    its /proc): the real command removes everything else, keeps the runtime wrapper as a passthrough (a
    container created through it can still be stopped and deleted) and says why in one line; `--purge` keeps
    it while the processes still cannot be seen, and removes it once a live /proc shows nothing uses it."""
    before = snapshot(node)
    install(node)
    blind = tmp_path / "no-proc"
    blind.mkdir()
    run = [PYTHON, "-I", "-m", "hook", "uninstall", "--root", str(node), "--proc", str(blind)]
    done = subprocess.run([*run, "--engine", "crio"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert (
        f"kept {node}{WRAPPER} as a passthrough to /usr/sbin/runc (no Python; it refuses new containers): "
        f"cannot tell which containers use it ({blind} is not a live /proc: give the node's /proc); "
        "`gpu-env-hook uninstall --purge` removes it once none does\n"
    ) in done.stdout
    assert "exec /usr/sbin/runc" in (node / WRAPPER.lstrip("/")).read_text()
    assert not (node / paths.HOOK_WRAPPER.lstrip("/")).exists()
    done = subprocess.run([*run, "--purge"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"kept {node}{WRAPPER} (retired): cannot tell which containers use it ({blind} is not a live /proc: "
        "give the node's /proc)\n"
    )
    live = FakeProc(tmp_path / "proc")
    run[-1] = str(live.root)
    done = subprocess.run([*run, "--purge"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert snapshot(node) == before


def test_uninstall_removes_the_wrapper_when_no_container_uses_it(node: Path, proc: FakeProc) -> None:
    """No user on the node: uninstall removes the wrapper at once, no retired record."""
    before = snapshot(node)
    install(node)
    write_uninstall("crio", str(node), proc=str(proc.root))
    assert snapshot(node) == before


def test_install_takes_a_retired_wrapper_back_and_uninstall_still_restores_the_node(
    node: Path, proc: FakeProc
) -> None:
    """An upgrade path: uninstall (wrapper retired), install again (the record goes, the new manifest keeps
    what the first install replaced), uninstall with nothing running: the node is as before."""
    (node / WRAPPER.lstrip("/")).parent.mkdir(parents=True)
    (node / WRAPPER.lstrip("/")).write_text("#!/bin/sh\n# the administrator's own\n")
    before = snapshot(node)
    install(node)
    proc.add(
        50, ["/usr/bin/containerd-shim-runc-v2", "-id", "e" * 64], bundle_options={"binary_name": WRAPPER}
    )
    write_uninstall("crio", str(node), proc=str(proc.root))
    lines = install(node)
    assert (
        f"removed {node}/var/lib/gpu-env-hook/retired.json (the retired runtime wrapper is installed again)"
        in lines
    )
    assert "gpu-env-hook install" in (node / WRAPPER.lstrip("/")).read_text()
    proc.remove(50)
    write_uninstall("crio", str(node), proc=str(proc.root))
    assert snapshot(node) == before


def test_uninstall_dry_run_says_it_would_keep_the_wrapper(node: Path, proc: FakeProc) -> None:
    """--dry-run reports the retirement and changes nothing."""
    install(node)
    proc.add(60, ["/usr/bin/conmon", "-r", WRAPPER])
    before = snapshot(node)
    lines = write_uninstall("crio", str(node), proc=str(proc.root), dry_run=True)
    assert any(line.startswith(f"would keep {node}{WRAPPER} as a passthrough") for line in lines), lines
    assert snapshot(node) == before


def test_uninstall_needs_an_engine_or_purge(tmp_path: Path) -> None:
    """`uninstall` alone is refused in one line; `uninstall --purge` alone says when nothing is retired."""
    run = [PYTHON, "-I", "-m", "hook", "uninstall", "--root", str(tmp_path)]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "gpu-env-hook: uninstall: give --engine, or --purge to remove only what earlier uninstalls kept\n"
    )
    proc = subprocess.run([*run, "--purge"], capture_output=True, text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (
        proc.stdout == f"nothing retired under {tmp_path} (no {tmp_path}/var/lib/gpu-env-hook/retired.json)\n"
    )


def test_an_upgrade_retires_a_wrapper_it_no_longer_installs_while_a_container_uses_it(
    node: Path, proc: FakeProc
) -> None:
    """A node installed before per-engine wrappers (one shared ``<libexec>/gpu-env-runtime``) is upgraded
    while a container still runs through the old wrapper: the upgrade keeps it as a passthrough, and
    ``--purge`` removes it once no container uses it."""
    install(node)
    legacy = f"{paths.LIBEXEC_DIR}/{paths.RUNTIME_WRAPPER_NAME}"
    manifest_file = node / "var/lib/gpu-env-hook/install-crio.json"
    manifest = json.loads(manifest_file.read_text())
    for entry in manifest["files"]:
        if entry["path"] == WRAPPER:
            entry["path"] = legacy
    manifest_file.write_text(json.dumps(manifest))
    (node / WRAPPER.lstrip("/")).rename(node / legacy.lstrip("/"))
    proc.add(41, ["/usr/bin/conmon", "-r", legacy])

    lines = write_install(InstallOptions(engine="crio", python=PYTHON, root=str(node)), proc=str(proc.root))

    assert (
        f"kept {node}{legacy} as a passthrough to /usr/sbin/runc (no Python; it refuses new containers): "
        "1 process(es) still use it: conmon pid 41; `gpu-env-hook uninstall --purge` removes it once none does"
    ) in lines
    assert "exec /usr/sbin/runc" in (node / legacy.lstrip("/")).read_text()
    assert (node / WRAPPER.lstrip("/")).is_file()
    proc.remove(41)
    write_uninstall(None, str(node), proc=str(proc.root))
    assert not (node / legacy.lstrip("/")).exists()
    assert (node / WRAPPER.lstrip("/")).is_file()


def hook_command(*args: str, env: dict[str, str] | None = None) -> list[str]:
    """Run a gpu-env-hook command (it must succeed, nothing on stderr); return its stdout's lines."""
    done = subprocess.run(
        [PYTHON, "-I", "-m", "hook", *args],
        env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    return done.stdout.splitlines()


def test_purge_removes_the_refusal_log_and_the_naming_key_once_no_install_is_left(node: Path) -> None:
    """What uninstall keeps of ours (the refusal log and its previous part, the naming key) stays while
    another engine's install needs it (`uninstall --engine X --purge` says so), stays after a plain uninstall,
    and goes with `uninstall --purge`: the node is as before install; the administrator's file in the state
    directory and config.toml are never touched."""
    config = node / "etc/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[env-file]\n")
    before = snapshot(node)
    root = ("--root", str(node))
    for engine in ("containerd", "podman"):
        hook_command("install", "--engine", engine, *root, "--python", PYTHON)
    log = node / paths.REFUSAL_LOG.lstrip("/")
    for part in (log, log.with_name(log.name + ".1")):
        part.write_text("2026-12-05T00:00:00Z precreate exit status 14: ...\n")
        part.chmod(0o600)
    key = node / "var/lib/gpu-env-hook/alloc.key"
    hook_command("env-file", "path", "fake0", env={"GPU_ENV_HOOK_NAME_KEY": str(key)})
    assert key.is_file()

    lines = hook_command("uninstall", "--engine", "containerd", "--purge", *root)
    assert f"kept {log}, {log}.1, {key}: still installed for podman" in lines
    lines = hook_command("uninstall", "--engine", "podman", *root)
    assert f"kept directory {node}/var/log/gpu-env-hook: it holds files install did not write" in lines
    assert key.is_file()
    notes = node / "var/lib/gpu-env-hook/notes.txt"  # not ours: purge leaves it, and its directory
    notes.write_text("the administrator's\n")
    assert hook_command("uninstall", "--purge", *root, "--dry-run")[1:] == [
        f"would remove {log}",
        f"would remove {log}.1",
        f"would remove {key}",
    ]
    assert hook_command("uninstall", "--purge", *root)[1:] == [
        f"removed {log}",
        f"removed {log}.1",
        f"removed {key}",
        f"removed directory {node}/var/log/gpu-env-hook",
    ]
    assert notes.read_text() == "the administrator's\n"
    notes.unlink()
    hook_command("uninstall", "--purge", *root)
    after = snapshot(node)
    assert {name: after.get(name) for name in before} == before
    assert sorted(set(after) - set(before)) == ["var", "var/lib", "var/log"]  # the node's own, in a real /


def test_remove_everything_example_runs_as_written_and_leaves_nothing() -> None:
    """docs/install.md's "Remove everything" block, run as written on a node (a mount namespace whose
    /opt, /usr/local, /usr/share/containers, /etc/tmpfiles.d, /var/lib, /var/log and /run start empty) after
    `install --engine podman`, a refusal and a name made with the node's key: nothing is left."""
    from test_node_engine import doc_block

    block = doc_block("docs/install.md", "### Remove everything", "sh")
    places = (
        "/opt",
        "/usr/local",
        "/usr/share/containers",
        "/etc/tmpfiles.d",
        "/var/lib",
        "/var/log",
        "/run",
    )
    script = "\n".join(
        [
            "set -e",
            *(f"mount -t tmpfs -o mode=0755 tmpfs {place}" for place in places),
            f"gpu-env-hook install --engine podman --python {PYTHON} >/dev/null",
            "echo 'precreate exit status 14: ...' > /var/log/gpu-env-hook/refusals.log",
            "gpu-env-hook env-file path fake0 >/dev/null",  # the node's key, /var/lib/gpu-env-hook/alloc.key
            "test -f /var/lib/gpu-env-hook/alloc.key",
            block,
            f"find {' '.join(places)} -mindepth 1 ! -path /run/mount",
        ]
    )
    env = {name: value for name, value in os.environ.items() if name != "GPU_ENV_HOOK_NAME_KEY"}
    env["PATH"] = f"{Path(PYTHON).parent}:/usr/sbin:/usr/bin:/sbin:/bin"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    lines = done.stdout.splitlines()
    assert "removed /var/lib/gpu-env-hook/alloc.key" in lines
    assert lines[-1] == "nothing retired under / (no /var/lib/gpu-env-hook/retired.json)"  # nothing left
