"""A small soak in ``make test`` (``make soak`` runs the full one): the trial's shapes against the installed
shim and real runc, every figure clean."""

from __future__ import annotations

import pytest
from soak import run_soak

pytestmark = pytest.mark.integration


def test_small_soak_is_clean() -> None:
    """8 concurrent creates, 8 containers racing a writer, killed writers and killed shims: every create
    succeeds, no container mixes two versions, no file is torn, and no temp file outlives the next write."""
    lines: list[str] = []
    results = run_soak([8], racing=8, writer_kills=4, shim_kills=3, report=lines.append)
    assert [figures.shape for figures in results] == [
        "concurrent creates, 8 at once",
        "writer racing readers, 8 at once",
        "writers SIGKILLed during the rewrite, 4 readers",
        "shims SIGKILLed during the config.json rewrite, 3 kills",
    ]
    for figures in results:
        assert figures.clean, "\n".join(lines)
        assert figures.outcomes
    assert all(outcome.printed for outcome in results[0].outcomes)
