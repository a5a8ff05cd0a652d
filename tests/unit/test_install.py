"""install / uninstall: what each engine gets, the wrappers' isolation, and that uninstall undoes it exactly."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hook.install import (
    HOOK_ENTRY,
    InstallError,
    InstallOptions,
    build_hook_json,
    build_hook_wrapper,
    merge_daemon_json,
    rooted,
    unmerge_daemon_json,
    write_install,
    write_uninstall,
)
from hook.install.guard import guard_problem, guard_spec
from hook.install.schema import validate_document
from hook.launcher import build_code
from hook.util import paths

REPO = Path(__file__).resolve().parents[2]
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
OTHER_DAEMON_JSON = b'{\n  "log-driver": "json-file",\n  "runtimes": {"other": {"path": "/opt/other"}}\n}\n'
CONTAINERD_V2 = b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "pause:3.9"\n'

Snapshot = dict[str, tuple[Any, ...]]
ETC_HOOKS = paths.OCI_HOOKS_DIRS[1]


def snapshot(root: Path) -> Snapshot:
    """Record every path under root: kind, mode, owner and content (or link target)."""
    found: Snapshot = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = ("link", str(path.readlink()))
        elif path.is_dir():
            found[rel] = ("dir", st.st_mode, st.st_uid, st.st_gid)
        else:
            found[rel] = ("file", st.st_mode, st.st_uid, st.st_gid, path.read_bytes())
    return found


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node's / with a daemon.json holding other keys, a containerd config and NVIDIA's hook on PATH."""
    root = tmp_path / "node"
    (root / "etc/docker").mkdir(parents=True)
    (root / "etc/docker/daemon.json").write_bytes(OTHER_DAEMON_JSON)
    (root / "etc/docker/daemon.json").chmod(0o600)
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_bytes(CONTAINERD_V2)
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/nvidia-container-runtime-hook").symlink_to("/usr/bin/nvidia-container-toolkit")
    (root / "etc/nvidia-container-runtime").mkdir(parents=True)
    (root / "etc/nvidia-container-runtime/config.toml").write_text("")
    return root


Install = Callable[..., list[str]]


@pytest.fixture
def install(node: Path) -> Install:
    """Install into the node with this interpreter and the given options."""

    def run(engine: str, **options: Any) -> list[str]:
        return write_install(InstallOptions(engine=engine, python=PYTHON, root=str(node), **options))

    return run


# --- what each engine gets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "options", "expected"),
    [
        pytest.param(
            "podman",
            {},
            {
                paths.HOOK_WRAPPER,
                paths.runtime_wrapper("podman"),
                "/usr/share/containers/oci/hooks.d/gpu-env-hook.json",
            },
            id="podman-hook-json",
        ),
        pytest.param(
            "podman",
            {"precreate": True, "as_nvidia_hook": True},
            {
                paths.HOOK_WRAPPER,
                paths.runtime_wrapper("podman"),
                paths.NVIDIA_HOOK_ALIAS,
                "/usr/share/containers/oci/hooks.d/gpu-env-hook.json",
                "/usr/share/containers/oci/hooks.d/gpu-env-hook-precreate.json",
            },
            id="podman-precreate-and-nvidia-alias",
        ),
        pytest.param(
            "podman",
            {"hooks_dir": "/etc/containers/oci/hooks.d"},
            {
                paths.HOOK_WRAPPER,
                paths.runtime_wrapper("podman"),
                "/etc/containers/oci/hooks.d/gpu-env-hook.json",
            },
            id="podman-other-hooks-dir",
        ),
        pytest.param(
            "crio",
            {},
            {
                paths.HOOK_WRAPPER,
                paths.runtime_wrapper("crio"),
                "/usr/share/containers/oci/hooks.d/gpu-env-hook.json",
                "/etc/crio/crio.conf.d/99-gpu-env-hook.conf",
                paths.ENV_FILE_GUARD_SPEC,
            },
            id="crio-hook-json-and-dropin",
        ),
        pytest.param(
            "containerd",
            {},
            {
                paths.HOOK_WRAPPER,
                paths.runtime_wrapper("containerd"),
                paths.CONTAINERD_CONFIG,
                paths.ENV_FILE_GUARD_SPEC,
            },
            id="containerd-main-config",
        ),
        pytest.param(
            "docker",
            {"as_nvidia_hook": True},
            {
                paths.HOOK_WRAPPER,
                paths.runtime_wrapper("docker"),
                paths.NVIDIA_HOOK_ALIAS,
                paths.DOCKER_DAEMON_JSON,
            },
            id="docker-daemon-json-and-nvidia-alias",
        ),
    ],
)
def test_install_writes_the_engines_files(
    node: Path, install: Install, engine: str, options: dict[str, Any], expected: set[str]
) -> None:
    """Each engine gets the wrappers plus its own config (and the tmpfiles.d entry for the env directory),
    and the manifest lists exactly those files."""
    install(engine, **options)
    manifest = json.loads((node / f"var/lib/gpu-env-hook/install-{engine}.json").read_text())
    expected = {*expected, paths.TMPFILES_CONF, paths.LAUNCH_SCRIPT}
    assert {entry["path"] for entry in manifest["files"]} == expected
    for path in expected:
        assert Path(rooted(str(node), path)).is_file()
    assert validate_document(manifest, "install-manifest") == []


