"""hook.pipeline.configfile: which config.toml texts could change which variables select GPUs (then it is parsed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hook.pipeline.configfile import config_may_select, config_mentions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(None, False, id="no-file"),
        pytest.param("", False, id="empty"),
        pytest.param("[nvidia-container-cli]\npath = '/bin/true'\n", False, id="unrelated-keys"),
        pytest.param('#swarm-resource = "DOCKER_RESOURCE_GPU"\n', False, id="commented-out"),
        pytest.param('swarm-resource = ""\n', False, id="empty-swarm-resource"),
        pytest.param('swarm-resource = "DOCKER_RESOURCE_GPU"\n', True, id="swarm-resource"),
        pytest.param("swarm-resource = 5\n", True, id="swarm-resource-of-the-wrong-type"),
        pytest.param('[env-file]\nvariable = "NVIDIA_ENV_FROM_FILE"\n', False, id="default-variable"),
        pytest.param('[env-file]\nvariable = "MY_FILE"\n', True, id="renamed-variable"),
        pytest.param("[env-file]\nvariable = true\n", True, id="variable-of-the-wrong-type"),
        pytest.param('env-file = "x"\nvariable = 1\n', True, id="env-file-not-a-table"),
        pytest.param('[env-file]\nvariable = "\\u004dY"\n', True, id="beyond-the-subset"),
        pytest.param('x = "variable"\n', False, id="word-in-a-value-of-a-plain-file"),
    ],
)
def test_config_may_select(text: str | None, expected: bool) -> None:
    """Only a non-empty swarm-resource or a renamed env-file variable (or a file beyond the subset) counts."""
    assert config_may_select(text) is expected


def test_config_default_output_does_not_count() -> None:
    """The file `gpu-env-hook config default` prints (every key at its default) selects nothing new."""
    text = subprocess.run(
        [sys.executable, "-I", "-m", "hook", "config", "default"], capture_output=True, text=True, check=True
    ).stdout
    assert config_mentions(text)
    assert config_may_select(text) is False


@pytest.mark.parametrize(
    ("text", "markers", "expected"),
    [
        pytest.param("a = 1\n# runtimes\n", ("runtimes",), False, id="comment-only"),
        pytest.param("  runtimes = []\n", ("runtimes",), True, id="indented-line"),
        pytest.param(None, ("runtimes",), False, id="no-file"),
    ],
)
def test_config_mentions(text: str | None, markers: tuple[str, ...], expected: bool) -> None:
    """A marker counts only outside comment lines."""
    assert config_mentions(text, markers) is expected
