"""Unit tests for hook.pipeline.handoff: the shim's env-file decision in the injected hook's args, and the hook that
acts on it without reading the file again."""

from __future__ import annotations

import pytest
from conftest import MakeBundle, MakeConfig, MakeEnvFile, RunHook

from hook.pipeline.handoff import add_handoff, build_handoff, parse_handoff, take_handoff
from hook.util.errors import EnvFileError


@pytest.mark.parametrize(
    ("pinned", "names", "value"),
    [
        pytest.param(None, [], "none", id="no-file"),
        pytest.param(True, ["NVIDIA_VISIBLE_DEVICES", "A"], "pinned:NVIDIA_VISIBLE_DEVICES,A", id="pinned"),
        pytest.param(False, ["A"], "unpinned:A", id="unpinned"),
        pytest.param(True, [], "pinned:", id="pinned-empty-file"),
    ],
)
def test_build_and_parse_round_trip(pinned: bool | None, names: list[str], value: str) -> None:
    """What the shim writes is what the hook reads back."""
    assert build_handoff(pinned, names) == value
    handoff = parse_handoff(value)
    if pinned is None:
        assert handoff is None
    else:
        assert handoff is not None
        assert (handoff.pinned, handoff.names) == (pinned, tuple(names))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("pinned", id="no-colon"),
        pytest.param("trusted:A", id="unknown-kind"),
        pytest.param("pinned:A,,B", id="empty-name"),
        pytest.param("pinned:A=1", id="value-not-name"),
        pytest.param("pinned:1A", id="name-starts-with-digit"),
        pytest.param("unpinned:\u00c4", id="non-ascii-name"),
    ],
)
def test_parse_refuses_anything_else(value: str) -> None:
    """Only the shim's own shapes are accepted."""
    with pytest.raises(
        EnvFileError,
        match=r"^-env-file-merged: expected none, pinned:NAMES or unpinned:NAMES \(names of variables\)$",
    ):
        parse_handoff(value)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["/py", "-I", "-m", "hook", "prestart"],
            ["/py", "-I", "-m", "hook", "-env-file-merged=none", "prestart"],
            id="module-form",
        ),
        pytest.param(
            ["gpu-env-hook", "-config", "/c", "createRuntime"],
            ["gpu-env-hook", "-config", "/c", "-env-file-merged=none", "createRuntime"],
            id="wrapper-create-runtime",
        ),
        pytest.param(
            ["gpu-env-hook", "-env-file-merged=pinned:A", "prestart"],
            ["gpu-env-hook", "-env-file-merged=none", "prestart"],
            id="replaces-an-old-decision",
        ),
        pytest.param(["gpu-env-hook"], None, id="no-command"),
        pytest.param(["prestart"], None, id="command-is-argv0-only"),
    ],
)
def test_add_handoff(args: list[object], expected: list[object] | None) -> None:
    """The flag goes just before the command word (Go flag rules stop there)."""
    assert add_handoff(args, "none") == expected


def test_take_handoff_uses_process_env_values() -> None:
    """The values are process.env's (merged by the shim); the path is the variable's."""
    env = {"NVIDIA_ENV_FROM_FILE": "/run/nvidia-env/a.env", "NVIDIA_VISIBLE_DEVICES": "3", "A": "x"}
    env_file = take_handoff("pinned:NVIDIA_VISIBLE_DEVICES", env, "NVIDIA_ENV_FROM_FILE")
    assert env_file is not None
    assert (env_file.path, env_file.values, env_file.pinned) == (
        "/run/nvidia-env/a.env",
        {"NVIDIA_VISIBLE_DEVICES": "3"},
        True,
    )
    assert take_handoff("none", env, "NVIDIA_ENV_FROM_FILE") is None


def test_take_handoff_refuses_a_name_missing_from_process_env() -> None:
    """A name the shim merged but config.json lacks: config.json changed after the shim, refused."""
    with pytest.raises(
        EnvFileError,
        match=r"^env file '/e/a.env': the runtime shim merged B into process.env but config.json no longer "
        r"holds it \(config.json was changed after the shim\)$",
    ):
        take_handoff("unpinned:A,B", {"NVIDIA_ENV_FROM_FILE": "/e/a.env", "A": "1"}, "NVIDIA_ENV_FROM_FILE")


def test_hook_with_decision_never_reads_the_env_file(
    make_bundle: MakeBundle, make_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """Handed the decision, the hook selects from process.env even when the file is now refused (mode 0666,
    another version): it is never opened; the pinned names pass the unprivileged check as the shim decided."""
    env_file = make_env_file("GPU_ENV_HOOK_POD_UID=u1\nNVIDIA_VISIBLE_DEVICES=7\n")
    env_file.chmod(0o666)
    config = make_config(
        f'accept-nvidia-visible-devices-envvar-when-unprivileged = false\n[env-file]\ndirectories = ["{env_file.parent}"]\n'
    )
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE={env_file}", "NVIDIA_VISIBLE_DEVICES=2"])
    handed = run_hook(bundle, config=config, flags=["-env-file-merged=pinned:NVIDIA_VISIBLE_DEVICES"])
    assert handed.returncode == 0, handed.stderr
    assert "--device=2" in handed.cli_argv
    assert handed.spec_after == handed.spec_before
    unpinned = run_hook(bundle, config=config, flags=["-env-file-merged=unpinned:NVIDIA_VISIBLE_DEVICES"])
    assert unpinned.returncode == 0, unpinned.stderr
    assert unpinned.record is None  # unprivileged, not pinned: the variable is not trusted, no GPU
    reread = run_hook(bundle, config=config)
    assert reread.returncode == 1
    assert "must not be group- or world-writable" in reread.stderr
