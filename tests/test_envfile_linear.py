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
    start = time.process_time()
    parse_env_file(data, "/f", variable="NVIDIA_ENV_FROM_FILE")
    times[name] = time.process_time() - start
print(json.dumps(times))
"""


def shapes() -> dict[str, object]:
    """The worst shapes of the benchmark (tests/bench is not a package)."""
    sys.path.insert(0, str(BENCH))
    try:
        from envfile_shapes import SHAPES
    finally:
        sys.path.remove(str(BENCH))
    return dict(SHAPES)


@pytest.fixture(scope="module")
def parse_times() -> dict[str, float]:
    """CPU seconds each shape takes to parse at 1 MiB (CPU time: other work on the machine does not count;
    the run stops when every shape's budget is spent in wall time: a shape in quadratic time needs minutes)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", PROGRAM, str(BENCH), str(SIZE)],
        capture_output=True,
        text=True,
        timeout=BUDGET_SECONDS * len(shapes()),
        check=True,
    )
    times: dict[str, float] = json.loads(proc.stdout)
    return times


def test_every_worst_shape_parses_within_its_budget(parse_times: dict[str, float]) -> None:
    """Every shape (each an accepted file) is read in linear time: far under what quadratic time needs."""
    assert set(parse_times) == set(shapes())
    slow = {name: seconds for name, seconds in parse_times.items() if seconds > BUDGET_SECONDS}
    assert slow == {}
