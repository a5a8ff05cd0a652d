"""Differential: ``resolve --json`` agrees with what the real hook does on the same bundle, case by case."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from conftest import MakeBundle, MakeConfig, MakeEnvFile, RunHook


class Case(NamedTuple):
    """A container and a node configuration to run through the hook and through ``resolve``."""

    env: list[str]
    extra: str = ""
    env_file: str | None = None
    annotations: dict[str, str] | None = None
    privileged: bool = False
    mounts: list[dict[str, str]] | None = None
    flags: tuple[str, ...] = ()
    cli: str = ""


FILE = "NVIDIA_ENV_FROM_FILE={file}"
POD = {"io.kubernetes.cri.sandbox-uid": "pod-1", "io.kubernetes.cri.container-name": "main"}
DEVICE_MOUNT = {"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/3"}

CASES = [
    pytest.param(Case(["NVIDIA_VISIBLE_DEVICES=0,1"]), id="devices"),
    pytest.param(
        Case(["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,video"]), id="all-caps"
    ),
    pytest.param(Case(["NVIDIA_VISIBLE_DEVICES=none"]), id="none"),
    pytest.param(Case(["NVIDIA_VISIBLE_DEVICES=void"]), id="void-not-gpu"),
    pytest.param(Case(["A=1"]), id="no-request"),
    pytest.param(Case(["CUDA_VERSION=11.0"]), id="legacy-cuda-image"),
    pytest.param(
        Case(
            ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=11.0 brand=tesla", "NVIDIA_REQUIRE_X=a"]
        ),
        id="requirements",
    ),
    pytest.param(
        Case(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=11.0"], extra="disable-require = true"),
        id="disable-require",
    ),
    pytest.param(
        Case(["NVIDIA_VISIBLE_DEVICES=0"], extra='supported-driver-capabilities = "utility"'),
        id="caps-limited",
    ),
    pytest.param(
        Case(["NVIDIA_VISIBLE_DEVICES=0"], flags=("-debug",)),
        id="debug-flag",
    ),
    pytest.param(
        Case(
            ["NVIDIA_VISIBLE_DEVICES=0"],
            cli="load-kmods = false\nno-cgroups = true\nuser = 'root:video'\nldcache = '/x'",
        ),
        id="cli-options",
    ),
    pytest.param(Case(["SWARM_GPUS=2,3"], extra='swarm-resource = "SWARM_GPUS"'), id="swarm-resource"),
    pytest.param(
        Case(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1"], privileged=True), id="imex-channels"
    ),
    pytest.param(
        Case([], extra="accept-nvidia-visible-devices-as-volume-mounts = true", mounts=[DEVICE_MOUNT]),
        id="volume-mount",
    ),
    pytest.param(
        Case(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"]), id="mig-unprivileged-refused"
    ),
    pytest.param(Case(["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"]), id="cdi-name-refused"),
    pytest.param(
        Case(
            ["NVIDIA_VISIBLE_DEVICES=fake0,fake1", FILE],
            env_file="NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n",
        ),
        id="env-file-devices",
    ),
    pytest.param(Case([FILE], env_file="LD_PRELOAD=/x.so\n"), id="env-file-refused-key"),
    pytest.param(
        Case([FILE], env_file="GPU_ENV_HOOK_POD_UID=pod-1\nNVIDIA_VISIBLE_DEVICES=2\n", annotations=POD),
        id="env-file-pinned",
    ),
    pytest.param(
        Case([FILE], env_file="GPU_ENV_HOOK_POD_UID=pod-2\nNVIDIA_VISIBLE_DEVICES=2\n", annotations=POD),
        id="env-file-pin-mismatch",
    ),
    pytest.param(
        Case(
            [FILE],
            extra="accept-nvidia-visible-devices-envvar-when-unprivileged = false",
            env_file="GPU_ENV_HOOK_POD_UID=pod-1\nNVIDIA_VISIBLE_DEVICES=2\n",
            annotations=POD,
        ),
        id="env-file-pinned-unprivileged",
    ),
    pytest.param(
        Case(
            [FILE],
            extra="accept-nvidia-visible-devices-envvar-when-unprivileged = false",
            env_file="NVIDIA_VISIBLE_DEVICES=2\n",
        ),
        id="env-file-unpinned-unprivileged",
    ),
    pytest.param(
        Case(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_ENV_FROM_FILE=/etc/passwd"]), id="env-file-outside"
    ),
    pytest.param(
        Case(
            ["NVIDIA_VISIBLE_DEVICES=fake0", FILE],
            env_file="NVIDIA_VISIBLE_DEVICES=1\n",
            flags=("-env-only",),
        ),
        id="env-only",
    ),
]


REFUSED = ("mig-unprivileged-refused", "cdi-name-refused", "env-file-refused-key", "env-file-pin-mismatch")
EXPECTED = {
    **{str(param.id): "gpu" for param in CASES},
    **dict.fromkeys((*REFUSED, "env-file-outside"), "refused"),
    **dict.fromkeys(("void-not-gpu", "no-request", "env-file-unpinned-unprivileged"), "not-gpu"),
    "env-only": "env-only",
}


def request_id(request: pytest.FixtureRequest) -> str:
    """Return the id of the current parametrized case."""
    return str(request.node.callspec.id)


def resolve_json(
    bundle: Path, config: Path, state: Path, flags: tuple[str, ...]
) -> tuple[int, dict[str, Any]]:
    """Run ``python -I -m hook -config FILE resolve --json`` with the environment run_hook gives the hook."""
    options = [f"--{flag.lstrip('-')}" for flag in flags]
    argv = [sys.executable, "-I", "-m", "hook", "-config", str(config), "resolve", "--bundle", str(bundle)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_CONFIG_HOME": str(bundle / "no-xdg")}
    proc = subprocess.run(
        [*argv, "--state", str(state), "--json", *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="env files must be root-owned")
@pytest.mark.parametrize("case", CASES)
def test_resolve_agrees_with_the_hook(
    case: Case,
    tmp_path: Path,
    make_bundle: MakeBundle,
    make_config: MakeConfig,
    make_env_file: MakeEnvFile,
    run_hook: RunHook,
    request: pytest.FixtureRequest,
) -> None:
    """resolve's outcome, cli argv and error equal what the hook did and what the stand-in cli received."""
    file_path = (
        make_env_file(case.env_file) if case.env_file is not None else tmp_path / "nvidia-env" / "none.env"
    )
    env = [entry.format(file=file_path) for entry in case.env]
    bundle = make_bundle(env, privileged=case.privileged, mounts=case.mounts, annotations=case.annotations)
    env_dir = tmp_path / "nvidia-env"
    env_file_table = f'[env-file]\ndirectories = ["{env_dir}"]\npod-binding-engine = "containerd"\n'
    config = make_config(cli=case.cli, extra=f"{case.extra}\n{env_file_table}")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"pid": 4242, "bundle": str(bundle)}), encoding="utf-8")

    code, document = resolve_json(bundle, config, state, case.flags)
    # resolve reads and writes nothing, so running it first cannot change what the hook sees.
    run = run_hook(bundle, config=config, flags=list(case.flags))

    assert document["version"] == 1
    assert document["outcome"] == EXPECTED[request_id(request)]
    assert code == run.returncode
    if document["outcome"] == "gpu":
        assert run.cli_argv == document["cli"]["argv"]
        assert run.record is not None
        assert document["cli"]["env_added"].items() <= run.record["env"].items()
    else:
        assert run.record is None
    if document["outcome"] == "refused":
        assert run.stderr.splitlines()[-1] == document["error"]
        assert run.spec_after == run.spec_before
    else:
        assert document["error"] is None
        assert (run.spec_after != run.spec_before) == document["env_changed"]


