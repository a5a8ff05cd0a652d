"""The installed tree's precompiled hot-path modules (``lib/hook.frozen``, served by the finder in ``hook/__init__.py``), run as a node runs them.

Each test installs into a scratch ``--root`` whose interpreter is beneath the root (a venv with a copy of
the base interpreter at ``/opt/gpu-env-hook-test-python``), so ``install`` byte-compiles the tree and writes
the blob as on a node; the hook then runs from the oci-hooks.d JSON's own entry in a private mount namespace
where the scratch root's ``/opt`` is at ``/opt`` (nothing on the host is touched). Each run is compared with
the same run after the blob is taken away: what the hook does must not depend on it.
"""

from __future__ import annotations

import json
import marshal
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from busybox import make_runc_bundle, unique_id
from conftest import REPO, STANDIN_CLI

from hook import BLOB, header
from hook.freeze import MODULES
from hook.install import RUNTIME_ENTRY
from hook.launcher import PYTHON_FLAGS, build_code
from hook.util import paths

pytestmark = pytest.mark.integration

BASE_PYTHON = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
NODE_PYTHON_DIR = "/opt/gpu-env-hook-test-python"
NODE_PYTHON = f"{NODE_PYTHON_DIR}/bin/python"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
# Runs the launch code unchanged (``exec``), and on the way out, at the cli's exec or at the process's end,
# writes every loaded module, its loader's type, __file__ and __cached__ to OUT. The cli is not run (its exec
# is replaced).
RECORDER = """\
import posix, sys
def _dump():
    with open(OUT, "w") as fh:
        for name, module in sorted(sys.modules.items()):
            spec = getattr(module, "__spec__", None)
            loader = getattr(spec, "loader", None)
            kind = loader.__name__ if isinstance(loader, type) else type(loader).__name__
            where = [getattr(module, "__file__", None), getattr(module, "__cached__", None)]
            fh.write("\\t".join([name, kind, *map(str, where)]) + "\\n")
def _exec(*args):
    _dump()
    _real_exit(0)
def _exit(code):
    _dump()
    _real_exit(code)
_real_exit = posix._exit
posix.execv = posix.execve = _exec
posix._exit = _exit
try:
    exec(LAUNCH, globals())
finally:
    _dump()
"""
# Fault injection at the stdin boundary: reading the state raises what no stage expects.
BROKEN_STDIN = """\
import sys
class _Broken:
    def read1(self, size):
        raise RuntimeError("injected")
    read = read1
sys.stdin = type("Stdin", (), {"buffer": _Broken()})()
"""
ENV_FILE = "NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n"


@dataclass(frozen=True)
class Run:
    """What one hook process did: its exit status, output, the cli argv it exec'd (None: not run)."""

    returncode: int
    stdout: str
    stderr: str
    cli_argv: list[str] | None


