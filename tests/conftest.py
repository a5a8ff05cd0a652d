"""Shared factories: bundles, states, configs and env files, and a runner for the real hook process."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from record_helpers import replaced

from hook.pipeline.config import EnvFileSettings, parse_config

# The producer's naming key (hook.producer.namekey) for the whole session, never the node's /var/lib/gpu-env-hook: set
# before any test runs, so every producer command a test starts inherits it.
# The directory is removed when the test process ends (every run left one in /tmp before).
if "GPU_ENV_HOOK_NAME_KEY" not in os.environ:
    _KEY_DIR = tempfile.mkdtemp(prefix="gpu-env-hook-key-")
    atexit.register(shutil.rmtree, _KEY_DIR, ignore_errors=True)
    os.environ["GPU_ENV_HOOK_NAME_KEY"] = str(Path(_KEY_DIR) / "alloc.key")

TESTS = Path(__file__).resolve().parent


@pytest.fixture(autouse=True, scope="session")
def _no_spec_cache_on_the_host() -> Any:
    """No test may leave the decoded-spec cache at its node path (/run/gpu-env-hook): a config in CDI mode
    names a scratch ``[gpu-env.cdi] spec-cache``. Checked once, after the whole session."""
    from hook.util.paths import RUN_DIR

    there = Path(RUN_DIR).exists()
    yield
    assert there or not Path(RUN_DIR).exists(), (
        f"a test created {RUN_DIR}: give its config a scratch spec-cache"
    )


STANDIN_CLI = TESTS / "standin" / "nvidia-container-cli"
HOOK = [sys.executable, "-I", "-m", "hook"]
REPO = TESTS.parent


@dataclass(frozen=True)
class HookRun:
    """One run of the hook as a process: its result, what the stand-in cli recorded, config.json after."""

    returncode: int
    stdout: str
    stderr: str
    record: dict[str, Any] | None
    spec_before: bytes
    spec_after: bytes

    @property
    def cli_argv(self) -> list[str]:
        """The argv the stand-in cli received (fails the test if it was not run)."""
        assert self.record is not None, f"the cli was not run; stderr: {self.stderr!r}"
        argv: list[str] = self.record["argv"]
        return argv


MakeBundle = Callable[..., Path]
MakeConfig = Callable[..., Path]
RunHook = Callable[..., HookRun]
MakeEnvFile = Callable[..., Path]


def env_settings(directory: Path, **overrides: Any) -> EnvFileSettings:
    """Build [env-file] settings for one directory (defaults as in config.toml, changed by ``overrides``)."""
    defaults = parse_config(None, suse=False).env_file
    return replaced(defaults, directories=(str(directory),), **overrides)


@pytest.fixture
def env_dir(tmp_path: Path) -> Path:
    """A root-owned directory for env files (tmp/nvidia-env, the one ``make_env_file`` writes to)."""
    directory = tmp_path / "nvidia-env"
    directory.mkdir(exist_ok=True)
    return directory


@pytest.fixture
def record_path(tmp_path: Path) -> Path:
    """Where the stand-in cli writes what it received."""
    return tmp_path / "cli-record.json"


@pytest.fixture
def make_bundle(tmp_path: Path) -> MakeBundle:
    """Write a bundle whose config.json has the given env, capabilities, mounts, annotations and version."""

    def make(
        env: list[str] | None = None,
        *,
        name: str = "bundle",
        oci_version: str | None = "1.0.2",
        capabilities: Any = None,
        privileged: bool = False,
        mounts: list[dict[str, str]] | None = None,
        annotations: dict[str, str] | None = None,
        root: str | None = "rootfs",
        spec: dict[str, Any] | None = None,
    ) -> Path:
        bundle = tmp_path / name
        (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
        if spec is None:
            spec = {"process": {"args": ["true"], "cwd": "/"}, "extra-field": {"kept": True}}
            if oci_version is not None:
                spec["ociVersion"] = oci_version
            if env is not None:
                spec["process"]["env"] = env
            if privileged:
                capabilities = {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}
            if capabilities is not None:
                spec["process"]["capabilities"] = capabilities
            if mounts is not None:
                spec["mounts"] = mounts
            if annotations is not None:
                spec["annotations"] = annotations
            if root is not None:
                spec["root"] = {"path": root}
        (bundle / "config.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
        return bundle

    return make


@pytest.fixture
def make_config(tmp_path: Path, record_path: Path) -> MakeConfig:
    """Write a config.toml that points the hook at the recording stand-in, plus any extra TOML."""

    def make(extra: str = "", *, cli: str = "", standin: bool = True, name: str = "config.toml") -> Path:
        lines = []
        if standin:
            lines += [
                "[nvidia-container-cli]",
                f'path = "{STANDIN_CLI}"',
                f'environment = ["STANDIN_RECORD={record_path}"]',
                cli,
            ]
        path = tmp_path / name
        path.write_text(extra + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
        return path

    return make


@pytest.fixture
def make_env_file(tmp_path: Path) -> MakeEnvFile:
    """Write an env file (root-owned, 0644, one link) in a directory the hook is configured to accept."""

    def make(content: str | bytes, *, name: str = "abc.env", directory: Path | None = None) -> Path:
        folder = directory or tmp_path / "nvidia-env"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        path.chmod(0o644)
        return path

    return make


@pytest.fixture
def run_hook(record_path: Path) -> RunHook:
    """Run ``python -I -m hook [flags] prestart`` in the bundle directory with a state on stdin."""

    def run(
        bundle: Path,
        *,
        config: Path | None = None,
        flags: list[str] | None = None,
        command: str = "prestart",
        state: dict[str, Any] | None = None,
        stdin: bytes | None = None,
        pid: int = 4242,
        env: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> HookRun:
        if stdin is None:
            stdin = json.dumps(state if state is not None else {"pid": pid, "bundle": str(bundle)}).encode()
        argv = [*HOOK, *(["-config", str(config)] if config else []), *(flags or []), command]
        before = (bundle / "config.json").read_bytes() if (bundle / "config.json").exists() else b""
        record_path.unlink(missing_ok=True)
        base_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "XDG_CONFIG_HOME": str(bundle / "no-xdg"),
        }
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            cwd=bundle,
            env={**base_env, **(env or {})},
            timeout=timeout,
            check=False,
        )
        record = json.loads(record_path.read_text()) if record_path.exists() else None
        after = (bundle / "config.json").read_bytes() if (bundle / "config.json").exists() else b""
        return HookRun(
            returncode=proc.returncode,
            stdout=proc.stdout.decode(errors="replace"),
            stderr=proc.stderr.decode(errors="replace"),
            record=record,
            spec_before=before,
            spec_after=after,
        )

    return run


@pytest.fixture(scope="session")
def tree_python(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that starts the interpreter ``install --python tree`` copies into the node's tree (this
    session's base interpreter, its loader and libraries, the pruned standard library), written once into a
    scratch tree as install writes it."""
    from hook.install.rootfs import NodeRoot
    from hook.install.tree import collect_tree, write_tree
    from hook.launcher import tree_command

    root = tmp_path_factory.mktemp("tree-python")
    write_tree(NodeRoot(str(root)), collect_tree(bundle=True), "/tree", compile_with=None)
    return tree_command(f"{root}/tree")