# --- the whole differential table ------------------------------------------------------------------------

DIFFERENTIAL = Path(__file__).resolve().parents[1] / "differential"
if str(DIFFERENTIAL) not in sys.path:
    sys.path.insert(0, str(DIFFERENTIAL))

from differential_cases import CASES as TABLE  # noqa: E402
from differential_cases import Case as Row  # noqa: E402
from test_differential import Render, render_stdin, write_inputs  # noqa: E402

from hook.__main__ import parse_flags  # noqa: E402
from hook.commands.cli import build_resolve_document  # noqa: E402

# Rows that fail only when the cli is executed (or by the cli's own status): resolve never executes it.
AFTER_EXEC = {
    "cli-configured-path-verbatim-missing",
    "cli-configured-not-executable",
    "exec-status-is-the-clis",
}
STAGE_ROWS = [
    pytest.param(row, id=row.id)
    for row in TABLE
    if row.command in ("prestart", "createRuntime")
    and not any(flag.lstrip("-").split("=")[0] in ("h", "help", "version") for flag in row.flags)
    and row.exit != 2
]


@pytest.mark.parametrize("row", STAGE_ROWS)
def test_resolve_agrees_with_the_differential_table(
    row: Row,
    tmp_path: Path,
    record_path: Path,
    make_bundle: MakeBundle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On every stage row of the differential table (which pins the real hook), resolve gives its exit and argv."""
    render = Render(tmp_path)
    bundle, config, flags, hook_env = write_inputs(row, tmp_path, render, make_bundle, record_path)
    stdin = render_stdin(row, render)
    parsed, _ = parse_flags([*(["-config", str(config)] if config else []), *flags])
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_CONFIG_HOME": str(bundle / "no-xdg")}
    environ.update(hook_env)
    monkeypatch.chdir(bundle)  # runc runs hooks in the bundle directory
    document = build_resolve_document(
        str(bundle),
        stdin,
        config=str(parsed["config"]) if "config" in parsed else None,
        debug=parsed.get("debug") is True,
        env_only=parsed.get("env-only") is True,
        environ=environ,
    )
    if row.exit == 0 or row.id in AFTER_EXEC:
        assert document["outcome"] != "refused", document["error"]
        expected = [render(item) for item in row.argv] if row.argv is not None else None
        if row.id in AFTER_EXEC:
            assert document["outcome"] == "gpu"
        else:
            assert (document["cli"]["argv"] if document["cli"] else None) == expected
    else:
        assert document["outcome"] == "refused"
        assert row.stderr is not None
        last = row.stderr[-1]
        if isinstance(last, str):
            assert document["error"] == render(last)
        else:
            assert re.fullmatch(render(last.pattern), document["error"])