def test_the_env_file_guard_is_written_root_owned_and_removed(node: Path, install: Install) -> None:
    """containerd and CRI-O get the env-file guard's CDI spec, 0644, the bytes hook.install.guard makes (the
    one spec a device plugin's device names); doctor's check passes on it; uninstall of the last engine that
    installed it removes it, and doctor says so."""
    install("containerd")
    install("crio")
    where = Path(rooted(str(node), paths.ENV_FILE_GUARD_SPEC))
    assert where.read_bytes() == guard_spec()
    assert stat.S_IMODE(where.stat().st_mode) == 0o644
    owner_problem = f"{paths.ENV_FILE_GUARD_SPEC}: must be root-owned and not group- or world-writable"
    assert guard_problem(str(node)) == ("" if os.geteuid() == 0 else owner_problem)
    assert "kept " + str(where) + ": also installed for --engine crio" in write_uninstall(
        "containerd", str(node)
    )
    assert where.exists()
    assert f"remove {where}" in write_uninstall("crio", str(node))
    assert not where.exists()
    assert guard_problem(str(node)) == (
        f"{paths.ENV_FILE_GUARD_SPEC}: missing (install writes it; a device plugin naming the device fails "
        "every container)"
    )


def test_hook_json_is_written_last(install: Install) -> None:
    """The tree first, the executables next and the oci-hooks.d JSON last, so podman never sees a hook
    without its path, nor a wrapper without its package."""
    lines = [line for line in install("crio") if line.startswith("wrote ")]
    assert lines[0].endswith("(the package the engines run)")
    assert lines[1].endswith(paths.HOOK_WRAPPER)
    assert lines[-2].endswith("hooks.d/gpu-env-hook.json")
    assert lines[-1].endswith("install-crio.json (what uninstall undoes)")


@pytest.mark.parametrize("stage", ["prestart", "precreate"])
def test_hook_json_matches_packaging(stage: str) -> None:
    """install writes the same oci-hooks.d document as the one shipped in packaging/oci-hooks.d."""
    name = paths.HOOK_JSON_NAME if stage == "prestart" else paths.PRECREATE_JSON_NAME
    shipped = json.loads((REPO / "packaging/oci-hooks.d" / name).read_text())
    assert build_hook_json(stage) == shipped
    assert validate_document(build_hook_json(stage), "hooks-json") == []


def test_wrappers_are_executable_and_hook_json_is_not(node: Path, install: Install) -> None:
    """Wrappers are 0755; configs are 0644; the manifest (backups of configs) is 0600."""
    install("podman", as_nvidia_hook=True)
    for path in (paths.HOOK_WRAPPER, paths.runtime_wrapper("podman"), paths.NVIDIA_HOOK_ALIAS):
        assert Path(rooted(str(node), path)).stat().st_mode & 0o7777 == 0o755
    assert (node / "usr/share/containers/oci/hooks.d/gpu-env-hook.json").stat().st_mode & 0o7777 == 0o644
    assert (node / "var/lib/gpu-env-hook/install-podman.json").stat().st_mode & 0o7777 == 0o600


# --- Docker outputs -----------------------------------------------------------------------------


OURS = {"path": paths.runtime_wrapper("docker")}


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        pytest.param(None, {"runtimes": {"gpu-env": OURS}}, id="no-daemon-json"),
        pytest.param(b"{}", {"runtimes": {"gpu-env": OURS}}, id="empty-object"),
        pytest.param(
            OTHER_DAEMON_JSON,
            {"log-driver": "json-file", "runtimes": {"other": {"path": "/opt/other"}, "gpu-env": OURS}},
            id="other-keys-kept",
        ),
        pytest.param(
            b'{"runtimes": {"gpu-env": {"path": "/old"}}, "debug": true}',
            {"runtimes": {"gpu-env": OURS}, "debug": True},
            id="same-name-replaced",
        ),
    ],
)
def test_daemon_json_merge(current: bytes | None, expected: dict[str, Any]) -> None:
    """Our runtime is added under runtimes; no other key changes."""
    assert json.loads(merge_daemon_json(current, "daemon.json")) == expected


@pytest.mark.parametrize(
    ("current", "message"),
    [
        pytest.param(b"{", r"^daemon.json: not valid JSON \(.*\); fix it first$", id="not-json"),
        pytest.param(b"[]", r"^daemon.json: must hold a JSON object; fix it first$", id="not-object"),
        pytest.param(
            b'{"runtimes": []}', r"^daemon.json: runtimes must be an object; fix it first$", id="bad-runtimes"
        ),
        pytest.param(
            b'{"runtimes": {"x": {}}}',
            r"^daemon.json: would not be valid: \$.runtimes.x: missing required property 'path'$",
            id="other-runtime-invalid",
        ),
    ],
)
def test_daemon_json_merge_refuses(current: bytes, message: str) -> None:
    """A daemon.json install cannot merge into safely is named and left alone."""
    with pytest.raises(InstallError, match=message):
        merge_daemon_json(current, "daemon.json")


