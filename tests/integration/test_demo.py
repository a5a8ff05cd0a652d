"""``make demo``: the story runs to the end, its resolve table is aligned and names its sources truthfully."""

from __future__ import annotations

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
