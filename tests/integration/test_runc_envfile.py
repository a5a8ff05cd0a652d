"""NVIDIA_ENV_FROM_FILE in a real ``runc run``: the file picks the GPUs and a hook after ours sees the merge."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from busybox import make_runc_bundle, run_container, unique_id
from envfile_comment_quote import comment_quote_file, hidden_line
from runc_hooks import hook_entry, load_record, probe_entry, write_config

pytestmark = pytest.mark.integration

MakeEnvFile = Callable[..., Path]
MARKER = "container-ran"
# The container prints its own view of the two variables the env file sets.
ARGS = [
    "sh",
    "-c",
    f'echo "{MARKER} NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES USER_CUSTOM_ENV=$USER_CUSTOM_ENV"',
]
ENV_FILE = "# written by the device plugin\nNVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n"


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    """Where the bundle, config, env-file directory and the two records go."""
    return {
        "bundle": tmp_path / "bundle",
        "config": tmp_path / "config.toml",
        "env_dir": tmp_path / "nvidia-env",  # make_env_file's default directory
        "cli": tmp_path / "cli-record.json",
        "probe": tmp_path / "probe-record.json",
    }


def container_env(env_file: Path) -> list[str]:
    """The container's own env: fake devices of its own, and the env file it names."""
    return ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=fake0,fake1", f"NVIDIA_ENV_FROM_FILE={env_file}"]


def spec_env(bundle: Path) -> list[str]:
    """process.env of the bundle's config.json as it is now."""
    env: list[str] = json.loads((bundle / "config.json").read_text(encoding="utf-8"))["process"]["env"]
    return env


def test_env_file_devices_reach_cli(paths: dict[str, Path], make_env_file: MakeEnvFile) -> None:
    """The env file's NVIDIA_VISIBLE_DEVICES=0,1 reaches the cli as --device=0,1 over the container's fake0,fake1."""
    env_file = make_env_file(ENV_FILE)
    config = write_config(paths["config"], record=paths["cli"], env_dirs=[paths["env_dir"]])
    bundle = make_runc_bundle(
        paths["bundle"], args=ARGS, env=container_env(env_file), prestart=[hook_entry(config)]
    )
    result = run_container(bundle, unique_id("envfile-gpu"))
    assert result.returncode == 0, result.stderr
    cli = load_record(paths["cli"])
    assert cli is not None, result.stderr
    assert "--device=0,1" in cli["argv"]
    assert not any("fake" in arg for arg in cli["argv"])
    merged = spec_env(bundle)
    assert "NVIDIA_VISIBLE_DEVICES=0,1" in merged
    assert "USER_CUSTOM_ENV=hello" in merged
    # runc read config.json before any hook ran, so the process keeps its own env: the shim's job, not ours.
    assert result.stdout == f"{MARKER} NVIDIA_VISIBLE_DEVICES=fake0,fake1 USER_CUSTOM_ENV=\n"