@pytest.mark.parametrize(
    ("previous", "edit", "expected"),
    [
        pytest.param(None, None, None, id="created-then-removed"),
        pytest.param(OTHER_DAEMON_JSON, None, OTHER_DAEMON_JSON, id="restored-byte-for-byte"),
        pytest.param(
            b'{"runtimes": {"gpu-env": {"path": "/old"}}}',
            None,
            b'{"runtimes": {"gpu-env": {"path": "/old"}}}',
            id="earlier-value-restored",
        ),
        pytest.param(
            OTHER_DAEMON_JSON,
            {"debug": True},
            {"log-driver": "json-file", "runtimes": {"other": {"path": "/opt/other"}}, "debug": True},
            id="later-edit-kept",
        ),
        pytest.param(None, {"debug": True}, {"debug": True}, id="created-then-edited"),
        pytest.param(b"{}", {"debug": True}, {"debug": True}, id="empty-runtimes-dropped"),
    ],
)
def test_daemon_json_unmerge(
    previous: bytes | None, edit: dict[str, Any] | None, expected: bytes | dict[str, Any] | None
) -> None:
    """Uninstall takes out only our runtime: the file comes back as it was, keeping edits made since."""
    merged = json.loads(merge_daemon_json(previous, "daemon.json"))
    current = json.dumps({**merged, **(edit or {})}).encode()
    result = unmerge_daemon_json(current, previous, "daemon.json")
    if isinstance(expected, dict):
        assert result is not None
        assert json.loads(result) == expected
    else:
        assert result == expected


# --- the wrappers ----------------------------------------------------------------------------------------


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    """An executable that prints its arguments and its environment, standing in for the interpreter."""
    path = tmp_path / "bin dir" / "python's"
    path.parent.mkdir()
    path.write_text(
        '#!/bin/sh\nfor a in "$@"; do printf "arg=%s\\n" "$(printf %s "$a" | tr "\\n" "\\001")"; done\n'
        'env | sort | sed "s/^/env=/"\n'
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("config", "caller", "expected_env"),
    [
        pytest.param(
            None,
            {"LD_PRELOAD": "/evil.so", "PYTHONPATH": "/evil", "HOME": "/root", "XDG_CONFIG_HOME": "/xdg"},
            {"PATH": paths.FIXED_PATH, "XDG_CONFIG_HOME": "/xdg"},
            id="hook-drops-everything-but-config-lookup",
        ),
        pytest.param(
            None,
            {"NVIDIA_CTK_CONFIG_FILE_PATH": "/etc/x.toml", "XDG_CONFIG_HOME": ""},
            {"PATH": paths.FIXED_PATH, "NVIDIA_CTK_CONFIG_FILE_PATH": "/etc/x.toml"},
            id="empty-variable-dropped",
        ),
        pytest.param(
            "/etc/my config.toml",
            {"NVIDIA_CTK_CONFIG_FILE_PATH": "/elsewhere.toml", "PATH": "/evil"},
            {"PATH": paths.FIXED_PATH, "NVIDIA_CTK_CONFIG_FILE_PATH": "/etc/my config.toml"},
            id="baked-config-wins",
        ),
    ],
)
def test_hook_wrapper_runs_isolated_with_a_minimal_environment(
    tmp_path: Path,
    fake_python: Path,
    config: str | None,
    caller: dict[str, str],
    expected_env: dict[str, str],
) -> None:
    """The hook wrapper runs the fixed interpreter -I -S -B -X utf8 with the launch code (the tree's lib on
    sys.path), with only PATH plus the kept variables."""
    wrapper = tmp_path / "wrapper"
    wrapper.write_bytes(build_hook_wrapper("w", python=str(fake_python), config=config))
    wrapper.chmod(0o755)
    proc = subprocess.run(
        [str(wrapper), "prestart", "a b"], env=caller, capture_output=True, text=True, check=True
    )
    lines = proc.stdout.splitlines()
    args = [line[4:].replace("\x01", "\n") for line in lines if line.startswith("arg=")]
    env = dict(line[4:].split("=", 1) for line in lines if line.startswith("env="))
    code = build_code(HOOK_ENTRY, "gpu-env-hook", tree=paths.RUNTIME_TREE)
    assert args == ["-I", "-S", "-B", "-X", "utf8", "-c", code, "prestart", "a b"]
    env.pop("PWD", None)  # set by the fake interpreter's own shell
    assert env == expected_env


def test_installed_wrapper_ignores_a_shadowing_pythonpath(
    node: Path, install: Install, tmp_path: Path
) -> None:
    """A PYTHONPATH holding another ``hook`` package changes nothing: the hook runs from the installed tree
    (here the scratch node's, named in a wrapper built for it)."""
    shadow = tmp_path / "shadow" / "hook"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    (shadow / "__main__.py").write_text("raise SystemExit('shadowed')\n")
    install("podman")
    wrapper = tmp_path / "gpu-env-hook"
    wrapper.write_bytes(build_hook_wrapper("w", python=PYTHON, tree=str(node / "opt/gpu-env-hook")))
    wrapper.chmod(0o755)
    env = {"PYTHONPATH": str(shadow.parent), "PYTHONHOME": "/nonexistent", "PYTHONSTARTUP": str(shadow)}
    proc = subprocess.run(
        [str(wrapper), "-version"], env=env, cwd=shadow.parent, capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "gpu-env-hook version 0.1.0\n", "")


