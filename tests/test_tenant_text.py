"""Tenant-chosen text (the container's env, mounts, the env-file path) never forges a line in our output.

Each value carries a newline, an ESC sequence and a fake logrus line: whatever stage reports it (prestart's
refusal or warning, precreate, the runtime shim on stderr and in runc's ``--log``), the output keeps exactly
its own lines and holds no control character.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MakeBundle, MakeConfig, MakeEnvFile, RunHook

FORGED = '\n\x1b[2K\rtime="2026-01-01T00:00:00Z" level=fatal msg="forged"'
DEVICE_ROOT = "/var/run/nvidia-container-devices"


def assert_safe(output: str, lines: int) -> None:
    """``output`` is exactly ``lines`` lines (so no forged one) and holds no control character."""
    assert output.count("\n") == lines, output
    assert all(char == "\n" or char.isprintable() for char in output), repr(output)


@pytest.mark.parametrize(
    ("env", "mounts", "lines"),
    [
        pytest.param(
            ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_DRIVER_CAPABILITIES=compute{FORGED}"],
            [],
            1,
            id="driver-capabilities",
        ),
        pytest.param([f"CUDA_VERSION=12.0{FORGED}"], [], 1, id="legacy-cuda-version"),
        pytest.param(
            ["NVIDIA_VISIBLE_DEVICES=0"],
            [{"source": "/dev/null", "destination": f"{DEVICE_ROOT}/cdi/bad{FORGED}", "type": "bind"}],
            2,  # the warning, then the mode line
            id="cdi-mount-destination-warning",
        ),
        pytest.param([f"NVIDIA_ENV_FROM_FILE=/run/nvidia-env/a{FORGED}.env"], [], 1, id="env-file-path"),
    ],
)
def test_prestart_output_stays_one_line(
    make_bundle: MakeBundle,
    make_config: MakeConfig,
    run_hook: RunHook,
    env: list[str],
    mounts: list[dict[str, str]],
    lines: int,
) -> None:
    """A refusal or warning quoting a tenant value is one line without control characters."""
    config = make_config("accept-nvidia-visible-devices-as-volume-mounts = true\n")
    bundle = make_bundle(["PATH=/bin", *env], mounts=mounts)
    run = run_hook(bundle, config=config)
    assert_safe(run.stderr, lines)


def test_precreate_output_stays_one_line(make_bundle: MakeBundle, run_hook: RunHook) -> None:
    """podman's precreate stage refuses a forged env-file path in one safe line."""
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE=/run/nvidia-env/a{FORGED}.env"])
    run = run_hook(bundle, command="precreate", stdin=(bundle / "config.json").read_bytes())
    assert run.returncode == 1
    assert_safe(run.stderr, 1)


@pytest.mark.parametrize("log_format", [pytest.param("json", id="json"), pytest.param("text", id="text")])
def test_shim_stderr_and_runc_log_stay_one_line(
    tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig, log_format: str
) -> None:
    """The shim's refusal is one safe line on stderr and one in runc's log file."""
    config = make_config('[nvidia-container-runtime]\nruntimes = ["/bin/false"]\n')
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE=/run/nvidia-env/a{FORGED}.env"])
    log = tmp_path / "runc.log"
    args = ["--log", str(log), "--log-format", log_format, "create", "--bundle", str(bundle), "cid"]
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "hook.stages.shim", *args],
        capture_output=True,
        text=True,
        env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)},
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    assert_safe(proc.stderr, 1)
    assert_safe(log.read_text(), 1)
    if log_format == "json":
        assert json.loads(log.read_text())["msg"].isprintable()


