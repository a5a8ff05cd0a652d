"""``make demo``: the story runs to the end, its resolve table is aligned and names its sources truthfully."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.integration


def test_demo_runs_and_its_table_aligns() -> None:
    """The demo exits 0 with every step; the VARIABLE table's columns line up; no variable is said to be 'image'."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "demo" / "demo.py")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert [int(n) for n in re.findall(r"^== (\d+)\.", out, re.MULTILINE)] == list(range(1, 12))
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("   | VARIABLE "))
    table = []
    for line in lines[start:]:
        if line.strip() == "|":
            break
        table.append(line)
    assert len(table) >= 4
    header = table[0]
    value_at, from_at = header.index("VALUE"), header.index("FROM")
    for row in table[1:]:
        assert row[value_at - 2 : value_at + 1].startswith("  "), table
        assert row[value_at] != " ", table
        assert row[from_at - 2 : from_at] == "  ", table
        assert row[from_at] != " ", table
    sources = {row[from_at:].split(" (")[0] for row in table[1:]}
    assert sources <= {"config.json", "env file", "config.toml"}
    assert "env file (config.json had 'fake0,fake1')" in out


# The node paths a run of gpu-env-hook may write (state, naming key, refusal log, tree, spec cache, env
# files), and the scratch space: the demo gets each as an empty tmpfs in a private mount namespace.
HOST_PATHS = ("/var/lib", "/var/log", "/opt", "/run", "/tmp")


def test_demo_writes_nothing_outside_its_scratch_directory() -> None:
    """Run without the tests' naming key, where the host's /var/lib, /var/log, /opt, /run and /tmp are empty
    (so no earlier key or tree can hide a write), the demo leaves every one of them as empty as it found it:
    its naming key, like the rest, lives in its scratch directory and goes with it."""
    env = {name: value for name, value in os.environ.items() if name != "GPU_ENV_HOOK_NAME_KEY"}
    script = "\n".join(
        [
            "set -e",
            *(f"mount -t tmpfs tmpfs {path}" for path in HOST_PATHS),
            '"$@" >/dev/null',
            # /run/mount: mount(8)'s own directory (a node has it from boot), made by the demo's mounts.
            f"find {' '.join(HOST_PATHS)} -mindepth 1 ! -path /run/mount",
        ]
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
         sys.executable, str(REPO / "packaging" / "demo" / "demo.py")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
