"""How the engines start our Python, proven with real runc through what ``install`` writes.

Each test installs into a scratch ``--root`` from a *copy* of the package (deleted before any container
runs), then runs the installed runtime wrapper in a private mount namespace where the node tree's
``/opt/gpu-env-hook`` and ``/usr/local/libexec/gpu-env-hook`` are at their node paths (on tmpfs mounts:
nothing on the host is touched). So what runs is exactly the node's own tree, with the base interpreter
and ``-I -S``: no checkout, no venv.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from busybox import make_runc_bundle, unique_id
from conftest import REPO, STANDIN_CLI
from runc_hooks import load_record

from hook.util import paths

pytestmark = pytest.mark.integration

RUNC = shutil.which("runc") or "/usr/sbin/runc"
BASE_PYTHON = os.path.abspath(getattr(sys, "_base_executable", None) or sys.executable)  # noqa: PTH100
# Run ``python -I`` with the copy first on sys.path (site on: the cold commands need typer).
INSTALL_FROM_COPY = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import hook; "
    "assert hook.__file__.startswith(sys.path[0]), hook.__file__; "
    "from hook.__main__ import main; raise SystemExit(main(sys.argv[1:]))"
)
ENV_FILE = "NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n"


class Node:
    """A node tree installed from a deleted copy of the package, and how to run things as on that node."""

    def __init__(self, tmp: Path, *, env_dir_name: str = "nvidia-env", extra_config: str = "") -> None:
        self.tmp = tmp
        self.root = tmp / "node"
        self.state = tmp / "runc-root"
        self.record = tmp / "cli-record.json"
        self.env_dir = tmp / env_dir_name
        self.env_dir.mkdir()
        self.python = tmp / "bin" / "python3"  # the interpreter install bakes in: a link the tests can break
        self.python.parent.mkdir()
        self.python.symlink_to(BASE_PYTHON)
        self.config = tmp / "config.toml"
        self.config_text = (
            "[nvidia-container-cli]\n"
            f'path = "{STANDIN_CLI}"\n'
            f'environment = ["STANDIN_RECORD={self.record}"]\n\n'
            "[env-file]\n"
            f"directories = [{json.dumps(str(self.env_dir))}]\n" + extra_config
        )
        self.config.write_text(self.config_text, encoding="utf-8")
        self.ids: list[str] = []

    def install(self, *extra: str, added: str = "", python: str = "") -> subprocess.CompletedProcess[str]:
        """``install --engine docker`` into the node from a copy of ``hook`` (with one more module holding
        ``added`` when given: a changed package) that is deleted after; ``python``: another ``--python``."""
        copy = self.tmp / "copy"
        shutil.copytree(REPO / "hook", copy / "hook", ignore=shutil.ignore_patterns("__pycache__"))
        if added:
            (copy / "hook" / "zz_changed.py").write_text(added)
        self.root.mkdir(exist_ok=True)
        node_config = self.root / str(self.config).lstrip("/")
        node_config.parent.mkdir(parents=True, exist_ok=True)
        node_config.write_text(self.config_text, encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-I", "-c", INSTALL_FROM_COPY, str(copy), "install", "--engine", "docker",
             "--root", str(self.root), "--python", python or str(self.python), "--runtime", RUNC,
             "--config", str(self.config), *extra],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        shutil.rmtree(copy)
        assert proc.returncode == 0, proc.stderr
        return proc

    def namespaced(self, argv: list[str]) -> list[str]:
        """``argv`` in a private mount namespace that sees the node's tree and wrappers at the node paths."""
        script = ["set -e"]
        for over, target in (("/opt", paths.RUNTIME_TREE), ("/usr/local", paths.LIBEXEC_DIR)):
            source = self.root / target.lstrip("/")
            script += [
                f"mount -t tmpfs tmpfs {over}",
                f"mkdir -p {shlex.quote(target)}",
                f"mount --bind {shlex.quote(str(source))} {shlex.quote(target)}",
            ]
        script.append('exec "$@"')
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh", *argv]

    def runtime(
        self, *args: str, env: dict[str, str] | None = None, detach: bool = False, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed runtime wrapper (no PATH, as podman's delete) with ``--root`` first."""
        output = subprocess.DEVNULL if detach else subprocess.PIPE
        return subprocess.run(
            self.namespaced([paths.runtime_wrapper("docker"), "--root", str(self.state), *args]),
            env=env or {},
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            text=True,
            timeout=timeout,
            check=False,
        )

    def new_id(self, prefix: str) -> str:
        """A container id that is force-deleted when the test ends."""
        cid = unique_id(prefix)
        self.ids.append(cid)
        return cid

    def env_file(self, content: str, name: str = "abc.env") -> Path:
        """A root-owned 0644 env file in the accepted directory."""
        path = self.env_dir / name
        path.write_text(content, encoding="utf-8")
        path.chmod(0o644)
        return path


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """An installed node; every container it named is force-deleted afterwards, with runc itself."""
    value = Node(tmp_path)
    yield value
    for cid in value.ids:
        subprocess.run(
            [RUNC, "--root", str(value.state), "delete", "--force", cid], capture_output=True, check=False
        )


def run_env_file_container(node: Node, prefix: str) -> dict[str, Any]:
    """Run a real runc container with the env file through the installed runtime wrapper: it gets the file
    and the hook calls the cli with the file's devices; return the prestart hook the shim added."""
    env_file = node.env_file(ENV_FILE)
    bundle = make_runc_bundle(
        node.tmp / "bundle", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    result = node.runtime("run", "--bundle", str(bundle), node.new_id(prefix))
    assert result.returncode == 0, result.stderr
    assert "USER_CUSTOM_ENV=hello" in result.stdout.splitlines()
    record = load_record(node.record)
    assert record is not None, result.stderr
    assert "--device=0,1" in record["argv"]
    hook: dict[str, Any] = json.loads((bundle / "config.json").read_text())["hooks"]["prestart"][0]
    return hook


def test_installed_tree_runs_without_the_copy_it_came_from(node: Node) -> None:
    """install copies the package into the node's own tree; with that copy deleted, a real runc container
    created through the installed runtime wrapper gets the env file and the hook (started -I -S from the
    tree) calls the cli with the file's devices."""
    report = node.install().stdout
    versions = [p for p in (node.root / "opt/gpu-env-hook").iterdir() if p.name != "current"]
    assert len(versions) == 1
    assert (node.root / "opt/gpu-env-hook/current").readlink() == Path(versions[0].name)
    assert f"switched {node.root}/opt/gpu-env-hook/current to {versions[0].name}" in report
    hook = run_env_file_container(node, "launch-tree")
    lib = f"{paths.RUNTIME_TREE}/{versions[0].name}/lib"
    assert hook["args"][:8] == [str(node.python), "-I", "-S", "-B", "-X", "utf8", "-c", hook["args"][7]]
    assert repr(lib).strip("'") in hook["args"][7]
    assert hook["timeout"] == 60


def test_tree_interpreter_runs_a_container_and_adds_its_hook_in_the_loader_form(node: Node) -> None:
    """``install --python tree``: the runtime wrapper starts the tree's copy of the interpreter through its
    loader; a real runc container gets the env file, and the hook the shim adds to config.json is started the
    same way (the loader, the tree's libraries, -I -S) and calls the cli with the file's devices."""
    from hook.launcher import tree_command

    node.install(python="tree")
    wrapper = (node.root / paths.runtime_wrapper("docker").lstrip("/")).read_text()
    assert shlex.join(tree_command(paths.RUNTIME_TREE)) in wrapper
    hook = run_env_file_container(node, "launch-tree-python")
    command = tree_command(paths.RUNTIME_TREE)
    assert hook["path"] == command[0]
    assert hook["args"][: len(command) + 5] == [*command, "-I", "-S", "-B", "-X", "utf8"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Node:
    """One installed node for the tests that only run its hook wrapper (no container)."""
    value = Node(tmp_path_factory.mktemp("installed"))
    value.install()
    return value


# A command for people started through the node's hook wrapper: the node's tree has no typer.
ELSEWHERE = (
    "gpu-env-hook {}: the node's copy of gpu-env-hook serves the engines (typer is not here); run it where pip "
    "installed gpu-env-hook, or in the DaemonSet's pod: kubectl -n gpu-env-hook exec ds/gpu-env-hook -- "
    "gpu-env-hook {} (the node's / is at /host there)\n"
)


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        pytest.param(["doctor"], "doctor", id="doctor"),
        pytest.param(["resolve", "--bundle", "/nonexistent"], "resolve", id="resolve"),
        pytest.param(["validate"], "validate", id="validate"),
        pytest.param(["config", "default"], "config default", id="config-default"),
        pytest.param(["cdi", "list"], "cdi list", id="cdi-list"),
        pytest.param(["env-file", "gc", "--dry-run"], "env-file gc", id="env-file-gc"),
        pytest.param(["env-file", "path"], "env-file path", id="env-file-path-usage-error"),
        pytest.param(["install", "--engine", "docker"], "install", id="install"),
        pytest.param(["uninstall", "--purge"], "uninstall", id="uninstall"),
        pytest.param(["help"], "help", id="help"),
        pytest.param(["--help"], "help", id="dash-dash-help"),
        pytest.param(["doctor", "--help"], "doctor", id="doctor-help"),
        pytest.param(["-debug", "doctor"], "doctor", id="with-a-hook-flag"),
    ],
)
def test_commands_for_people_through_the_node_wrapper_say_where_they_run(
    installed: Node, args: list[str], shown: str
) -> None:
    """The node's hook wrapper (the engines' copy: -I -S, no typer) runs a command for people only to say, in
    one line and with status 1, where it runs, never `internal error: ModuleNotFoundError`."""
    done = subprocess.run(
        installed.namespaced([paths.HOOK_WRAPPER, *args]),
        env={},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", ELSEWHERE.format(shown, shown))


def test_the_node_wrapper_still_runs_what_needs_no_typer(installed: Node) -> None:
    """--version and a device plugin's plain env-file command run from the node's tree as before."""
    version = subprocess.run(
        installed.namespaced([paths.HOOK_WRAPPER, "--version"]),
        env={}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (version.returncode, version.stderr) == (0, ""), version.stdout
    check = subprocess.run(
        installed.namespaced([paths.HOOK_WRAPPER, "env-file", "check", str(installed.env_dir / "none.env")]),
        env={}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert check.returncode == 1
    assert "ModuleNotFoundError" not in check.stdout + check.stderr
    assert "does not exist" in check.stdout + check.stderr, check


def test_reinstall_switches_current_and_keeps_the_previous_version(node: Node) -> None:
    """A changed package becomes a new version; ``current`` moves to it; the previous one stays (a create
    may still import from it); the one before that goes."""
    node.install()
    tree = node.root / "opt/gpu-env-hook"
    first = (tree / "current").readlink()
    names = []
    for round_ in range(2):
        node.install(added=f"# round {round_}\n")
        names.append((tree / "current").readlink())
    assert len({first, *names}) == 3
    assert sorted(p.name for p in tree.iterdir()) == sorted(["current", str(names[0]), str(names[1])])


CONFIG_BREAKS = {
    "missing": None,
    "truncated": '[env-file]\ndirectories = ["/run',
    "invalid-toml": "this is = = not toml\n",
    "env-file-declared-twice": '[env-file]\nvariable = "A"\n[env-file]\nvariable = "B"\n',
}


def break_config(node: Node, how: str) -> None:
    """Break the baked-in config.toml one way (or remove it: it is required once named)."""
    node_config = node.root / str(node.config).lstrip("/")
    for path in (node.config, node_config):
        text = CONFIG_BREAKS[how]
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text, encoding="utf-8")


# Another interpreter than the one install found (an OS upgrade replacing it): the tree is pure Python.
OTHER_PYTHON = "/usr/bin/python3"


@pytest.mark.parametrize("how", [*CONFIG_BREAKS, "interpreter-removed", "interpreter-swapped"])
def test_a_broken_node_still_stops_and_deletes(node: Node, how: str) -> None:
    """With config.toml missing, truncated, invalid or declaring a table twice, or the interpreter removed or
    swapped, state, list, kill and delete of a running container still work: they never start Python.
    A create then fails in one line (no interpreter), or still works (another interpreter: the tree needs
    nothing of the old one)."""
    if how == "interpreter-swapped" and os.path.realpath(OTHER_PYTHON) == os.path.realpath(BASE_PYTHON):
        pytest.skip(f"{OTHER_PYTHON} is the interpreter the tests run")
    node.install()
    bundle = make_runc_bundle(node.tmp / "bundle", args=["sleep", "600"], env=["PATH=/bin"])
    cid = node.new_id(f"launch-{how}")
    started = node.runtime("run", "--detach", "--bundle", str(bundle), cid, detach=True)
    assert started.returncode == 0
    if how in CONFIG_BREAKS:
        break_config(node, how)
    else:
        node.python.unlink()
        if how == "interpreter-swapped":
            node.python.symlink_to(OTHER_PYTHON)
    state = node.runtime("state", cid)
    assert state.returncode == 0, state.stderr
    assert json.loads(state.stdout)["status"] == "running"
    listed = node.runtime("list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert cid in [entry["id"] for entry in json.loads(listed.stdout)]
    for args in (["kill", cid, "KILL"], ["delete", "--force", cid]):
        done = node.runtime(*args)
        assert done.returncode == 0, (args, done.stderr)
    gone = node.runtime("state", cid)
    assert gone.returncode != 0
    assert "does not exist" in gone.stderr
    if how == "interpreter-removed":
        created = node.runtime("create", "--bundle", str(bundle), node.new_id("launch-create"))
        assert (created.returncode, created.stdout) == (1, "")
        assert created.stderr == (
            f"gpu-env-runtime: cannot create the container: the interpreter {node.python} is not there (or not "
            "executable); run `gpu-env-hook install` again\n"
        )
    if how == "interpreter-swapped":
        created = node.runtime(
            "run", "--detach", "--bundle", str(bundle), node.new_id("launch-other"), detach=True
        )
        assert created.returncode == 0


def test_a_config_error_fails_a_gpu_create_in_one_line(node: Node) -> None:
    """A create the config matters for (a GPU container) with an invalid config.toml: one line, exit 1."""
    node.install()
    break_config(node, "env-file-declared-twice")
    bundle = make_runc_bundle(
        node.tmp / "bundle", args=["true"], env=["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"]
    )
    created = node.runtime("create", "--bundle", str(bundle), node.new_id("launch-badcfg"))
    assert (created.returncode, created.stdout) == (1, "")
    assert created.stderr.startswith("gpu-env-runtime: error getting hook config: failed to load config: ")
    assert len(created.stderr.splitlines()) == 1


def test_a_missing_tree_fails_a_create_in_one_line(node: Node) -> None:
    """With the tree's ``current`` link gone, a create fails with the launch code's one line."""
    node.install()
    (node.root / "opt/gpu-env-hook/current").unlink()
    bundle = make_runc_bundle(node.tmp / "bundle", args=["true"], env=["PATH=/bin"])
    created = node.runtime("create", "--bundle", str(bundle), node.new_id("launch-notree"))
    assert (created.returncode, created.stdout) == (1, "")
    assert created.stderr == (
        "gpu-env-runtime: cannot load gpu-env-hook from /opt/gpu-env-hook/current: [Errno 2] No such file or "
        "directory: '/opt/gpu-env-hook/current'\n"
    )


def test_a_hung_cli_is_bounded_by_the_hook_timeout(tmp_path: Path) -> None:
    """A cli that hangs: the create fails after [gpu-env-hook] timeout with runc's line, the cli process is
    gone (runc killed the hook, which was the cli itself), and the container id is free again."""
    node = Node(tmp_path, extra_config="\n[gpu-env-hook]\ntimeout = 2\n")
    node.config_text = node.config_text.replace(
        f'"STANDIN_RECORD={node.record}"', f'"STANDIN_RECORD={node.record}", "STANDIN_SLEEP=300"'
    )
    node.config.write_text(node.config_text, encoding="utf-8")
    node.install()
    bundle = make_runc_bundle(
        node.tmp / "bundle", args=["true"], env=["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"]
    )
    cid = node.new_id("launch-hung")
    try:
        created = node.runtime("create", "--bundle", str(bundle), cid, timeout=60)
        assert created.returncode != 0
        assert "hook ran past specified timeout of 2.0s" in created.stderr, created.stderr
        record = load_record(node.record)
        assert record is not None
        assert (
            not Path(f"/proc/{record['pid']}").exists()
            or "Z" in Path(f"/proc/{record['pid']}/stat").read_text().split()[2]
        )
        state = node.runtime("state", cid)
        assert state.returncode != 0, state.stdout
        assert "does not exist" in state.stderr
    finally:
        subprocess.run(
            [RUNC, "--root", str(node.state), "delete", "--force", cid], capture_output=True, check=False
        )


def iso_8859_1_locale(tmp_path: Path) -> dict[str, str]:
    """Return the environment selecting en_US.ISO-8859-1 (compiled with localedef when not installed)."""
    if (
        "en_US.iso88591"
        in subprocess.run(["locale", "-a"], capture_output=True, text=True, check=False).stdout
    ):
        return {"LANG": "en_US.ISO-8859-1"}
    where = tmp_path / "locales"
    where.mkdir()
    subprocess.run(
        ["localedef", "-i", "en_US", "-f", "ISO-8859-1", str(where / "en_US.ISO-8859-1")],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    return {"LANG": "en_US.ISO-8859-1", "LOCPATH": str(where)}


@pytest.mark.parametrize("locale", ["C", "POSIX", "C.UTF-8", "en_US.ISO-8859-1", "unset"])
def test_a_non_ascii_env_file_path_under_any_locale(tmp_path: Path, locale: str) -> None:
    """The shim finds an env file whose path is not ASCII whatever the locale: paths are UTF-8 bytes."""
    node = Node(tmp_path, env_dir_name="nvidia-env-é-ü")
    node.install()
    env = {"C": {"LC_ALL": "C"}, "POSIX": {"LC_ALL": "POSIX"}, "C.UTF-8": {"LC_ALL": "C.UTF-8"}, "unset": {}}
    caller = env.get(locale) or iso_8859_1_locale(tmp_path)
    env_file = node.env_file("USER_CUSTOM_ENV=hello\n", name="naïve.env")
    bundle = make_runc_bundle(
        node.tmp / "bundle", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    result = node.runtime("run", "--bundle", str(bundle), node.new_id("launch-locale"), env=caller)
    assert result.returncode == 0, result.stderr
    assert "USER_CUSTOM_ENV=hello" in result.stdout.splitlines()