class FrozenNode:
    """A scratch node installed with its interpreter beneath the root, and the hook run as on that node."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.root = tmp / "node"
        self.record = tmp / "cli-record.json"
        self.env_dir = tmp / "nvidia-env"
        self.env_dir.mkdir()
        self.config = tmp / "config.toml"
        config_text = (
            "[nvidia-container-cli]\n"
            f'path = "{STANDIN_CLI}"\n'
            f'environment = ["STANDIN_RECORD={self.record}"]\n\n'
            "[env-file]\n"
            f"directories = [{json.dumps(str(self.env_dir))}]\n"
        )
        node_config = self.root / str(self.config).lstrip("/")
        for path in (self.config, node_config):  # install checks it on the node; the hook reads it here
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(config_text, encoding="utf-8")
        subprocess.run(
            [BASE_PYTHON, "-m", "venv", "--without-pip", "--copies", str(self.root / NODE_PYTHON_DIR.lstrip("/"))],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-I", "-m", "hook", "install", "--engine", "podman", "--root", str(self.root),
             "--python", NODE_PYTHON, "--config", str(self.config), "--runtime", RUNC],
            capture_output=True, text=True, timeout=180, check=False, cwd=REPO,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        entry = json.loads(
            (self.root / paths.OCI_HOOKS_DIRS[0].lstrip("/") / paths.HOOK_JSON_NAME).read_text()
        )
        self.hook_args: list[str] = entry["hook"]["args"][:-1]  # without the stage
        self.hook_env = dict(item.split("=", 1) for item in entry["hook"]["env"])
        self.version = str((self.root / "opt/gpu-env-hook/current").readlink())
        self.node_lib = f"{paths.RUNTIME_TREE}/{self.version}/lib"
        self.lib = self.root / self.node_lib.lstrip("/")

    @property
    def blob(self) -> Path:
        """The installed blob, as this process sees it."""
        return self.lib / BLOB

    def bundle(self, name: str, env: list[str]) -> Path:
        """A bundle whose config.json has ``env`` (and an image's usual PATH)."""
        bundle = self.tmp / name
        (bundle / "rootfs").mkdir(parents=True)
        spec = {"ociVersion": "1.0.2", "process": {"args": ["true"], "env": ["PATH=/bin", *env], "cwd": "/"},
                "root": {"path": "rootfs"}}  # fmt: skip
        (bundle / "config.json").write_text(json.dumps(spec), encoding="utf-8")
        return bundle

    def case(self, name: str) -> Path:
        """The bundle of one container kind: no GPU, NVIDIA_VISIBLE_DEVICES, or an env file."""
        if name == "env-file":
            env_file = self.env_dir / "abc.env"
            env_file.write_text(ENV_FILE, encoding="utf-8")
            env_file.chmod(0o644)
            return self.bundle(name, [f"NVIDIA_ENV_FROM_FILE={env_file}"])
        return self.bundle(
            name, {"non-gpu": [], "nvidia-visible-devices": ["NVIDIA_VISIBLE_DEVICES=0"]}[name]
        )

    def run(self, bundle: Path, *, code: str | None = None, flags: tuple[str, ...] = ()) -> Run:
        """Run the installed hook entry (``code``: another ``-c`` code instead of its own) with
        ``prestart`` in the bundle, as an engine does, in a namespace that sees the node's /opt; restore
        config.json after."""
        spec = (bundle / "config.json").read_bytes()
        args = list(self.hook_args)
        if code is not None:
            args[args.index("-c") + 1] = code
        state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "pid": os.getpid(), "bundle": str(bundle)})
        run = self.namespaced([*args, *flags, "prestart"], cwd=bundle, env=self.hook_env, stdin=state)
        (bundle / "config.json").write_bytes(spec)
        return run

    def namespaced(self, argv: list[str], *, cwd: Path, env: dict[str, str], stdin: str = "") -> Run:
        """Run ``argv`` in a private mount namespace where the node's /opt (its tree and interpreter) is at
        /opt; return what it did and the argv the stand-in cli received, if it ran."""
        self.record.unlink(missing_ok=True)
        script = f'mount --bind {self.root}/opt /opt && exec "$@"'
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
            input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False,
        )  # fmt: skip
        cli_argv = json.loads(self.record.read_text())["argv"][1:] if self.record.exists() else None
        return Run(proc.returncode, proc.stdout, proc.stderr, cli_argv)

    def launch_code(self) -> str:
        """The installed entry's own launch code."""
        return self.hook_args[self.hook_args.index("-c") + 1]

    locations: dict[str, tuple[str, str]]  # of the last ``modules``: {module: (__file__, __cached__)}

    def modules(self, bundle: Path, launch: str | None = None, *, status: int = 0) -> dict[str, str]:
        """Run the hook's launch code (``launch``; default: the installed entry's) recording what it loaded:
        {module: its loader's type}."""
        run = self.run(bundle, code=self.recording(launch or self.launch_code()))
        assert run.returncode == status, run.stderr
        return self.recorded()

    def recording(self, launch: str) -> str:
        """``launch`` run by ``RECORDER`` (``recorded`` reads what it wrote)."""
        out = self.tmp / "modules.txt"
        out.unlink(missing_ok=True)
        return f"OUT = {str(out)!r}\nLAUNCH = {launch!r}\n{RECORDER}"

    def recorded(self) -> dict[str, str]:
        """What the last ``recording`` run loaded: {module: its loader's type} (and ``locations``)."""
        rows = [line.split("\t") for line in (self.tmp / "modules.txt").read_text().splitlines()]
        self.locations = {row[0]: (row[2], row[3]) for row in rows}
        return {row[0]: row[1] for row in rows}

    def without_blob(self) -> Path:
        """Take the blob away (renamed beside it); return where it is now."""
        aside = self.lib / (BLOB + ".aside")
        self.blob.rename(aside)
        return aside


