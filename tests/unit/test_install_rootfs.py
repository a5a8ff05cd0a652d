"""install never leaves ``--root`` (symlinks resolve beneath it) and never opens a FIFO or device as a config;
a ``--root`` that does not exist is refused in one line, by the dry run exactly as by the real run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hook.install import InstallError, InstallOptions, write_install, write_uninstall
from hook.install.rootfs import NodeRoot
from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path


def tree(root: Path) -> dict[str, bytes | str | None]:
    """Every entry under ``root``: a file's bytes, a link's target, None for a directory (a FIFO is never
    opened: only its mode is recorded)."""
    found: dict[str, bytes | str | None] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = str(path.readlink())
        elif path.is_dir():
            found[rel] = None
        elif path.is_file():
            found[rel] = path.read_bytes()
        else:
            found[rel] = f"special {path.lstat().st_mode:o}"
    return found


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the node tree that install must never touch, with a daemon.json of its own."""
    directory = tmp_path / "outside"
    (directory / "etc/docker").mkdir(parents=True)
    (directory / "etc/docker/daemon.json").write_text('{"outside": true}\n')
    return directory


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """An empty node tree."""
    root = tmp_path / "node"
    root.mkdir()
    return root


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``python -I -m hook ARGS`` with a bound: a blocking open must fail the test, not hang it."""
    return subprocess.run(
        [PYTHON, "-I", "-m", "hook", *args], capture_output=True, text=True, check=False, timeout=timeout
    )


# --- the walk --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("link", "target", "node_path", "lands"),
    [
        pytest.param(
            "etc",
            "/elsewhere/etc",
            "/etc/docker/daemon.json",
            "elsewhere/etc/docker/daemon.json",
            id="absolute-link-restarts-at-root",
        ),
        pytest.param(
            "etc",
            "../../../../etc-real",
            "/etc/docker/daemon.json",
            "etc-real/docker/daemon.json",
            id="dotdot-stops-at-root",
        ),
        pytest.param("usr/local", "../opt/local", "/usr/local/bin/x", "opt/local/bin/x", id="relative-link"),
    ],
)
def test_walk_resolves_links_beneath_the_root(
    node: Path, link: str, target: str, node_path: str, lands: str
) -> None:
    """A link is resolved with the root as /: absolute targets start again at the root, '..' stops there."""
    (node / link).parent.mkdir(parents=True, exist_ok=True)
    (node / link).symlink_to(target)
    (node / lands).parent.mkdir(parents=True, exist_ok=True)
    NodeRoot(str(node)).write_atomic(node_path, b"x\n", mode=0o644)
    assert (node / lands).read_bytes() == b"x\n"


def test_walk_refuses_a_link_loop(node: Path) -> None:
    """A link cycle is one line, not a hang or a traceback."""
    (node / "a").symlink_to("/b")
    (node / "b").symlink_to("/a")
    with pytest.raises(
        InstallError, match=rf"^could not write {node}/a/x: too many levels of symbolic links$"
    ):
        NodeRoot(str(node)).write_atomic("/a/x", b"", mode=0o644)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        pytest.param(os.mkfifo, "a FIFO", id="fifo"),
        pytest.param(
            lambda path: os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3)),
            "a character device",
            id="char-device",
        ),
    ],
)
def test_read_refuses_what_is_not_a_regular_file(node: Path, make: object, kind: str) -> None:
    """A FIFO or device is named and never opened for reading (a FIFO would block)."""
    assert callable(make)
    make(str(node / "config"))
    with pytest.raises(InstallError, match=rf"^{node}/config: is {kind}, not a regular file; move it away$"):
        NodeRoot(str(node)).read("/config")


# --- install and uninstall stay inside the root ---------------------------------------------------------


LINKED_DIRS = [
    pytest.param("usr/local", id="wrappers-dir"),
    pytest.param("etc/docker", id="daemon-json-dir"),
    pytest.param("var/lib", id="manifest-dir"),
]


@pytest.mark.parametrize("link", LINKED_DIRS)
def test_install_follows_no_absolute_link_out_of_the_root(node: Path, outside: Path, link: str) -> None:
    """An absolute symlink inside the root that points outside it is read as a node path: install writes
    beneath the root (where the link's target is on the node), and the directory the link names on this
    machine is left exactly as it was, by install and by uninstall."""
    (node / link).parent.mkdir(parents=True, exist_ok=True)
    (node / link).symlink_to(outside)
    beneath = node / str(outside).lstrip("/")
    beneath.mkdir(parents=True)
    before = tree(outside)
    lines = write_install(InstallOptions(engine="docker", python=PYTHON, root=str(node), as_nvidia_hook=True))
    assert tree(outside) == before
    assert f"wrote {node}{paths.runtime_wrapper('docker')}" in lines
    assert list(beneath.iterdir())  # what the link leads to on the node got the files
    write_uninstall("docker", str(node))
    assert tree(outside) == before


@pytest.mark.parametrize("link", LINKED_DIRS)
def test_install_refuses_a_link_that_leads_nowhere_beneath_the_root(
    node: Path, outside: Path, link: str
) -> None:
    """A directory on the way that is a link to nothing beneath the root is refused in one line (the node
    itself could not write there either); nothing is written, here or outside."""
    (node / link).parent.mkdir(parents=True, exist_ok=True)
    (node / link).symlink_to(outside)
    before, outside_before = tree(node), tree(outside)
    with pytest.raises(
        InstallError,
        match=rf"^{node}/{link}: is a symlink to {outside}, not a directory beneath {node}; move it away first$",
    ):
        write_install(InstallOptions(engine="docker", python=PYTHON, root=str(node), as_nvidia_hook=True))
    assert (tree(node), tree(outside)) == (before, outside_before)


def test_install_reads_daemon_json_through_a_link_beneath_the_root(node: Path, outside: Path) -> None:
    """daemon.json as an absolute link is read at its node path beneath the root, never the host file."""
    (node / "etc/docker").mkdir(parents=True)
    (node / "etc/docker/daemon.json").symlink_to(outside / "etc/docker/daemon.json")
    beneath = node / str(outside).lstrip("/") / "etc/docker"
    beneath.mkdir(parents=True)
    (beneath / "daemon.json").write_text('{"beneath": true}\n')
    before = tree(outside)
    write_install(InstallOptions(engine="docker", python=PYTHON, root=str(node)))
    written = (node / "etc/docker/daemon.json").read_text()
    assert '"beneath": true' in written
    assert '"outside"' not in written
    write_uninstall("docker", str(node))
    assert (node / "etc/docker/daemon.json").readlink() == outside / "etc/docker/daemon.json"
    assert tree(outside) == before


@pytest.mark.parametrize(
    ("engine", "config"),
    [
        pytest.param("docker", paths.DOCKER_DAEMON_JSON, id="daemon-json"),
        pytest.param("containerd", paths.CONTAINERD_CONFIG, id="containerd-config"),
    ],
)
def test_install_refuses_a_fifo_as_the_engine_config(node: Path, engine: str, config: str) -> None:
    """A FIFO where the engine's config should be is refused in one line (the run is bounded: today's
    main blocks forever opening it), and nothing is written."""
    fifo = node / config.lstrip("/")
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    before = tree(node)
    for dry_run in ([], ["--dry-run"]):
        proc = run_cli("install", "--engine", engine, "--root", str(node), *dry_run)
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr == f"gpu-env-hook: {fifo}: is a FIFO, not a regular file; move it away\n"
    assert tree(node) == before


# --- a --root that does not exist -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "dry_run", [pytest.param([], id="install"), pytest.param(["--dry-run"], id="dry-run")]
)
def test_install_refuses_a_missing_root_in_one_line(tmp_path: Path, dry_run: list[str]) -> None:
    """A --root that does not exist is refused in one line (a typo must not become a tree no engine reads);
    --dry-run says exactly the same, and nothing is created."""
    missing = tmp_path / "no-such-node"
    proc = run_cli("install", "--engine", "docker", "--root", str(missing), *dry_run)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert (
        proc.stderr
        == f"gpu-env-hook: --root {missing}: no such directory; give the node's / (it must exist)\n"
    )
    assert not missing.exists()


def test_install_refuses_a_root_that_is_a_file(tmp_path: Path) -> None:
    """A --root naming a file is refused the same way."""
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(InstallError, match=rf"^--root {file}: not a directory; give the node's /$"):
        write_install(InstallOptions(engine="docker", python=PYTHON, root=str(file)), dry_run=True)


def test_uninstall_refuses_a_missing_root(tmp_path: Path) -> None:
    """uninstall names a missing --root the same way."""
    missing = tmp_path / "no-such-node"
    with pytest.raises(
        InstallError, match=rf"^--root {missing}: no such directory; give the node's / \(it must exist\)$"
    ):
        write_uninstall("docker", str(missing))


@pytest.mark.parametrize(
    ("path", "follow", "found"),
    [
        pytest.param("/var/run/cdi", True, "/run/cdi", id="absolute-link-on-the-way"),
        pytest.param("/etc/cdi", True, "/run/cdi", id="relative-link-last"),
        pytest.param("/etc/cdi", False, "/etc/cdi", id="last-link-kept"),
        pytest.param("/var/run/nri/nri.sock", True, "/run/nri/nri.sock", id="missing-dir-ends-the-walk"),
        pytest.param("/var/run/../lib", True, "/lib", id="dot-dot-after-a-link"),
        pytest.param("/", True, "", id="the-root"),
    ],
)
def test_resolve_finds_node_paths_beneath_the_root(
    tmp_path: Path, path: str, follow: bool, found: str
) -> None:
    """A node path as doctor looks at it: links resolved as the node resolves them, the root as ``/``."""
    (tmp_path / "run/cdi").mkdir(parents=True)
    (tmp_path / "var").mkdir()
    (tmp_path / "var/run").symlink_to("/run")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/cdi").symlink_to("../run/cdi")
    assert NodeRoot(str(tmp_path)).resolve(path, follow=follow) == f"{tmp_path}{found}"