@pytest.mark.parametrize("where", [pytest.param("spec", id="config-json"), pytest.param("state", id="state")])
def test_a_document_nested_past_the_decoders_limit_is_one_line(
    where: str, make_bundle: MakeBundle, run_hook: RunHook
) -> None:
    """config.json or the state nested 200,000 deep (a tenant can write either through its annotations or
    its spec): the one-line refusal, config.json untouched, never an internal error."""
    bundle = make_bundle(["PATH=/bin"])
    nested = "[" * 200_000 + "]" * 200_000
    if where == "spec":
        spec = json.loads((bundle / "config.json").read_text())
        text = json.dumps(spec)[:-1] + f', "annotations2": {nested}' + "}"
        (bundle / "config.json").write_text(text)
        result = run_hook(bundle)
        expected = "could not decode OCI spec: nested too deeply\n"
    else:
        result = run_hook(bundle, stdin=f'{{"pid": 1, "bundle": "{bundle}", "a": {nested}}}'.encode())
        expected = "could not decode container state: nested too deeply\n"
    assert (result.returncode, result.stderr) == (1, expected)
    assert result.spec_after == result.spec_before


NOT_TEXT = [
    pytest.param(
        "path",
        "a\x00b.env",
        "env file '{dir}/a\\x00b.env': must not contain a NUL character",
        id="nul-in-path",
    ),
    pytest.param(
        "path",
        "a\ud800b.env",
        "env file '{dir}/a\\ud800b.env': holds a lone surrogate (U+D800), not Unicode text",
        id="high-surrogate-in-path",
    ),
    pytest.param(
        "path",
        "a\udc80b.env",
        "env file '{dir}/a\\udc80b.env': holds a lone surrogate (U+DC80), not Unicode text",
        id="low-surrogate-in-path",
    ),
    pytest.param(
        "annotation",
        "\udc80",
        "{where}: a string holds a lone surrogate (U+DC80), which is not Unicode text; the spec cannot be written back",
        id="surrogate-in-an-annotation",
    ),
    pytest.param(
        "env-key",
        "\ud800",
        "{where}: a string holds a lone surrogate (U+D800), which is not Unicode text; the spec cannot be written back",
        id="surrogate-in-an-env-name",
    ),
]


@pytest.mark.parametrize(("place", "value", "message"), NOT_TEXT)
@pytest.mark.parametrize("stage", ["prestart", "precreate", "shim"])
def test_nul_and_lone_surrogates_are_one_clear_line_in_every_stage(
    tmp_path: Path,
    make_bundle: MakeBundle,
    make_config: MakeConfig,
    make_env_file: MakeEnvFile,
    run_hook: RunHook,
    stage: str,
    place: str,
    value: str,
    message: str,
) -> None:
    """A NUL or a lone surrogate (a JSON \\u0000 or \\udc80 escape) in the env-file path or anywhere in
    config.json: prestart, precreate and the shim refuse in one line, config.json byte-identical, never an
    internal error."""
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    config = make_config(
        f'[env-file]\ndirectories = ["{env_file.parent}"]\n[nvidia-container-runtime]\nruntimes = ["/bin/true"]\n'
    )
    path = f"{env_file.parent}/{value}" if place == "path" else str(env_file)
    env = ["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={path}"] + ([f"{value}=1"] if place == "env-key" else [])
    bundle = make_bundle(env, annotations={"note": value} if place == "annotation" else None)
    before = (bundle / "config.json").read_bytes()
    if stage == "shim":
        proc = subprocess.run(
            [sys.executable, "-I", "-m", "hook.stages.shim", "create", "--bundle", str(bundle), "cid"],
            capture_output=True, text=True, env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}, timeout=30,
            check=False,
        )  # fmt: skip
        returncode, stderr, prefix, where = proc.returncode, proc.stderr, "gpu-env-runtime: ", "config.json"
    elif stage == "precreate":
        run = run_hook(bundle, config=config, command="precreate", stdin=before)
        returncode, stderr, prefix, where = run.returncode, run.stderr, "", "the proposed spec"
    else:
        run = run_hook(bundle, config=config)
        returncode, stderr, prefix, where = run.returncode, run.stderr, "", "config.json"
    assert returncode == 1
    # (prestart says its mode first, as NVIDIA's hook does, when it gets as far as the GPU request)
    assert stderr.splitlines()[-1] == prefix + message.format(dir=env_file.parent, where=where)
    assert "internal error" not in stderr
    assert (bundle / "config.json").read_bytes() == before