@pytest.fixture
def node(tmp_path: Path) -> FrozenNode:
    """A scratch node installed with its interpreter beneath the root (so the tree is compiled and frozen)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a mount namespace, root-owned env files")
    return FrozenNode(tmp_path)


def is_plain_module(name: str) -> bool:
    """Tell whether ``name`` is one of the package's plain modules (the blob serves no package ``__init__``)."""
    return name.startswith("hook.") and not (REPO / name.replace(".", "/") / "__init__.py").exists()


def served(modules: dict[str, str]) -> set[str]:
    """The modules the blob's finder loaded."""
    return {name for name, loader in modules.items() if loader == "FrozenFinder"}


def test_install_writes_the_blob_for_the_node_interpreter(node: FrozenNode) -> None:
    """install writes lib/hook.frozen (0644) beside the compiled package, for the node's interpreter, with
    no temporary file left; the version's name is still its content's digest (the blob is not part of it)."""
    data = node.blob.read_bytes()
    assert data.startswith(header())
    assert node.blob.stat().st_mode & 0o7777 == 0o644
    assert sorted(p.name for p in node.lib.iterdir()) == ["hook", BLOB, "yaml"]
    from hook.install.tree import collect_tree

    assert node.version == collect_tree().name


@pytest.mark.parametrize("case", ["non-gpu", "nvidia-visible-devices", "env-file"])
def test_hot_modules_come_from_the_blob(node: FrozenNode, case: str) -> None:
    """The installed hook loads the package's hot-path modules through the blob's finder, and exactly the
    modules it loads without the blob (the package itself and the standard library the usual way), less
    ``__future__``: the blob's code has ``from __future__ import annotations`` as a compiler flag."""
    bundle = node.case(case)
    with_blob = node.modules(bundle)
    locations = node.locations
    node.without_blob()
    without = node.modules(bundle)
    assert "__future__" not in with_blob
    without.pop("__future__")
    node.locations.pop("__future__")
    assert sorted(with_blob) == sorted(without)
    assert locations == node.locations  # __file__ and __cached__ as the file loader sets them
    hook_modules = {name for name in with_blob if is_plain_module(name)}
    assert served(with_blob) == hook_modules
    assert hook_modules <= set(MODULES)
    assert {"hook.__main__", "hook.stages.prestart", "hook.util.paths"} <= hook_modules
    assert served(without) == set()
    assert {without[name] for name in hook_modules} == {"SourceFileLoader"}
    assert with_blob["hook"] == "SourceFileLoader"  # the package itself, and its finder, load as usual
    assert {k: v for k, v in with_blob.items() if k not in hook_modules} == {
        k: v for k, v in without.items() if k not in hook_modules
    }


def test_the_hook_the_shim_hands_off_to_uses_the_blob(node: FrozenNode) -> None:
    """The launch code with a fixed package directory (``lib=``: the hook entry the shim adds) installs the
    finder too; its GPU run execs the cli with the same argv as without the blob."""
    bundle = node.case("nvidia-visible-devices")
    code = build_code("hook.__main__", "gpu-env-hook", lib=node.node_lib)
    modules = node.modules(bundle, code)
    assert {"hook.__main__", "hook.stages.prestart", "hook.pipeline.nvcli"} <= served(modules)
    with_blob = node.run(bundle, code=code)
    node.without_blob()
    assert with_blob == node.run(bundle, code=code)
    assert with_blob.cli_argv is not None
    assert "--device=0" in with_blob.cli_argv


