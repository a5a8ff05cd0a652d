"""Unit tests for hook.stages.precreate (podman's precreate stage) and the oci-hooks.d JSONs shipped for podman."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cdi_helpers import SECRET, write_secret_specs, write_spec
from conftest import REPO, MakeConfig, MakeEnvFile
from envfile_comment_quote import comment_quote_file, hidden_line

from hook.stages.precreate import load_proposed_spec, resolve_precreate
from hook.util import paths
from hook.util.errors import EnvFileError, SpecError

HOOKS_DIR = REPO / "packaging" / "oci-hooks.d"


def proposed(env: list[str], **extra: object) -> bytes:
    """Serialise a minimal proposed config.json the way podman hands it over."""
    document = {"ociVersion": "1.0.2-dev", "process": {"env": env, "args": ["env"]}, "root": {"path": "/r"}}
    return json.dumps({**document, **extra}, separators=(",", ":")).encode()


@pytest.fixture
def config_text(make_config: MakeConfig, tmp_path: Path) -> str:
    """config.toml text accepting env files from tmp_path/nvidia-env."""
    return make_config(f'[env-file]\ndirectories = ["{tmp_path / "nvidia-env"}"]\n').read_text()


@pytest.mark.parametrize(
    ("env", "file", "expected_env"),
    [
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}", "A=1"],
            "NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n",
            ["NVIDIA_ENV_FROM_FILE={file}", "A=1", "NVIDIA_VISIBLE_DEVICES=0,1", "USER_CUSTOM_ENV=hello"],
            id="merged",
        ),
        pytest.param(
            ["A=old", "NVIDIA_ENV_FROM_FILE={file}"],
            "A=new\n",
            ["A=new", "NVIDIA_ENV_FROM_FILE={file}"],
            id="file-replaces-value",
        ),
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}"],
            "GPU_ENV_HOOK_POD_UID=u1\nB=2\n",
            ["NVIDIA_ENV_FROM_FILE={file}", "B=2"],
            id="reserved-keys-not-merged",
        ),
    ],
)
def test_resolve_precreate_merges(
    config_text: str, make_env_file: MakeEnvFile, env: list[str], file: str, expected_env: list[str]
) -> None:
    """Only process.env changes; the result is compact JSON and every other field is kept."""
    path = make_env_file(file)
    raw = proposed(
        [e.replace("{file}", str(path)) for e in env],
        annotations={"io.kubernetes.cri.sandbox-uid": "u1"},
        hooks={"prestart": [{"path": "/x"}]},
    )
    result = resolve_precreate(raw, config_text, source="c.toml", engine="containerd")
    document = json.loads(result)
    assert document["process"] == {
        "env": [e.replace("{file}", str(path)) for e in expected_env],
        "args": ["env"],
    }
    assert {k: v for k, v in document.items() if k != "process"} == {
        k: v for k, v in json.loads(raw).items() if k != "process"
    }
    assert b", " not in result


OUR_HOOK = {"path": "/usr/local/libexec/gpu-env-hook/gpu-env-hook", "args": ["gpu-env-hook", "prestart"]}


@pytest.mark.parametrize(
    ("file", "decision"),
    [
        pytest.param(
            "NVIDIA_VISIBLE_DEVICES=3\nB=2\n", "unpinned:NVIDIA_VISIBLE_DEVICES,B", id="merged-file"
        ),
        pytest.param("X=1\n", "unpinned:X", id="file-changes-no-value"),
        pytest.param(None, "none", id="missing-file-ignored"),
    ],
)
def test_resolve_precreate_hands_off_to_our_hook(
    tmp_path: Path, make_config: MakeConfig, make_env_file: MakeEnvFile, file: str | None, decision: str
) -> None:
    """podman's oci-hooks.d prestart hook of ours, already in the spec, gets the decision in its args (it
    then never reads the env file again); another hook is left as it is."""
    path = make_env_file(file) if file is not None else tmp_path / "nvidia-env" / "missing.env"
    other = {"path": "/usr/bin/other-hook", "args": ["other-hook", "prestart"]}
    raw = proposed([f"NVIDIA_ENV_FROM_FILE={path}", "X=1"], hooks={"prestart": [other, OUR_HOOK]})
    text = make_config(f'[env-file]\ndirectories = ["{path.parent}"]\non-missing = "ignore"\n').read_text()
    document = json.loads(resolve_precreate(raw, text, source="c.toml"))
    assert document["hooks"] == {
        "prestart": [
            other,
            {**OUR_HOOK, "args": ["gpu-env-hook", f"-env-file-merged={decision}", "prestart"]},
        ]
    }


@pytest.mark.parametrize(
    ("raw", "on_missing"),
    [
        pytest.param(proposed(["A=1", "NVIDIA_VISIBLE_DEVICES=0"]), "error", id="no-env-file"),
        pytest.param(proposed(["NVIDIA_ENV_FROM_FILE="]), "error", id="empty-variable"),
        pytest.param(
            b'{"ociVersion": "1",\n "process": {"env": ["A=1"]}}  \n', "error", id="not-even-decoded"
        ),
        pytest.param(proposed(["NVIDIA_ENV_FROM_FILE={dir}/missing.env"]), "ignore", id="missing-ignored"),
        pytest.param(proposed(["NVIDIA_ENV_FROM_FILE={dir}/same.env", "X=1"]), "error", id="changes-nothing"),
    ],
)
def test_resolve_precreate_echoes(
    tmp_path: Path, make_config: MakeConfig, make_env_file: MakeEnvFile, raw: bytes, on_missing: str
) -> None:
    """When the env file changes nothing, podman gets its own bytes back unchanged."""
    make_env_file("X=1\n", name="same.env")
    env_dir = tmp_path / "nvidia-env"
    text = make_config(f'[env-file]\ndirectories = ["{env_dir}"]\non-missing = "{on_missing}"\n').read_text()
    raw = raw.replace(b"{dir}", str(env_dir).encode())
    assert resolve_precreate(raw, text, source="c.toml") is raw


def test_resolve_precreate_refused(config_text: str, make_env_file: MakeEnvFile) -> None:
    """A refused file raises the hook's own one-line refusal."""
    path = make_env_file("LD_PRELOAD=/x.so\n")
    with pytest.raises(
        EnvFileError,
        match=rf"^env file '{path}' line 1: a key matching LD_\* may not be set from an env file$",
    ):
        resolve_precreate(proposed([f"NVIDIA_ENV_FROM_FILE={path}"]), config_text, source="c.toml")


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_resolve_precreate_refuses_a_key_after_a_quote_in_a_comment(
    config_text: str, make_env_file: MakeEnvFile, quote: str
) -> None:
    """LD_PRELOAD after an inline comment holding a quote is read and refused (the former bulk path
    dropped every line up to the next quote)."""
    text = comment_quote_file("LD_PRELOAD=/x.so", quote=quote)
    path = make_env_file(text)
    line = hidden_line(text, "LD_PRELOAD=/x.so")
    with pytest.raises(
        EnvFileError,
        match=rf"^env file '{path}' line {line}: a key matching LD_\* may not be set from an env file$",
    ):
        resolve_precreate(proposed([f"NVIDIA_ENV_FROM_FILE={path}"]), config_text, source="c.toml")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            b'{"NVIDIA_ENV_FROM_FILE": ',
            r"^could not decode OCI spec: .* at line 1 column 26$",
            id="bad-json",
        ),
        pytest.param(
            b'{"ociVersion": "1", "root": {}, "x": "NVIDIA_ENV_FROM_FILE"}',
            r"^Process is empty in OCI spec$",
            id="no-process",
        ),
    ],
)
def test_resolve_precreate_bad_spec(config_text: str, raw: bytes, message: str) -> None:
    """A spec that may name an env file but cannot be decoded is refused with the hook's message."""
    with pytest.raises(SpecError, match=message):
        resolve_precreate(raw, config_text, source="c.toml")


