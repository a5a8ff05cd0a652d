"""The LICENSE file is the licence pyproject.toml declares (setuptools puts it in the wheel's dist-info)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_license_file_matches_pyproject() -> None:
    """pyproject says Apache-2.0; LICENSE holds the Apache License 2.0 text, terms and appendix."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    assert declared == {"text": "Apache-2.0"}
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