@pytest.mark.parametrize("edit", ["appended", "touched"])
def test_an_edited_source_is_imported_from_the_source(node: FrozenNode, edit: str) -> None:
    """A source file changed after install (its size or its modification time) is imported from the
    source, as a stale .pyc is; the other modules still come from the blob."""
    bundle = node.case("nvidia-visible-devices")
    source = node.lib / "hook/stages/prestart.py"
    if edit == "appended":
        with source.open("a", encoding="utf-8") as fh:
            fh.write('\nimport sys as _sys\n_sys.stderr.write("edited\\n")\n')
    else:
        stat = source.stat()
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    modules = node.modules(bundle)
    assert modules["hook.stages.prestart"] == "SourceFileLoader"
    assert {"hook.__main__", "hook.util.paths", "hook.pipeline.nvcli"} <= served(modules)
    run = node.run(bundle)
    assert run.returncode == 0
    assert ("edited\n" in run.stderr) == (edit == "appended")
    assert run.cli_argv is not None


def truncate(data: bytes, _: bytes) -> bytes:
    """Half the blob: its table whole, the code of some modules cut off."""
    return data[: len(data) // 2]


def whole_entries(data: bytes) -> set[str]:
    """The modules whose code a (truncated) blob still holds whole (not the extension modules' entries,
    which hold no code)."""
    head = header()
    base = len(head) + 4 + int.from_bytes(data[len(head) : len(head) + 4], "little")
    table = marshal.loads(data[len(head) + 4 : base])  # noqa: S302 - the blob install wrote here
    return {name for name, entry in table.items() if entry[5] >= 0 and base + entry[5] <= len(data)}


BREAKS = {
    "missing": None,
    "empty": lambda _data, _head: b"",
    "truncated-in-the-header": lambda data, head: data[: len(head) - 2],
    "truncated-in-the-table": lambda data, head: data[: len(head) + 40],
    "truncated-in-the-code": truncate,
    "another-interpreter": lambda data, head: data.replace(head, head[:-5] + b"\x00\x00\r\n" + head[-1:], 1),
    "optimized": lambda data, head: data.replace(head, head[:-1] + b"\x01", 1),
    "table-not-marshal": lambda data, head: head + data[len(head) : len(head) + 4] + b"\xff" * 64,
    "a-directory": "directory",
}


@pytest.mark.parametrize("how", list(BREAKS))
@pytest.mark.parametrize("case", ["non-gpu", "nvidia-visible-devices"])
def test_a_broken_blob_changes_nothing(node: FrozenNode, how: str, case: str) -> None:
    """A blob missing, empty, truncated anywhere, built by another interpreter (magic number) or for -O, or
    not marshal data: the hook does exactly what it does without one (exit status, stdout, stderr, the
    cli's argv), every module imported the usual way, nothing printed."""
    bundle = node.case(case)
    aside = node.without_blob()
    reference = node.run(bundle)
    assert reference.returncode == 0, reference.stderr
    assert (reference.cli_argv is not None) == (case != "non-gpu")
    change = BREAKS[how]
    if change == "directory":
        node.blob.mkdir()
    elif change is not None:
        assert callable(change)
        node.blob.write_bytes(change(aside.read_bytes(), header()))
    assert node.run(bundle) == reference
    modules = node.modules(bundle)
    if how == "truncated-in-the-code":  # the modules whose code is whole are still served, and only those
        whole = whole_entries(node.blob.read_bytes())
        assert served(modules) == {name for name in modules if name in whole}
        assert {name for name in modules if is_plain_module(name) and name not in whole}
    else:
        assert served(modules) == set()


def test_a_traceback_names_the_node_source_and_line(node: FrozenNode) -> None:
    """With -debug, an internal error's traceback through modules the blob served names each frame by its
    file on the node and shows its source line, exactly as without the blob."""
    bundle = node.case("non-gpu")
    code = BROKEN_STDIN + node.launch_code()
    modules = node.modules(bundle, code, status=1)
    assert {"hook.__main__", "hook.stages.prestart", "hook.pipeline.state"} <= served(modules)
    with_blob = node.run(bundle, code=code, flags=("-debug",))
    assert with_blob.returncode == 1
    lines = with_blob.stderr.splitlines()
    assert lines[:2] == ["gpu-env-hook: internal error: RuntimeError", "Traceback (most recent call last):"]
    assert lines[-1] == "RuntimeError: injected"
    frames = re.findall(r'^  File "([^"]+)", line (\d+), in \w+\n    (.*)$', with_blob.stderr, re.MULTILINE)
    hook_frames = [(path, int(line), text) for path, line, text in frames if path != "<string>"]
    assert {Path(path).name for path, _, _ in hook_frames} >= {"__main__.py", "prestart.py", "state.py"}
    for path, line, text in hook_frames:
        assert path.startswith(f"{node.node_lib}/hook/"), path
        source = (node.root / path.lstrip("/")).read_text(encoding="utf-8").splitlines()
        assert source[line - 1].strip() == text.strip()
    node.without_blob()
    assert node.run(bundle, code=code, flags=("-debug",)) == with_blob


def test_the_shim_create_path_uses_the_blob(node: FrozenNode) -> None:
    """The runtime wrapper's launch code (entry ``hook.stages.shim``) serves the shim's modules from the blob; a
    real runc container created through the installed runtime wrapper gets its env file, and the hook the
    shim added (the same version's lib) calls the cli with the file's devices."""
    env_file = node.env_dir / "abc.env"
    env_file.write_text(ENV_FILE, encoding="utf-8")
    env_file.chmod(0o644)
    bundle = make_runc_bundle(
        node.tmp / "shim-bundle", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    spec = (bundle / "config.json").read_bytes()
    state = node.tmp / "runc-root"
    cid = unique_id("frozen-shim")
    code = build_code(RUNTIME_ENTRY, "gpu-env-runtime", tree=paths.RUNTIME_TREE, call=f"runtime={RUNC!r}")
    env = {
        "PATH": paths.FIXED_PATH,
        "GPU_ENV_HOOK_ENGINE": "podman",
        "NVIDIA_CTK_CONFIG_FILE_PATH": str(node.config),
    }
    argv = [NODE_PYTHON, *PYTHON_FLAGS, "-c", node.recording(code), "--root", str(state), "create", "--bundle",
            str(bundle), cid]  # fmt: skip
    recorded = node.namespaced(argv, cwd=bundle, env=env)  # the exec of runc is recorded, not done
    assert recorded.returncode == 0, recorded.stderr
    modules = node.recorded()
    assert {"hook.stages.shim", "hook.pipeline.specenv", "hook.pipeline.handoff", "hook.launcher"} <= served(
        modules
    )
    assert served(modules) == {name for name in modules if is_plain_module(name)}
    (bundle / "config.json").write_bytes(spec)
    wrapper = str(node.root / paths.runtime_wrapper("podman").lstrip("/"))
    try:
        result = node.namespaced(
            [wrapper, "--root", str(state), "run", "--bundle", str(bundle), cid], cwd=bundle, env={}
        )
    finally:
        subprocess.run(
            [RUNC, "--root", str(state), "delete", "--force", cid], capture_output=True, check=False
        )
    assert result.returncode == 0, result.stderr
    assert "USER_CUSTOM_ENV=hello" in result.stdout.splitlines()
    assert result.cli_argv is not None, result.stderr
    assert "--device=0,1" in result.cli_argv
    hook = json.loads((bundle / "config.json").read_text())["hooks"]["prestart"][0]
    assert f"lib = {json.dumps(node.node_lib)}" in hook["args"][hook["args"].index("-c") + 1]
