"""A directory the hook cannot enter is reported as such, as an unprivileged process meets it.

The hook runs as root, where permission bits never stop a lookup; a hook with fewer privileges (a rootless
engine, a user namespace) meets them. The process here imports the hook as root (the interpreter lives
under /root), then drops to nobody and runs the stage, so the kernel's own EACCES is what it reports.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NOBODY = 65534
# Import everything the prestart stage and the checker import, drop to nobody, then run them.
_RUN_AS_NOBODY = """
import io, json, os, sys
import hook.__main__, hook.stages.prestart, hook.pipeline.config, hook.pipeline.envfile, hook.pipeline.request, hook.producer.envfile
import hook.pipeline.nvcli, hook.pipeline.requirements, hook.cdi
os.setgroups([]); os.setgid({uid}); os.setuid({uid})
config, bundle, env_file = sys.argv[1:4]
sys.stdin = io.TextIOWrapper(io.BytesIO(json.dumps({{"pid": 1, "bundle": bundle}}).encode()))
status = hook.__main__.main(["-config", config, "prestart"])
report = hook.producer.envfile.check_env_file(env_file, hook.pipeline.config.parse_config(open(config).read()).env_file)
print(json.dumps({{"status": status, "check": [s.detail for s in report.steps if not s.ok]}}))
"""


@pytest.fixture
def world_tree() -> Iterator[Path]:
    """A directory nobody can reach (pytest's tmp_path is root's, mode 0700)."""
    top = Path(tempfile.mkdtemp(prefix="gpu-env-perm-", dir="/tmp"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top)


@pytest.mark.parametrize(
    ("locked", "below"),
    [
        pytest.param("nvidia-env/sub", "sub/a.env", id="subdirectory-mode-000"),
        pytest.param("nvidia-env", "a.env", id="configured-directory-mode-000"),
    ],
)
def test_unenterable_directory_is_named(world_tree: Path, locked: str, below: str) -> None:
    """``cannot enter directory <dir>: Permission denied`` from the hook and the checker, not "unreadable"."""
    env_dir = world_tree / "nvidia-env"
    env_file = env_dir / below
    env_file.parent.mkdir(parents=True)
    env_file.write_text("NVIDIA_VISIBLE_DEVICES=0\n", encoding="utf-8")
    env_file.chmod(0o644)
    bundle = world_tree / "bundle"
    bundle.mkdir()
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": [f"NVIDIA_ENV_FROM_FILE={env_file}"]},
        "root": {"path": "r"},
    }
    (bundle / "config.json").write_text(json.dumps(spec), encoding="utf-8")
    config = world_tree / "config.toml"
    config.write_text(f"[env-file]\ndirectories = [{json.dumps(str(env_dir))}]\n", encoding="utf-8")
    (world_tree / locked).chmod(0o000)
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            _RUN_AS_NOBODY.format(uid=NOBODY),
            str(config),
            str(bundle),
            str(env_file),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = f"env file '{env_file}': cannot enter directory '{world_tree / locked}': Permission denied"
    assert result.stderr == line + "\n"
    assert json.loads(result.stdout) == {"status": 1, "check": [line]}