def test_env_only_hook_before_nvidias(paths: dict[str, Path], make_env_file: MakeEnvFile) -> None:
    """With -env-only, a prestart hook after ours (as NVIDIA's would be) reads the merged env from config.json."""
    env_file = make_env_file(ENV_FILE)
    config = write_config(paths["config"], record=paths["cli"], env_dirs=[paths["env_dir"]])
    bundle = make_runc_bundle(
        paths["bundle"],
        args=ARGS,
        env=container_env(env_file),
        prestart=[hook_entry(config, "-env-only"), probe_entry(paths["probe"])],
    )
    result = run_container(bundle, unique_id("envfile-envonly"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(MARKER)
    probe = load_record(paths["probe"])
    assert probe is not None
    assert probe["cwd"] == str(bundle.resolve())
    seen = probe["env"]
    assert "NVIDIA_VISIBLE_DEVICES=0,1" in seen
    assert "USER_CUSTOM_ENV=hello" in seen
    assert "NVIDIA_VISIBLE_DEVICES=fake0,fake1" not in seen
    assert seen.count("NVIDIA_VISIBLE_DEVICES=0,1") == 1
    assert load_record(paths["cli"]) is None


def test_refused_env_file_fails_runc_and_keeps_spec(
    paths: dict[str, Path], make_env_file: MakeEnvFile
) -> None:
    """A symlinked env file makes runc run fail with our one line, leaves config.json byte-identical, runs nothing."""
    target = make_env_file(ENV_FILE, name="real.env")
    link = paths["env_dir"] / "link.env"
    link.symlink_to(target)
    config = write_config(paths["config"], record=paths["cli"], env_dirs=[paths["env_dir"]])
    bundle = make_runc_bundle(
        paths["bundle"],
        args=ARGS,
        env=container_env(link),
        prestart=[hook_entry(config), probe_entry(paths["probe"])],
    )
    before = (bundle / "config.json").read_bytes()
    result = run_container(bundle, unique_id("envfile-refused"))
    assert result.returncode != 0
    line = f"env file '{link}': is a symlink, not a regular file"
    assert re.search(rf"error running hook #0: .*stderr: {re.escape(line)}\\n\"$", result.stderr.strip()), (
        result.stderr
    )
    assert MARKER not in result.stdout
    assert (bundle / "config.json").read_bytes() == before
    assert load_record(paths["cli"]) is None
    assert load_record(paths["probe"]) is None


# A quote in an inline comment before the pin or a refused key (issue "Security fix first"): the hook reads
# every line, as python-dotenv does (the former bulk path dropped the lines up to the next quote).
OWN_POD = {"io.kubernetes.cri.sandbox-uid": "uid-1", "io.kubernetes.cri.container-name": "main"}
OTHER_POD = {"io.kubernetes.cri.sandbox-uid": "uid-2", "io.kubernetes.cri.container-name": "main"}
PIN = "GPU_ENV_HOOK_POD_UID=uid-1"
REFUSED = "LD_PRELOAD=/tmp/evil.so"


def pinning_config(paths: dict[str, Path]) -> Path:
    """A config.toml that checks pins against containerd's annotations."""
    config = write_config(paths["config"], record=paths["cli"], env_dirs=[paths["env_dir"]])
    with config.open("a", encoding="utf-8") as out:
        out.write('pod-binding-engine = "containerd"\n')
    return config


def run_with_hook(
    paths: dict[str, Path], env_file: Path, annotations: dict[str, str], name: str
) -> tuple[subprocess.CompletedProcess[str], bytes, Path]:
    """``runc run`` a bundle naming ``env_file`` with our hook as its prestart hook: the result, config.json
    as written before the run, and the bundle."""
    bundle = make_runc_bundle(
        paths["bundle"],
        args=ARGS,
        env=container_env(env_file),
        prestart=[hook_entry(pinning_config(paths))],
        annotations=annotations,
    )
    before = (bundle / "config.json").read_bytes()
    return run_container(bundle, unique_id(name)), before, bundle


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_pin_after_a_quote_in_a_comment_is_refused_for_another_pod(
    paths: dict[str, Path], make_env_file: MakeEnvFile, quote: str
) -> None:
    """Another pod naming the pinned file: runc run fails with our one line, nothing reaches the cli."""
    env_file = make_env_file(comment_quote_file(PIN, quote=quote))
    result, before, bundle = run_with_hook(paths, env_file, OTHER_POD, "envfile-other-pod")
    assert result.returncode != 0
    line = (
        f"env file '{env_file}': is pinned to another pod (annotation io.kubernetes.cri.sandbox-uid differs)"
    )
    assert f"stderr: {line}\\n" in result.stderr, result.stderr
    assert MARKER not in result.stdout
    assert (bundle / "config.json").read_bytes() == before
    assert load_record(paths["cli"]) is None


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_pin_after_a_quote_in_a_comment_is_accepted_for_its_own_pod(
    paths: dict[str, Path], make_env_file: MakeEnvFile, quote: str
) -> None:
    """Its own pod: the container runs, the file's devices reach the cli, every line is merged."""
    env_file = make_env_file(comment_quote_file(PIN, quote=quote))
    result, _, bundle = run_with_hook(paths, env_file, OWN_POD, "envfile-own-pod")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(MARKER)
    cli = load_record(paths["cli"])
    assert cli is not None, result.stderr
    assert "--device=0,1" in cli["argv"]
    merged = spec_env(bundle)
    assert "APP_7=value-7" in merged
    assert PIN not in merged


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_refused_key_after_a_quote_in_a_comment_is_refused(
    paths: dict[str, Path], make_env_file: MakeEnvFile, quote: str
) -> None:
    """The same shape hiding LD_PRELOAD: runc run fails with our one line naming its line."""
    text = comment_quote_file(REFUSED, quote=quote)
    env_file = make_env_file(text)
    result, before, bundle = run_with_hook(paths, env_file, OWN_POD, "envfile-hidden-key")
    assert result.returncode != 0
    line = (
        f"env file '{env_file}' line {hidden_line(text, REFUSED)}: "
        "a key matching LD_* may not be set from an env file"
    )
    assert f"stderr: {line}\\n" in result.stderr, result.stderr
    assert "/tmp/evil.so" not in result.stderr
    assert MARKER not in result.stdout
    assert (bundle / "config.json").read_bytes() == before
    assert load_record(paths["cli"]) is None
