"""The runtime-mode check: only ``legacy`` is served by the hook."""

from __future__ import annotations

import re

import pytest

from hook.pipeline import nvcli
from hook.pipeline.nvcli import DIRECT_INVOCATION_MESSAGE, check_mode, resolve_mode
from hook.util.errors import RequestError


@pytest.mark.parametrize(
    ("configured", "devices", "platform", "expected"),
    [
        pytest.param(
            "legacy", ["0"], "csv", ("legacy", "Using requested mode 'legacy'"), id="requested-legacy"
        ),
        pytest.param("cdi", ["0"], "legacy", ("cdi", "Using requested mode 'cdi'"), id="requested-cdi"),
        pytest.param(
            "lgacy", ["0"], "legacy", ("lgacy", "Using requested mode 'lgacy'"), id="requested-typo"
        ),
        pytest.param("auto", ["0"], "legacy", ("legacy", "Auto-detected mode as 'legacy'"), id="auto-legacy"),
        pytest.param("auto", ["0"], "csv", ("csv", "Auto-detected mode as 'csv'"), id="auto-tegra"),
        pytest.param(
            "auto",
            ["nvidia.com/gpu=0", "nvidia.com/gpu=1"],
            "legacy",
            ("cdi", "Auto-detected mode as 'cdi'"),
            id="auto-all-cdi",
        ),
        pytest.param(
            "auto",
            ["nvidia.com/gpu=0", "1"],
            "legacy",
            ("legacy", "Auto-detected mode as 'legacy'"),
            id="auto-mixed",
        ),
        pytest.param("auto", [""], "legacy", ("legacy", "Auto-detected mode as 'legacy'"), id="auto-none"),
        pytest.param("auto", ["all"], "legacy", ("legacy", "Auto-detected mode as 'legacy'"), id="auto-all"),
        pytest.param("auto", ["a/b=c"], "legacy", ("cdi", "Auto-detected mode as 'cdi'"), id="one-char-cdi"),
    ],
)
def test_resolve_mode(configured: str, devices: list[str], platform: str, expected: tuple[str, str]) -> None:
    """A configured mode is used as-is; auto means cdi for all-CDI requests, else the platform's mode."""
    assert resolve_mode(configured, devices, platform=platform) == expected


@pytest.mark.parametrize(
    ("configured", "devices"),
    [
        pytest.param("cdi", ["0"], id="configured-cdi"),
        pytest.param("csv", ["0"], id="configured-csv"),
        pytest.param("jit-cdi", ["0"], id="configured-jit-cdi"),
        pytest.param("Legacy", ["0"], id="configured-typo"),
        pytest.param("auto", ["nvidia.com/gpu=0"], id="auto-all-cdi"),
    ],
)
def test_check_mode_refuses(
    configured: str, devices: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mode other than legacy is refused with upstream's message and no mode line first."""
    monkeypatch.setattr(nvcli, "detect_platform_mode", lambda: "legacy")
    with pytest.raises(RequestError, match=rf"^{re.escape(DIRECT_INVOCATION_MESSAGE)}$"):
        check_mode(configured, devices, skip=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("configured", "line"),
    [
        pytest.param("auto", "Auto-detected mode as 'legacy'\n", id="auto"),
        pytest.param("legacy", "Using requested mode 'legacy'\n", id="requested"),
    ],
)
def test_check_mode_logs_legacy(
    configured: str, line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A legacy mode passes and its line goes to stderr."""
    monkeypatch.setattr(nvcli, "detect_platform_mode", lambda: "legacy")
    check_mode(configured, ["0"], skip=False)
    assert capsys.readouterr().err == line


def test_check_mode_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    """skip-mode-detection skips the check and its line entirely."""
    check_mode("cdi", ["nvidia.com/gpu=0"], skip=True)
    assert capsys.readouterr().err == ""


def test_direct_invocation_message() -> None:
    """The refusal is upstream's text, word for word."""
    assert DIRECT_INVOCATION_MESSAGE == (
        "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not "
        "supported. Please use the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia flag) instead"
    )


@pytest.mark.parametrize(
    ("tegra", "nvml", "expected"),
    [
        pytest.param(False, False, "legacy", id="plain-host"),
        pytest.param(False, True, "legacy", id="nvml-host"),
        pytest.param(True, False, "csv", id="tegra-without-nvml"),
        pytest.param(True, True, "legacy", id="tegra-with-nvml"),
    ],
)
def test_detect_platform_mode(
    tegra: bool, nvml: bool, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tegra without NVML is csv; everything else this hook can tell is legacy."""
    monkeypatch.setattr(nvcli, "_has_tegra_files", lambda: tegra)
    monkeypatch.setattr(nvcli, "_can_load", lambda library: nvml and library == "libnvidia-ml.so.1")
    assert nvcli.detect_platform_mode() == expected


def test_detect_platform_mode_here() -> None:
    """The test machine (no Tegra, no GPU) is a legacy host."""
    assert nvcli.detect_platform_mode() == "legacy"


def test_can_load() -> None:
    """A library the loader cannot find is reported as not loadable."""
    assert nvcli._can_load("libdoes-not-exist-gpu-env-hook.so.1") is False
    assert nvcli._can_load("libc.so.6") is True