def test_load_proposed_spec_takes_any_size() -> None:
    """A spec larger than the old 16 MiB bound is read whole: the runtime would run it."""
    data = b" " * (20 * 1024 * 1024)
    assert load_proposed_spec(io.BytesIO(data)) == data


# --- the stage as a process ------------------------------------------------------------------------------


def run_stage(config: Path, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -I -m hook -config CONFIG precreate`` with an empty environment, as podman may."""
    return subprocess.run(
        [sys.executable, "-I", "-m", "hook", "-config", str(config), "precreate"],
        input=stdin,
        capture_output=True,
        env={},
        timeout=30,
        check=False,
    )


def test_precreate_process_merges(
    tmp_path: Path, make_config: MakeConfig, make_env_file: MakeEnvFile
) -> None:
    """stdout carries the edited config and nothing else; stderr stays empty."""
    path = make_env_file("USER_CUSTOM_ENV=hello\n")
    config = make_config(f'[env-file]\ndirectories = ["{path.parent}"]\n')
    proc = run_stage(config, proposed([f"NVIDIA_ENV_FROM_FILE={path}"]))
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert json.loads(proc.stdout)["process"]["env"] == [
        f"NVIDIA_ENV_FROM_FILE={path}",
        "USER_CUSTOM_ENV=hello",
    ]


def test_precreate_process_echoes(tmp_path: Path, make_config: MakeConfig) -> None:
    """A config that names no env file comes back byte for byte."""
    raw = b'{"ociVersion": "1.0.2", "process": {"env": ["A=1"]}, "root": {"path": "r"}}\n'
    proc = run_stage(make_config(), raw)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, raw, b"")


def test_precreate_process_refused(
    tmp_path: Path, make_config: MakeConfig, make_env_file: MakeEnvFile
) -> None:
    """A refusal: exit 1, one line on stderr, nothing on stdout (podman then refuses the container)."""
    path = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    path.chmod(0o646)
    config = make_config(f'[env-file]\ndirectories = ["{path.parent}"]\n')
    proc = run_stage(config, proposed([f"NVIDIA_ENV_FROM_FILE={path}"]))
    assert (proc.returncode, proc.stdout) == (1, b"")
    assert proc.stderr.decode() == f"env file '{path}': must not be group- or world-writable (mode 0646)\n"


def test_precreate_process_never_shows_spec_content(
    tmp_path: Path, make_config: MakeConfig, make_env_file: MakeEnvFile
) -> None:
    """CDI mode: specs holding a secret where a refusal would quote it (two of them symlinks to root-only
    files) are skipped with one warning each naming the file, the field and its position; a device only they
    define is refused naming the files; the secret reaches neither stderr nor stdout."""
    specs = tmp_path / "cdi"
    reasons = write_secret_specs(specs, tmp_path / "root-only")
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "ok.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"env": ["OK=1"]}}],
    }
    good = write_spec(specs, "good.json", spec)
    good.chmod(0o644)
    accepted = make_env_file("NVIDIA_VISIBLE_DEVICES=ok.com/gpu=0\n")
    refused = make_env_file("NVIDIA_VISIBLE_DEVICES=x.com/gpu=d\n", name="refused.env")
    config = make_config(
        f'[env-file]\ndirectories = ["{accepted.parent}"]\n[gpu-env]\ndevice-mode = "cdi"\n'
        f'[gpu-env.cdi]\nspec-dirs = ["{specs}"]\nspec-cache = "{tmp_path / "spec-cache"}"\n'
    )
    proc = run_stage(config, proposed([f"NVIDIA_ENV_FROM_FILE={accepted}"]))
    assert proc.returncode == 0, proc.stderr
    assert "OK=1" in json.loads(proc.stdout)["process"]["env"]
    warnings = [line.split(' msg="', 1)[1] for line in proc.stderr.decode().splitlines()]
    listed = [name for name, _ in reasons]
    assert warnings == [f'invalid CDI spec {specs}/{name}: {reason}; skipped"' for name, reason in reasons]
    proc = run_stage(config, proposed([f"NVIDIA_ENV_FROM_FILE={refused}"]))
    assert (proc.returncode, proc.stdout) == (1, b"")
    skipped = ", ".join(f'"{specs}/{name}"' for name in listed[:4])
    assert proc.stderr.decode().splitlines()[-1] == (
        f"env file '{refused}': a device it requests is defined by no CDI spec in {specs} "
        f"(skipped specs: {skipped} and {len(listed) - 4} more)"
    )
    assert SECRET.encode() not in proc.stderr


# --- packaging/oci-hooks.d -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "stage"),
    [
        pytest.param(paths.HOOK_JSON_NAME, "prestart", id="prestart"),
        pytest.param(paths.PRECREATE_JSON_NAME, "precreate", id="precreate"),
    ],
)
def test_oci_hooks_json(name: str, stage: str) -> None:
    """Each shipped hook JSON is the 1.0.0 format and starts the interpreter itself with the launch script
    install writes (-I -S -B -X utf8) and the refusal log, a short argv podman can show whole, a fixed PATH, its
    engine (podman's: the pod-binding engine) and the hook's timeout."""
    document = json.loads((HOOKS_DIR / name).read_text())
    launch = [paths.LAUNCH_SCRIPT, "-refusal-log", paths.REFUSAL_LOG]
    assert document == {
        "version": "1.0.0",
        "hook": {
            "path": "/usr/bin/python3",
            "args": ["/usr/bin/python3", "-I", "-S", "-B", "-X", "utf8", *launch, stage],
            "env": [f"PATH={paths.FIXED_PATH}", "GPU_ENV_HOOK_ENGINE=podman"],
            "timeout": 60,
        },
        "when": {"always": True, "commands": [".*"]},
        "stages": [stage],
    }
