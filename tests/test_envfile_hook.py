"""The env file through the real hook process: merged before every rule, written back last, refused cleanly."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import MakeBundle, MakeConfig, MakeEnvFile, RunHook
from envfile_comment_quote import comment_quote_file, hidden_line

VAR = "NVIDIA_ENV_FROM_FILE"
CONTAINERD_POD = {"io.kubernetes.cri.sandbox-uid": "uid-1", "io.kubernetes.cri.container-name": "main"}


@pytest.fixture
def env_config(make_config: MakeConfig, tmp_path: Path) -> MakeConfig:
    """A config whose [env-file] directory is tmp/nvidia-env on a containerd node, plus extra [env-file] keys."""

    def make(env_file_keys: str = "", top: str = "", engine: str = "containerd") -> Path:
        return make_config(
            f'{top}\n[env-file]\ndirectories = ["{tmp_path / "nvidia-env"}"]\n'
            f'pod-binding-engine = "{engine}"\n{env_file_keys}\n'
        )

    return make


def spec_env(bundle: Path) -> list[str]:
    """Return process.env of the bundle's config.json."""
    env: list[str] = json.loads((bundle / "config.json").read_text())["process"]["env"]
    return env


def test_file_devices_replace_the_containers(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """The file's NVIDIA_VISIBLE_DEVICES wins over the container's fake ids and reaches the cli."""
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n")
    bundle = make_bundle(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=fake0,fake1", f"{VAR}={env_file}"])
    run = run_hook(bundle, config=env_config())
    assert run.returncode == 0, run.stderr
    assert "--device=0,1" in run.cli_argv
    assert spec_env(bundle) == [
        "PATH=/bin",
        "NVIDIA_VISIBLE_DEVICES=0,1",
        f"{VAR}={env_file}",
        "USER_CUSTOM_ENV=hello",
    ]


def test_write_back_keeps_every_other_field(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """Only process.env changes; unknown fields survive and the file mode is kept."""
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    bundle = make_bundle([f"{VAR}={env_file}"], annotations={"a": "b"})
    (bundle / "config.json").chmod(0o600)
    run = run_hook(bundle, config=env_config())
    assert run.returncode == 0, run.stderr
    before, after = json.loads(run.spec_before), json.loads(run.spec_after)
    before["process"]["env"] = after["process"]["env"]
    assert before == after
    assert (bundle / "config.json").stat().st_mode & 0o777 == 0o600
    assert not [p for p in bundle.iterdir() if p.name.endswith(".tmp")]


def test_merged_env_drives_capabilities_and_requirements(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """Capabilities and requirements are computed on the merged environment."""
    env_file = make_env_file(
        "NVIDIA_VISIBLE_DEVICES=GPU-1\nNVIDIA_DRIVER_CAPABILITIES=video\nNVIDIA_REQUIRE_X=arch>=8\n"
    )
    bundle = make_bundle(["NVIDIA_DRIVER_CAPABILITIES=compute", f"{VAR}={env_file}"])
    run = run_hook(bundle, config=env_config())
    assert run.returncode == 0, run.stderr
    assert run.cli_argv[-5:-2] == ["--device=GPU-1", "--video", "--require=arch>=8"]


def test_env_only_rewrites_and_does_not_call_the_cli(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """-env-only merges into config.json and exits 0 without running nvidia-container-cli."""
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    bundle = make_bundle([f"{VAR}={env_file}"])
    run = run_hook(bundle, config=env_config(), flags=["-env-only"])
    assert (run.returncode, run.record, run.stderr) == (0, None, "")
    assert "NVIDIA_VISIBLE_DEVICES=0" in spec_env(bundle)


def test_file_that_selects_no_gpu_is_still_merged(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """A file with only ordinary variables is merged for later hooks; no cli runs."""
    env_file = make_env_file("USER_CUSTOM_ENV=hello\n")
    bundle = make_bundle([f"{VAR}={env_file}"])
    run = run_hook(bundle, config=env_config())
    assert (run.returncode, run.record) == (0, None)
    assert "USER_CUSTOM_ENV=hello" in spec_env(bundle)


def test_unchanged_env_is_not_rewritten(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """When the file changes nothing (e.g. a shim merged it already), config.json is left alone."""
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    bundle = make_bundle([f"{VAR}={env_file}", "NVIDIA_VISIBLE_DEVICES=0"])
    inode = (bundle / "config.json").stat().st_ino
    run = run_hook(bundle, config=env_config())
    assert run.returncode == 0, run.stderr
    assert (bundle / "config.json").stat().st_ino == inode
    assert run.spec_after == run.spec_before


@pytest.mark.parametrize(
    ("pin", "accept", "expected_device"),
    [
        pytest.param("GPU_ENV_HOOK_POD_UID=uid-1\n", "false", "--device=0", id="pinned-file-passes-the-gate"),
        pytest.param("", "false", None, id="unpinned-file-follows-the-gate"),
        pytest.param("", "true", "--device=0", id="unpinned-file-accepted-by-setting"),
    ],
)
def test_pinned_devices_pass_the_unprivileged_gate(
    make_bundle: MakeBundle,
    env_config: MakeConfig,
    make_env_file: MakeEnvFile,
    run_hook: RunHook,
    pin: str,
    accept: str,
    expected_device: str | None,
) -> None:
    """Devices from a file pinned to this pod are honoured in an unprivileged container whatever the setting."""
    env_file = make_env_file(f"{pin}NVIDIA_VISIBLE_DEVICES=0\n")
    bundle = make_bundle([f"{VAR}={env_file}"], annotations=CONTAINERD_POD)
    config = env_config(top=f"accept-nvidia-visible-devices-envvar-when-unprivileged = {accept}")
    run = run_hook(bundle, config=config)
    assert run.returncode == 0, run.stderr
    if expected_device is None:
        assert run.record is None
        assert run.stderr.endswith(
            'level=warning msg="Ignoring devices requested by environment variable(s) in unprivileged '
            'container: [NVIDIA_VISIBLE_DEVICES]"\n'
        )
    else:
        assert expected_device in run.cli_argv
    assert "GPU_ENV_HOOK_POD_UID=uid-1" not in spec_env(bundle)


def test_pinned_legacy_cuda_version_does_not_pass_the_unprivileged_gate(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """A pinned file holding only CUDA_VERSION (a legacy image's implied "all") gets no device past the gate:
    only an explicit device list from a pinned file does."""
    env_file = make_env_file("GPU_ENV_HOOK_POD_UID=uid-1\nCUDA_VERSION=12.0\n")
    bundle = make_bundle([f"{VAR}={env_file}"], annotations=CONTAINERD_POD)
    config = env_config(top="accept-nvidia-visible-devices-envvar-when-unprivileged = false")
    run = run_hook(bundle, config=config)
    assert run.returncode == 0, run.stderr
    assert run.record is None
    assert run.stderr.endswith(
        'level=warning msg="Ignoring devices requested by environment variable(s) in unprivileged '
        'container: [NVIDIA_VISIBLE_DEVICES]"\n'
    )


@pytest.mark.parametrize(
    ("engine", "annotations"),
    [
        pytest.param(
            "crio",
            {"io.kubernetes.pod.uid": "attacker", "io.kubernetes.cri.sandbox-uid": "victim"},
            id="crio-pod-annotated-with-containerds-pod-key",
        ),
        pytest.param("crio", {"io.kubernetes.cri.sandbox-uid": "victim"}, id="crio-key-missing"),
        pytest.param("none", {"io.kubernetes.cri.sandbox-uid": "victim"}, id="no-engine-configured"),
    ],
)
def test_cri_o_pin_bypass_is_refused(
    make_bundle: MakeBundle,
    env_config: MakeConfig,
    make_env_file: MakeEnvFile,
    run_hook: RunHook,
    engine: str,
    annotations: dict[str, str],
) -> None:
    """On CRI-O a pod's own annotations reach its containers: a pod annotated with containerd's key and the
    victim's uid never gets the victim's pinned file (nor does any pod where no engine is configured)."""
    env_file = make_env_file("GPU_ENV_HOOK_POD_UID=victim\nNVIDIA_VISIBLE_DEVICES=0\n")
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=void", f"{VAR}={env_file}"], annotations=annotations)
    config = env_config("require-pod-binding = true", engine=engine)
    run = run_hook(bundle, config=config)
    assert run.returncode == 1
    assert run.stderr.startswith(f"env file '{env_file}': is pinned to ")
    assert run.stderr.count("\n") == 1
    assert run.record is None
    assert run.spec_after == run.spec_before


def test_engine_comes_from_the_hooks_own_environment(
    make_bundle: MakeBundle,
    make_config: MakeConfig,
    make_env_file: MakeEnvFile,
    run_hook: RunHook,
    tmp_path: Path,
) -> None:
    """Without the config key, GPU_ENV_HOOK_ENGINE (set by what install writes) names the engine; the
    container's own environment never does."""
    env_file = make_env_file("GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=0\n")
    config = make_config(f'[env-file]\ndirectories = ["{tmp_path / "nvidia-env"}"]\n')
    crio = {"io.kubernetes.pod.uid": "uid-1"}
    bundle = make_bundle([f"{VAR}={env_file}", "GPU_ENV_HOOK_ENGINE=crio"], annotations=crio)
    refused = run_hook(bundle, config=config)
    assert refused.returncode == 1
    assert "no pod-binding-engine is set" in refused.stderr
    accepted = run_hook(bundle, config=config, env={"GPU_ENV_HOOK_ENGINE": "crio"})
    assert accepted.returncode == 0, accepted.stderr
    assert "--device=0" in accepted.cli_argv


def test_pin_from_the_state_annotations(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """The pod annotations may come from the state on stdin instead of config.json."""
    env_file = make_env_file("GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=0\n")
    bundle = make_bundle([f"{VAR}={env_file}"])
    state = {"pid": 7, "bundle": str(bundle), "annotations": {"io.kubernetes.pod.uid": "uid-1"}}
    run = run_hook(bundle, config=env_config(engine="crio"), state=state)
    assert run.returncode == 0, run.stderr
    assert "--pid=7" in run.cli_argv


def test_custom_variable_name(
    make_bundle: MakeBundle, env_config: MakeConfig, make_env_file: MakeEnvFile, run_hook: RunHook
) -> None:
    """[env-file] variable renames the variable that names the file."""
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=3\n")
    bundle = make_bundle([f"MY_GPU_FILE={env_file}"])
    run = run_hook(bundle, config=env_config('variable = "MY_GPU_FILE"'))
    assert "--device=3" in run.cli_argv


def test_missing_file_ignored(
    make_bundle: MakeBundle, env_config: MakeConfig, tmp_path: Path, run_hook: RunHook
) -> None:
    """on-missing = "ignore": the container's own request stands, config.json unchanged."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=fake0", f"{VAR}={tmp_path}/nvidia-env/none.env"])
    (tmp_path / "nvidia-env").mkdir()
    run = run_hook(bundle, config=env_config('on-missing = "ignore"'))
    assert "--device=fake0" in run.cli_argv
    assert run.spec_after == run.spec_before


# --- refusals: one line, exit 1, config.json byte-identical, cli not run -------------------------------------


def setup_symlink(env_dir: Path, tmp_path: Path) -> str:
    """The env file is a symlink to a good file outside."""
    target = tmp_path / "outside.env"
    target.write_text("NVIDIA_VISIBLE_DEVICES=0\n")
    (env_dir / "a.env").symlink_to(target)
    return "a.env"


def setup_fifo(env_dir: Path, tmp_path: Path) -> str:
    """The env file is a FIFO with no writer."""
    os.mkfifo(env_dir / "a.env")
    return "a.env"


def file_with(content: str, mode: int = 0o644) -> Callable[[Path, Path], str]:
    """A setup that writes the env file with this content and mode."""

    def setup(env_dir: Path, tmp_path: Path) -> str:
        (env_dir / "a.env").write_text(content)
        (env_dir / "a.env").chmod(mode)
        return "a.env"

    return setup


def setup_missing(env_dir: Path, tmp_path: Path) -> str:
    """The env file does not exist (on-missing defaults to error)."""
    return "none.env"


# The env file's own refusals (location, type, mode, content, pin), also the NRI plugin's table
# (tests/unit/test_nri.py): each is decided before any rule on the merged environment.
FILE_REFUSALS = [
    pytest.param(setup_symlink, "env file '{dir}/a.env': is a symlink, not a regular file", id="symlink"),
    pytest.param(setup_fifo, "env file '{dir}/a.env': is a FIFO, not a regular file", id="fifo"),
    pytest.param(
        file_with("NVIDIA_VISIBLE_DEVICES=0\n", 0o666),
        "env file '{dir}/a.env': must not be group- or world-writable (mode 0666)",
        id="world-writable",
    ),
    pytest.param(
        file_with("NVIDIA_VISIBLE_DEVICES=0\nLD_PRELOAD=/tmp/evil.so\n"),
        "env file '{dir}/a.env' line 2: a key matching LD_* may not be set from an env file",
        id="refused-key",
    ),
    pytest.param(
        file_with("GPU_ENV_HOOK_POD_UID=uid-2\nNVIDIA_VISIBLE_DEVICES=0\n"),
        "env file '{dir}/a.env': is pinned to another pod (annotation io.kubernetes.cri.sandbox-uid differs)",
        id="pin-mismatch",
    ),
    pytest.param(setup_missing, "env file '{dir}/none.env': does not exist", id="missing"),
]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        *FILE_REFUSALS,
        pytest.param(
            file_with("NVIDIA_VISIBLE_DEVICES=0\nNVIDIA_DRIVER_CAPABILITIES=secret-cap\n"),
            "env file '{dir}/a.env': NVIDIA_DRIVER_CAPABILITIES names capabilities outside supported-driver-capabilities",
            id="rule-failure-after-merge",
        ),
    ],
)
def test_refusal_is_one_line_and_leaves_the_bundle_alone(
    make_bundle: MakeBundle,
    env_config: MakeConfig,
    run_hook: RunHook,
    tmp_path: Path,
    setup: Callable[[Path, Path], str],
    message: str,
) -> None:
    """Every refusal: exit 1, exactly one stderr line, no file content, config.json byte-identical, no cli."""
    env_dir = tmp_path / "nvidia-env"
    env_dir.mkdir()
    name = setup(env_dir, tmp_path)
    bundle = make_bundle(
        ["NVIDIA_VISIBLE_DEVICES=fake0", f"{VAR}={env_dir}/{name}"], annotations=CONTAINERD_POD
    )
    run = run_hook(bundle, config=env_config(), timeout=10)
    assert run.returncode == 1
    assert run.stderr == message.format(dir=env_dir) + "\n"
    assert run.spec_after == run.spec_before
    assert run.record is None
    assert "/tmp/evil.so" not in run.stderr
    assert "uid-2" not in run.stderr
    assert "secret-cap" not in run.stderr


# --- a quote in an inline comment (issue "Security fix first"): every line is read, the pin and refused keys too


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_pin_after_a_quote_in_a_comment_is_honoured(
    make_bundle: MakeBundle,
    env_config: MakeConfig,
    make_env_file: MakeEnvFile,
    run_hook: RunHook,
    quote: str,
) -> None:
    """A pinned file of 37 lines whose pin follows an inline comment holding a quote: refused for another
    pod, accepted for its own (the former bulk path dropped the pin, and the file passed as unpinned)."""
    env_file = make_env_file(comment_quote_file("GPU_ENV_HOOK_POD_UID=uid-1", quote=quote))
    other_pod = {**CONTAINERD_POD, "io.kubernetes.cri.sandbox-uid": "uid-2"}
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=void", f"{VAR}={env_file}"], annotations=other_pod)
    refused = run_hook(bundle, config=env_config())
    assert (refused.returncode, refused.record) == (1, None)
    assert refused.stderr == (
        f"env file '{env_file}': is pinned to another pod (annotation io.kubernetes.cri.sandbox-uid differs)\n"
    )
    assert refused.spec_after == refused.spec_before

    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=void", f"{VAR}={env_file}"], annotations=CONTAINERD_POD)
    accepted = run_hook(bundle, config=env_config())
    assert accepted.returncode == 0, accepted.stderr
    assert "--device=0,1" in accepted.cli_argv
    env = spec_env(bundle)
    assert "APP_7=value-7" in env  # (a line of the stretch the bulk path dropped)
    assert "USER_CUSTOM_ENV=hello" in env
    assert not [entry for entry in env if entry.startswith("GPU_ENV_HOOK_")]


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_refused_key_after_a_quote_in_a_comment_is_refused(
    make_bundle: MakeBundle,
    env_config: MakeConfig,
    make_env_file: MakeEnvFile,
    run_hook: RunHook,
    quote: str,
) -> None:
    """The same shape hiding LD_PRELOAD: refused, naming its line (the former bulk path accepted the file
    without it)."""
    text = comment_quote_file("LD_PRELOAD=/tmp/evil.so", quote=quote)
    env_file = make_env_file(text)
    bundle = make_bundle([f"{VAR}={env_file}"], annotations=CONTAINERD_POD)
    run = run_hook(bundle, config=env_config())
    assert (run.returncode, run.record) == (1, None)
    line = hidden_line(text, "LD_PRELOAD=/tmp/evil.so")
    assert run.stderr == (
        f"env file '{env_file}' line {line}: a key matching LD_* may not be set from an env file\n"
    )
    assert run.spec_after == run.spec_before
