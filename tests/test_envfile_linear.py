"""The env-file reader takes linear time on the worst shapes (python-dotenv: 7 s for a 64 KiB blank run).

Each shape of ``tests/bench/envfile_shapes.py`` at 1 MiB (16 times the default max-bytes) goes through
``hook.pipeline.envfile.parse_env_file`` (what every stage runs) in a fresh process. Linear time is well under a
second or two per shape here; python-dotenv's quadratic backtracking would need minutes for the blank run,
so a generous per-shape budget separates the two without timing noise deciding the verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent / "bench"
SIZE = 1024 * 1024
BUDGET_SECONDS = 10.0
PROGRAM = """\
import json, sys, time
sys.path.insert(0, sys.argv[1])
from envfile_shapes import SHAPES
from hook.pipeline.envfile import parse_env_file
times = {}
for name, build in SHAPES.items():
    data = build(int(sys.argv[2])).encode()
    start = time.perf_counter()
    parse_env_file(data, "/f", variable="NVIDIA_ENV_FROM_FILE")
    times[name] = time.perf_counter() - start
print(json.dumps(times))
"""


@pytest.fixture(scope="module")
def parse_times() -> dict[str, float]:
    """Seconds each shape takes to parse at 1 MiB (the run stops at a budget shared by all shapes)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", PROGRAM, str(BENCH), str(SIZE)],
        capture_output=True,
        text=True,
        timeout=BUDGET_SECONDS * 6,
        check=True,
    )
    times: dict[str, float] = json.loads(proc.stdout)
    return times


def test_every_worst_shape_parses_within_its_budget(parse_times: dict[str, float]) -> None:
    """Every shape (each an accepted file) is read in linear time: far under what quadratic time needs."""
    sys.path.insert(0, str(BENCH))
    try:
        from envfile_shapes import SHAPES
    finally:
        sys.path.remove(str(BENCH))
    assert set(parse_times) == set(SHAPES)
    slow = {name: seconds for name, seconds in parse_times.items() if seconds > BUDGET_SECONDS}
    assert slow == {}