# --- install then uninstall ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("installs", "uninstalls"),
    [
        pytest.param([("podman", {})], ["podman"], id="podman"),
        pytest.param([("podman", {"precreate": True, "as_nvidia_hook": True})], ["podman"], id="podman-all"),
        pytest.param([("crio", {})], ["crio"], id="crio"),
        pytest.param([("containerd", {})], ["containerd"], id="containerd"),
        pytest.param([("docker", {"as_nvidia_hook": True})], ["docker"], id="docker-alias-replaced"),
        pytest.param([("docker", {}), ("docker", {})], ["docker"], id="docker-installed-twice"),
        pytest.param(
            [("podman", {"precreate": True}), ("podman", {})], ["podman"], id="reinstall-drops-precreate"
        ),
        pytest.param(
            [("podman", {"hooks_dir": ETC_HOOKS}), ("crio", {}), ("docker", {}), ("containerd", {})],
            ["docker", "podman", "containerd", "crio"],
            id="four-engines-shuffled",
        ),
        pytest.param(
            [("podman", {"hooks_dir": ETC_HOOKS}), ("crio", {})],
            ["podman", "crio"],
            id="podman-and-crio-first-installed-first-out",
        ),
        pytest.param(
            [("podman", {"hooks_dir": ETC_HOOKS}), ("crio", {})],
            ["crio", "podman"],
            id="podman-and-crio-last-installed-first-out",
        ),
    ],
)
def test_uninstall_leaves_the_node_as_it_was(
    node: Path, install: Install, installs: list[tuple[str, dict[str, Any]]], uninstalls: list[str]
) -> None:
    """install then uninstall, in any order and for any engines, leaves the tree byte for byte as before."""
    before = snapshot(node)
    for engine, options in installs:
        install(engine, **options)
    assert snapshot(node) != before
    for engine in uninstalls:
        write_uninstall(engine, str(node))
    assert snapshot(node) == before


def test_uninstall_restores_a_replaced_file_with_mode_and_owner(node: Path, install: Install) -> None:
    """A file install replaced comes back with its bytes, mode and owner."""
    alias = node / "usr/local/bin/nvidia-container-runtime-hook"
    alias.unlink()
    alias.write_bytes(b"#!/bin/sh\nexit 0\n")
    alias.chmod(0o750)
    os.chown(alias, 12, 34)
    before = snapshot(node)
    install("podman", as_nvidia_hook=True)
    assert b"gpu-env-hook install" in alias.read_bytes()
    write_uninstall("podman", str(node))
    assert snapshot(node) == before


def test_uninstall_keeps_edits_made_since(node: Path, install: Install) -> None:
    """A wrapper changed since install is left and named; daemon.json keeps keys added since."""
    install("docker")
    wrapper = Path(rooted(str(node), paths.HOOK_WRAPPER))
    wrapper.write_text("#!/bin/sh\n# mine now\n")
    daemon = node / "etc/docker/daemon.json"
    daemon.write_text(json.dumps({**json.loads(daemon.read_text()), "debug": True}))
    lines = write_uninstall("docker", str(node))
    assert f"left {wrapper}: changed since install; remove it by hand if nothing needs it" in lines
    assert wrapper.read_text() == "#!/bin/sh\n# mine now\n"
    assert json.loads(daemon.read_text()) == {**json.loads(OTHER_DAEMON_JSON), "debug": True}
    assert not (node / "var/lib/gpu-env-hook").exists()


def test_dry_run_writes_nothing(node: Path) -> None:
    """--dry-run prints each file it would write and leaves the tree untouched."""
    before = snapshot(node)
    options = InstallOptions(engine="docker", python=PYTHON, root=str(node), as_nvidia_hook=True)
    lines = write_install(options, dry_run=True)
    assert snapshot(node) == before
    written = [line for line in lines if line.startswith("would write ")]
    tree = f"{node}{paths.RUNTIME_TREE}"
    assert re.fullmatch(
        rf"would write {re.escape(tree)}/0\.1\.0-[0-9a-f]{{12}} \(\d+ files: the package the engines run\) "
        rf"and point {re.escape(tree)}/current at it",
        written.pop(0),
    )
    assert written == [
        f"would write {node}{paths.HOOK_WRAPPER} (mode 0755):",
        f"would write {node}{paths.runtime_wrapper('docker')} (mode 0755):",
        f"would write {node}{paths.LAUNCH_SCRIPT} (mode 0644):",
        f"would write {node}{paths.NVIDIA_HOOK_ALIAS} (mode 0755):",
        f"would write {node}{paths.TMPFILES_CONF} (mode 0644):",
        f"would write {node}{paths.DOCKER_DAEMON_JSON} (mode 0600):",
        f"would write {node}/var/lib/gpu-env-hook/install-docker.json (what uninstall undoes)",
    ]
    assert '            "gpu-env": {' in lines


def test_uninstall_removes_the_cdi_spec_cache(node: Path, install: Install) -> None:
    """The last uninstall removes the decoded-spec caches the stages made: the default one under /run and
    the one the config names (their entries only: a file of another shape keeps its directory)."""
    config = node / "etc/gpu-env.toml"
    config.write_text('[gpu-env.cdi]\nspec-cache = "/var/cache/gpu-env-cdi"\n')
    install("docker", config="/etc/gpu-env.toml")
    default, moved = Path(rooted(str(node), paths.CDI_SPEC_CACHE_DIR)), node / "var/cache/gpu-env-cdi"
    for cache in (default, moved):
        cache.mkdir(mode=0o700, parents=True)
        (cache / "%2Fetc%2Fcdi%2Fnvidia.yaml.json").write_text("{}")
    (moved / "notes.txt").write_text("not the cache's")
    lines = write_uninstall("docker", str(node), dry_run=True)
    assert f"would remove the CDI spec cache {default}" in lines
    lines = write_uninstall("docker", str(node))
    assert f"removed the CDI spec cache {default}" in lines
    assert f"removed directory {node}{paths.RUN_DIR}" in lines
    assert not default.parent.exists()
    assert sorted(path.name for path in moved.iterdir()) == ["notes.txt"]


def test_uninstall_dry_run_changes_nothing(node: Path, install: Install) -> None:
    """uninstall --dry-run says what it would do and does none of it."""
    install("crio")
    before = snapshot(node)
    lines = write_uninstall("crio", str(node), dry_run=True)
    assert snapshot(node) == before
    assert f"would remove {node}/etc/crio/crio.conf.d/99-gpu-env-hook.conf" in lines


# --- refusals --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            {"engine": "lxc"}, r"^--engine lxc: must be one of podman, crio, containerd, docker$", id="engine"
        ),
        pytest.param(
            {"engine": "docker", "precreate": True},
            r"^--precreate: only podman runs precreate hooks; use it with --engine podman$",
            id="precreate-not-podman",
        ),
        pytest.param(
            {"engine": "podman", "hooks_dir": "hooks.d"},
            r"^--hooks-dir hooks.d: must be an absolute path$",
            id="hooks-dir-relative",
        ),
        pytest.param(
            {"engine": "podman", "config": "config.toml"},
            r"^--config config.toml: must be an absolute path$",
            id="config-relative",
        ),
        pytest.param(
            {"engine": "podman", "config": "/etc/none.toml"},
            r"^--config /etc/none.toml: no file at .*/node/etc/none.toml$",
            id="config-missing",
        ),
        pytest.param(
            {"engine": "podman", "python": "python3"},
            r"^--python python3: must be an absolute path$",
            id="python-relative",
        ),
    ],
)
def test_install_refusals(node: Path, options: dict[str, Any], message: str) -> None:
    """Wrong options are refused with one line naming the option, before anything is written."""
    before = snapshot(node)
    with pytest.raises(InstallError, match=message):
        write_install(InstallOptions(**{"python": PYTHON, "root": str(node), **options}))
    assert snapshot(node) == before


def test_install_refuses_a_missing_interpreter_on_this_node() -> None:
    """On the node itself (root /) the wrappers' interpreter must exist."""
    options = InstallOptions(engine="podman", python="/nonexistent/python3", root="/")
    with pytest.raises(InstallError, match=r"^--python /nonexistent/python3: no executable file there$"):
        write_install(options, dry_run=True)


def test_install_refuses_an_interpreter_that_cannot_run(tmp_path: Path) -> None:
    """An executable file the kernel cannot run is one line with the system's reason (no errno, no repr)."""
    python = tmp_path / "python3"
    python.write_bytes(b"\x00not a program\n")
    python.chmod(0o755)
    options = InstallOptions(engine="podman", python=str(python), root="/")
    with pytest.raises(InstallError) as caught:
        write_install(options, dry_run=True)
    assert str(caught.value) == f"--python {python}: cannot run it: exec format error"


def test_install_warns_about_an_interpreter_not_yet_under_root(node: Path) -> None:
    """Under another root (image build, DaemonSet) a missing interpreter is a warning, not a refusal."""
    lines = write_install(InstallOptions(engine="podman", python="/opt/py/bin/python3", root=str(node)))
    assert (
        f"warning: no executable at {node}/opt/py/bin/python3 yet; the engines run /opt/py/bin/python3"
        in lines
    )


def test_install_refuses_to_overwrite_another_engines_different_wrapper(node: Path, install: Install) -> None:
    """Two engines share the wrappers, so they must be installed with the same options."""
    install("podman")
    before = snapshot(node)
    with pytest.raises(
        InstallError,
        match=(
            r"^/usr/local/libexec/gpu-env-hook/gpu-env-hook: `install --engine podman` wrote it with other "
            r"options; install with the same options, or uninstall --engine podman first$"
        ),
    ):
        install("docker", config="/etc/nvidia-container-runtime/config.toml")
    assert snapshot(node) == before


@pytest.mark.parametrize(
    "uninstalls",
    [
        pytest.param(["crio", "containerd"], id="crio-first"),
        pytest.param(["containerd", "crio"], id="containerd-first"),
    ],
)
def test_crio_on_crun_and_containerd_on_runc_share_a_node(
    node: Path, install: Install, uninstalls: list[str]
) -> None:
    """Each engine's config names its own runtime wrapper, which carries that engine's name and runtime, so
    CRI-O on crun and containerd on runc install side by side; uninstalling each restores the bytes."""
    before = snapshot(node)
    install("crio", runtime="/usr/bin/crun")
    install("containerd", runtime="/usr/sbin/runc")
    crio_wrapper, containerd_wrapper = paths.runtime_wrapper("crio"), paths.runtime_wrapper("containerd")
    assert crio_wrapper != containerd_wrapper
    dropin = tomllib.loads((node / "etc/crio/crio.conf.d/99-gpu-env-hook.conf").read_text())
    assert dropin["crio"]["runtime"]["runtimes"][paths.RUNTIME_HANDLER]["runtime_path"] == crio_wrapper
    assert f'BinaryName = "{containerd_wrapper}"' in (node / "etc/containerd/config.toml").read_text()
    for engine, wrapper, runtime in (
        ("crio", crio_wrapper, "/usr/bin/crun"),
        ("containerd", containerd_wrapper, "/usr/sbin/runc"),
    ):
        text = (node / wrapper.lstrip("/")).read_text()
        assert f"\nruntime={runtime}\n" in text
        assert f"\nGPU_ENV_HOOK_ENGINE={engine}\nexport GPU_ENV_HOOK_ENGINE\n" in text
    for engine in uninstalls:
        write_uninstall(engine, str(node))
    assert snapshot(node) == before


@pytest.mark.parametrize("engine", ["podman", "crio"])
def test_hooks_json_names_its_engine_and_the_hook_wrapper_lets_it_through(
    node: Path, install: Install, engine: str
) -> None:
    """The hooks JSON starts the interpreter itself (-I -S -B -X utf8, the launch script install wrote, the
    refusal log) with a fixed environment naming the engine (GPU_ENV_HOOK_ENGINE) and the hook's timeout;
    the hook wrapper, which builds its environment from scratch, keeps that variable."""
    install(engine)
    document = json.loads((node / "usr/share/containers/oci/hooks.d/gpu-env-hook.json").read_text())
    code = build_code(HOOK_ENTRY, "gpu-env-hook", tree=paths.RUNTIME_TREE)
    assert (node / paths.LAUNCH_SCRIPT.lstrip("/")).read_text() == code
    refusals = ["-refusal-log", paths.REFUSAL_LOG]
    assert document["hook"] == {
        "path": PYTHON,
        "args": [PYTHON, "-I", "-S", "-B", "-X", "utf8", paths.LAUNCH_SCRIPT, *refusals, "prestart"],
        "env": [f"PATH={paths.FIXED_PATH}", f"GPU_ENV_HOOK_ENGINE={engine}"],
        "timeout": 60,
    }
    wrapper = (node / paths.HOOK_WRAPPER.lstrip("/")).read_text()
    assert '${GPU_ENV_HOOK_ENGINE:+"GPU_ENV_HOOK_ENGINE=$GPU_ENV_HOOK_ENGINE"}' in wrapper


def test_hooks_json_timeout_comes_from_the_config(node: Path, install: Install) -> None:
    """[gpu-env-hook] timeout of the config the hook reads becomes the hooks JSON's OCI timeout."""
    (node / "etc/nvidia-container-runtime/config.toml").write_text("[gpu-env-hook]\ntimeout = 7\n")
    install("podman")
    document = json.loads((node / "usr/share/containers/oci/hooks.d/gpu-env-hook.json").read_text())
    assert document["hook"]["timeout"] == 7


def test_podman_and_crio_refuse_to_share_one_hooks_json(node: Path, install: Install) -> None:
    """The hooks JSON names its engine (GPU_ENV_HOOK_ENGINE): the second engine into the same directory is
    refused with the way out, and nothing is written."""
    install("crio")
    before = snapshot(node)
    with pytest.raises(
        InstallError,
        match=(
            r"^/usr/share/containers/oci/hooks.d/gpu-env-hook.json: `install --engine crio` wrote it for crio; "
            r"podman and CRI-O each need their own \(it names the engine whose annotations pin env files\): "
            r"install podman with --hooks-dir /etc/containers/oci/hooks.d \(podman reads it after, and over, "
            r"/usr/share/containers/oci/hooks.d, CRI-O's\)$"
        ),
    ):
        install("podman")
    assert snapshot(node) == before


def test_install_refuses_a_directory_in_the_way(node: Path, install: Install) -> None:
    """A directory where a file goes is named, not replaced."""
    (node / "etc/crio/crio.conf.d/99-gpu-env-hook.conf").mkdir(parents=True)
    with pytest.raises(
        InstallError,
        match=rf"^{node}/etc/crio/crio.conf.d/99-gpu-env-hook.conf: exists and is not a regular file; move it away first$",
    ):
        install("crio")


def test_uninstall_refuses_when_not_installed(node: Path) -> None:
    """uninstall without a manifest says so."""
    with pytest.raises(
        InstallError,
        match=rf"^--engine crio: not installed under {node} \(no {node}/var/lib/gpu-env-hook/install-crio.json\)$",
    ):
        write_uninstall("crio", str(node))


def test_uninstall_refuses_a_manifest_it_did_not_write(node: Path) -> None:
    """A damaged manifest is named; nothing is removed on its say-so."""
    (node / "var/lib/gpu-env-hook").mkdir(parents=True)
    (node / "var/lib/gpu-env-hook/install-crio.json").write_text(
        '{"version": 1, "engine": "crio", "files": []}'
    )
    with pytest.raises(
        InstallError,
        match=(
            rf"^{node}/var/lib/gpu-env-hook/install-crio.json: not a manifest install wrote "
            r"\(\$: missing required property 'directories'\); remove it by hand$"
        ),
    ):
        write_uninstall("crio", str(node))


# --- the command line ------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -I -m hook ARGS``."""
    return subprocess.run(
        [PYTHON, "-I", "-m", "hook", *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_cli_install_and_uninstall(node: Path) -> None:
    """The commands are wired into gpu-env-hook: install prints what it wrote, uninstall undoes it."""
    before = snapshot(node)
    proc = run_cli("install", "--engine", "crio", "--root", str(node))
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {node}{paths.HOOK_WRAPPER}" in proc.stdout.splitlines()
    proc = run_cli("uninstall", "--engine", "crio", "--root", str(node))
    assert proc.returncode == 0, proc.stderr
    assert snapshot(node) == before


def test_cli_install_error_is_one_line(node: Path) -> None:
    """A refusal is one line on stderr with exit status 1."""
    proc = run_cli("install", "--engine", "crio", "--precreate", "--root", str(node))
    assert (proc.returncode, proc.stdout) == (1, "")
    assert (
        proc.stderr
        == "gpu-env-hook: --precreate: only podman runs precreate hooks; use it with --engine podman\n"
    )


@pytest.mark.parametrize(
    ("sockets", "plain_files", "engine"),
    [
        pytest.param(["run/crio/crio.sock"], [], "crio", id="crio"),
        pytest.param(["var/run/crio/crio.sock"], [], "crio", id="crio-under-var-run"),
        pytest.param(["run/containerd/containerd.sock"], [], "containerd", id="containerd"),
        pytest.param(
            ["run/containerd/containerd.sock", "run/crio/crio.sock"], [], "crio", id="both-crio-first"
        ),
        pytest.param(
            ["run/containerd/containerd.sock"], ["run/crio/crio.sock"], "containerd", id="crio-not-a-socket"
        ),
    ],
)
def test_cli_engine_auto_chooses_by_the_nodes_socket_and_says_so(
    node: Path, sockets: list[str], plain_files: list[str], engine: str
) -> None:
    """--engine auto installs for the engine whose CRI socket the node has (CRI-O first), says which on its
    first line, and uninstall --engine auto undoes that install."""
    for name in [*sockets, *plain_files]:
        (node / name).parent.mkdir(parents=True, exist_ok=True)
    before = snapshot(node)
    listeners = []
    try:
        for name in sockets:
            listener = socket.socket(socket.AF_UNIX)
            listeners.append(listener)
            listener.bind(str(node / name))
        for name in plain_files:
            (node / name).write_text("")
        proc = run_cli("install", "--engine", "auto", "--root", str(node))
        assert proc.returncode == 0, proc.stderr
        found = next(name for name in ENGINE_SOCKETS_IN_ORDER if name in sockets)
        assert proc.stdout.splitlines()[0] == f"engine: {engine} (found {node}/{found})"
        assert (node / f"var/lib/gpu-env-hook/install-{engine}.json").is_file()
        proc = run_cli("uninstall", "--engine", "auto", "--root", str(node))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[0] == f"engine: {engine} (found {node}/{found})"
        for name in [*sockets, *plain_files]:
            (node / name).unlink()
    finally:
        for listener in listeners:
            listener.close()
    assert snapshot(node) == before


ENGINE_SOCKETS_IN_ORDER = ("run/crio/crio.sock", "var/run/crio/crio.sock", "run/containerd/containerd.sock")


def test_cli_engine_auto_refuses_a_node_without_a_cri_socket(node: Path) -> None:
    """No CRI-O or containerd socket: one line naming where it looked, nothing written."""
    before = snapshot(node)
    for command in ("install", "uninstall"):
        proc = run_cli(command, "--engine", "auto", "--root", str(node))
        assert (proc.returncode, proc.stdout) == (1, "")
        assert proc.stderr == (
            f"gpu-env-hook: --engine auto: no CRI-O or containerd socket under {node}/run; give --engine\n"
        )
    assert snapshot(node) == before


def test_tree_is_byte_compiled_by_the_node_interpreter(node: Path) -> None:
    """When the interpreter the engines run is already beneath --root, it byte-compiles the new version
    (its own cache tag), so no container start pays the compile."""
    real = Path(os.path.realpath(PYTHON))
    (node / "usr/bin").mkdir(parents=True)
    shutil.copy2(real, node / "usr/bin/python3")
    write_install(InstallOptions(engine="podman", python="/usr/bin/python3", root=str(node)))
    (version,) = [path for path in (node / "opt/gpu-env-hook").iterdir() if path.name != "current"]
    compiled = list((version / "lib/hook/stages/__pycache__").glob("shim.*.pyc"))
    assert compiled, sorted(p.name for p in (version / "lib/hook/stages").iterdir())
    assert sorted(p.name for p in (version / "lib").iterdir()) == ["hook", "yaml"]


def test_tree_without_the_node_interpreter_is_not_compiled(node: Path) -> None:
    """An interpreter not beneath --root yet: no .pyc (the first start compiles)."""
    write_install(InstallOptions(engine="podman", python="/usr/bin/python3", root=str(node)))
    lib = node / "opt/gpu-env-hook/current/lib"
    assert sorted(p.name for p in lib.iterdir()) == ["hook", "yaml"]
    assert not (lib / "hook/__pycache__").exists()


# --- the env-file directory and the directories install writes into -----------------------------------------

ENV_DIR = "/run/nvidia-env"


def test_install_creates_the_env_directory_and_its_tmpfiles_entry(node: Path, install: Install) -> None:
    """install creates the env-file directory root-owned 0700 and a tmpfiles.d entry that recreates it at
    boot; uninstall removes the entry and the directory it made (empty)."""
    install("containerd")
    env_dir = Path(rooted(str(node), ENV_DIR))
    info = env_dir.stat()
    assert (info.st_mode & 0o7777, info.st_uid, info.st_gid) == (0o700, 0, 0)
    tmpfiles = Path(rooted(str(node), paths.TMPFILES_CONF))
    assert tmpfiles.read_text().splitlines()[-1] == f"d {ENV_DIR} 0700 root root -"
    write_uninstall("containerd", str(node))
    assert not tmpfiles.exists()
    assert not env_dir.exists()


def test_uninstall_keeps_an_env_directory_it_did_not_make_or_that_holds_files(
    node: Path, install: Install
) -> None:
    """The env directory goes only when install made it and it is empty: a device plugin's files keep it,
    and one that was there before install stays whatever it holds."""
    install("docker")
    env_dir = Path(rooted(str(node), ENV_DIR))
    (env_dir / "pod.env").write_text("A=1\n")
    lines = write_uninstall("docker", str(node))
    assert f"kept directory {env_dir}: it holds files install did not write" in lines
    (env_dir / "pod.env").unlink()
    install("docker")
    write_uninstall("docker", str(node))
    assert env_dir.is_dir()


def test_env_directory_stays_while_another_engine_is_installed(node: Path, install: Install) -> None:
    """Two engines share the env directory and the tmpfiles.d entry: both stay until the last uninstall."""
    install("containerd")
    install("docker")
    env_dir = Path(rooted(str(node), ENV_DIR))
    tmpfiles = Path(rooted(str(node), paths.TMPFILES_CONF))
    write_uninstall("containerd", str(node))
    assert env_dir.is_dir()
    assert tmpfiles.is_file()
    write_uninstall("docker", str(node))
    assert not env_dir.exists()
    assert not tmpfiles.exists()


@pytest.mark.parametrize(
    ("directory", "mode", "uid", "problem"),
    [
        pytest.param(
            paths.RUNTIME_TREE, 0o777, 0, "must not be group- or world-writable (mode 0777)", id="tree-0777"
        ),
        pytest.param(
            paths.LIBEXEC_DIR,
            0o755,
            1000,
            "must be owned by root (uid 0), is owned by uid 1000",
            id="libexec-other-owner",
        ),
        pytest.param(
            "/usr/local/libexec",
            0o775,
            0,
            "must not be group- or world-writable (mode 0775)",
            id="parent-group-writable",
        ),
        pytest.param(
            "/etc/tmpfiles.d",
            0o1777,
            0,
            "must not be group- or world-writable (mode 1777)",
            id="sticky-target",
        ),
    ],
)
def test_install_refuses_loose_directories_it_would_write_into(
    node: Path, directory: str, mode: int, uid: int, problem: str
) -> None:
    """A directory install would write into (or one above it) that is not root-owned or that others can
    write to is refused in one line, and nothing is written."""
    where = Path(rooted(str(node), directory))
    where.mkdir(parents=True, exist_ok=True)
    os.chown(where, uid, 0)
    where.chmod(mode)
    before = snapshot(node)
    options = InstallOptions(engine="containerd", python=PYTHON, root=str(node))
    verb = "beneath" if directory == "/usr/local/libexec" else "into"
    with pytest.raises(InstallError) as caught:
        write_install(options)
    assert str(caught.value) == (
        f"{where} {problem}; install writes {verb} it (whoever can write there runs code as root): "
        "chown root:root and chmod go-w it first"
    )
    assert snapshot(node) == before


def test_directories_install_creates_are_root_owned_and_not_writable_by_others(
    node: Path, install: Install
) -> None:
    """Every directory install creates is root-owned and writable by root alone."""
    before = {path for path in node.rglob("*") if path.is_dir()}
    install("podman", precreate=True)
    made = [path for path in node.rglob("*") if path.is_dir() and path not in before]
    assert made
    for path in made:
        info = path.stat()
        assert (info.st_uid, info.st_mode & 0o022) == (0, 0), path


# --- install again: the options of the last install are reused -------------------------------------------


def test_install_again_keeps_the_options_of_the_last_install_and_says_so(node: Path) -> None:
    """An upgrade (install again) without --precreate keeps the precreate hook and says which options it
    reused; --no-precreate takes it off and says what changed; the record holds the options used."""
    precreate_json = node / "usr/share/containers/oci/hooks.d" / paths.PRECREATE_JSON_NAME
    proc = run_cli("install", "--engine", "podman", "--precreate", "--python", PYTHON, "--root", str(node))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((node / "var/lib/gpu-env-hook/install-podman.json").read_text())
    assert manifest["options"]["precreate"] is True
    assert manifest["options"]["python"] == PYTHON
    proc = run_cli("install", "--engine", "podman", "--root", str(node))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == [
        f"kept --python {PYTHON} from the last install (--python VALUE changes it)",
        "kept --precreate from the last install (--no-precreate changes it)",
    ]
    assert precreate_json.is_file()
    proc = run_cli("install", "--engine", "podman", "--no-precreate", "--root", str(node))
    assert proc.returncode == 0, proc.stderr
    assert "changed --precreate of the last install to --no-precreate" in proc.stdout.splitlines()
    assert f"remove {precreate_json}" in proc.stdout.splitlines()
    assert not precreate_json.exists()


def test_first_install_reuses_nothing(node: Path) -> None:
    """Without an install record every option is the default, and nothing is said about reuse."""
    from hook.install.reuse import resolve_options

    options, lines = resolve_options("podman", str(node), {"precreate": None}, PYTHON)
    assert (options.precreate, options.python, options.hooks_dir, lines) == (
        False,
        PYTHON,
        paths.OCI_HOOKS_DIRS[0],
        [],
    )


def test_an_upgrade_removes_the_blob_an_earlier_release_left(node: Path) -> None:
    """A version an earlier release wrote held lib/hook.frozen (modules precompiled for its own finder):
    install keeps that version for the creates still running from it, without the blob, and writes none."""
    tree = node / "opt/gpu-env-hook"
    old = tree / "0.0.9-0123456789ab"
    (old / "lib/hook").mkdir(parents=True)
    (old / "lib/hook/__init__.py").write_text("", encoding="utf-8")
    (old / "lib/hook.frozen").write_bytes(b"gpu-env-hook frozen 1\n")
    (old / ".gpu-env-hook-tree").write_text("gpu-env-hook 0.0.9-0123456789ab\n", encoding="utf-8")
    (tree / "current").symlink_to(old.name)
    lines = write_install(InstallOptions(engine="podman", python="/usr/bin/python3", root=str(node)))
    assert f"removed {old}/lib/hook.frozen (no longer used)" in lines
    assert sorted(p.name for p in (old / "lib").iterdir()) == ["hook"]
    current = tree / (tree / "current").readlink()
    assert current != old
    assert sorted(p.name for p in (current / "lib").iterdir()) == ["hook", "yaml"]
