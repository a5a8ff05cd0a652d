"""The runtime shim in front of a real runc: the env file reaches the container, refusals stop it, and every
other command behaves exactly as runc's own."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from busybox import make_runc_bundle, unique_id
from envfile_comment_quote import comment_quote_file, hidden_line
from runc_hooks import load_record, write_config

from hook.install.guard import guard_document
from hook.util import paths

pytestmark = pytest.mark.integration

MakeEnvFile = Callable[..., Path]
RUNC = shutil.which("runc") or "runc"
ENV_FILE = "# written by the device plugin\nNVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n"


class Setup:
    """One test's runc state root, config.toml and the shim's environment (no PATH: as podman's delete)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "runc-root"
        self.record = tmp_path / "cli-record.json"
        self.env_dir = tmp_path / "nvidia-env"  # make_env_file's default directory
        self.config = write_config(tmp_path / "config.toml", record=self.record, env_dirs=[self.env_dir])
        self.env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(self.config)}
        self.ids: list[str] = []

    def new_id(self, prefix: str) -> str:
        """A container id that is force-deleted when the test ends."""
        cid = unique_id(prefix)
        self.ids.append(cid)
        return cid

    def shim(
        self, *args: str, cwd: Path | None = None, detach: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run ``gpu-env-runtime ARGS`` (isolated Python, the runtime found on the fixed PATH); a detached
        container would hold captured pipes open, so its output goes to /dev/null."""
        output = subprocess.DEVNULL if detach else subprocess.PIPE
        return subprocess.run(
            [sys.executable, "-I", "-m", "hook.stages.shim", *args],
            env=self.env,
            cwd=cwd or self.tmp,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            text=True,
            timeout=60,
            check=False,
        )

    def runc(self, *args: str, detach: bool = False) -> subprocess.CompletedProcess[str]:
        """Run runc itself with the same arguments."""
        output = subprocess.DEVNULL if detach else subprocess.PIPE
        return subprocess.run(
            [RUNC, *args],
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    """A fresh setup; every container it named is force-deleted afterwards."""
    value = Setup(tmp_path)
    yield value
    for cid in value.ids:
        value.runc("--root", str(value.root), "delete", "--force", cid)


def test_run_through_shim_sees_env_file(setup: Setup, make_env_file: MakeEnvFile) -> None:
    """``gpu-env-runtime run``: the container prints the file's variables; the cli got the file's devices."""
    env_file = make_env_file(ENV_FILE)
    bundle = make_runc_bundle(
        setup.tmp / "bundle", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    cid = setup.new_id("shim-run")
    result = setup.shim("--root", str(setup.root), "run", "--bundle", str(bundle), cid)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "USER_CUSTOM_ENV=hello" in lines
    assert "NVIDIA_VISIBLE_DEVICES=0,1" in lines
    cli = load_record(setup.record)
    assert cli is not None, result.stderr
    assert "--device=0,1" in cli["argv"]
    assert cli["argv"][-1] == str(bundle / "rootfs")


def test_the_guard_mount_stops_runc_unless_the_shim_applied_the_file(
    setup: Setup, make_env_file: MakeEnvFile
) -> None:
    """The env-file guard's mount (as CDI puts it in config.json) makes runc itself fail (the source under
    /proc cannot exist): the container never runs; through the shim, which applies the file, the mount is gone
    and the container runs with the file's variables."""
    env_file = make_env_file("USER_CUSTOM_ENV=hello\n")
    bundle = make_runc_bundle(
        setup.tmp / "guarded", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    spec = json.loads((bundle / "config.json").read_text())
    [edit] = guard_document()["devices"][0]["containerEdits"]["mounts"]  # type: ignore[index]
    spec.setdefault("mounts", []).append(
        {
            "destination": edit["containerPath"],
            "source": edit["hostPath"],
            "type": "bind",
            "options": edit["options"],
        }
    )
    (bundle / "config.json").write_text(json.dumps(spec))
    direct = setup.runc("--root", str(setup.root), "run", "--bundle", str(bundle), setup.new_id("guard-runc"))
    assert direct.returncode != 0
    assert f"{paths.ENV_FILE_GUARD_SOURCE}: no such file or directory" in direct.stderr
    assert "USER_CUSTOM_ENV=hello" not in direct.stdout
    shimmed = setup.shim(
        "--root", str(setup.root), "run", "--bundle", str(bundle), setup.new_id("guard-shim")
    )
    assert shimmed.returncode == 0, shimmed.stderr
    assert "USER_CUSTOM_ENV=hello" in shimmed.stdout.splitlines()
    edited = json.loads((bundle / "config.json").read_text())
    assert paths.ENV_FILE_GUARD_TARGET not in [entry["destination"] for entry in edited["mounts"]]


def test_run_bundle_from_cwd(setup: Setup, make_env_file: MakeEnvFile) -> None:
    """Without --bundle the shim edits config.json in its working directory, as runc reads it."""
    env_file = make_env_file("USER_CUSTOM_ENV=hello\n")
    bundle = make_runc_bundle(
        setup.tmp / "create", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    cid = setup.new_id("shim-cwd")
    result = setup.shim("--root", str(setup.root), "run", cid, cwd=bundle)
    assert result.returncode == 0, result.stderr
    assert "USER_CUSTOM_ENV=hello" in result.stdout.splitlines()
    assert load_record(setup.record) is None  # the file asks for no GPU: no hook, no cli


@pytest.mark.parametrize(
    "log_format", [pytest.param("json", id="json-log"), pytest.param("text", id="text-log")]
)
def test_refused_file_stops_the_container(setup: Setup, make_env_file: MakeEnvFile, log_format: str) -> None:
    """A refused file: not created, the one line on stderr and in runc's log, config.json unchanged."""
    env_file = make_env_file(ENV_FILE)
    env_file.chmod(0o664)
    bundle = make_runc_bundle(
        setup.tmp / "bundle", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    before = (bundle / "config.json").read_bytes()
    log = setup.tmp / "runc.log"
    cid = setup.new_id("shim-refused")
    result = setup.shim(
        "--root",
        str(setup.root),
        "--log",
        str(log),
        "--log-format",
        log_format,
        "run",
        "-b",
        str(bundle),
        cid,
    )
    line = f"gpu-env-runtime: env file '{env_file}': must not be group- or world-writable (mode 0664)"
    assert (result.returncode, result.stdout, result.stderr) == (1, "", line + "\n")
    assert (bundle / "config.json").read_bytes() == before
    assert load_record(setup.record) is None
    state = setup.runc("--root", str(setup.root), "state", cid)
    assert state.returncode != 0
    assert "container does not exist" in state.stderr
    logged = log.read_text()
    if log_format == "json":
        assert json.loads(logged) == {"level": "error", "msg": line, "time": json.loads(logged)["time"]}
    else:
        assert re.fullmatch(r'time="[^"]+" level=error msg="(?P<msg>.*)"\n', logged)
        assert line in logged


# A quote in an inline comment before the pin or a refused key (issue "Security fix first"): the shim reads
# every line, as python-dotenv does (the former bulk path dropped the lines up to the next quote).
PIN = "GPU_ENV_HOOK_POD_UID=uid-1"
REFUSED = "LD_PRELOAD=/tmp/evil.so"


def check_pins(setup: Setup) -> None:
    """Make the setup's config check pins against containerd's annotations."""
    with setup.config.open("a", encoding="utf-8") as out:
        out.write('pod-binding-engine = "containerd"\n')


def run_pinned(
    setup: Setup, env_file: Path, pod_uid: str, name: str
) -> tuple[subprocess.CompletedProcess[str], bytes, Path]:
    """``gpu-env-runtime run`` a bundle naming ``env_file`` in pod ``pod_uid`` (containerd's annotations):
    the result, config.json before the run, the bundle."""
    annotations = {"io.kubernetes.cri.sandbox-uid": pod_uid, "io.kubernetes.cri.container-name": "main"}
    bundle = make_runc_bundle(
        setup.tmp / "bundle",
        args=["env"],
        env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"],
        annotations=annotations,
    )
    before = (bundle / "config.json").read_bytes()
    cid = setup.new_id(name)
    return setup.shim("--root", str(setup.root), "run", "--bundle", str(bundle), cid), before, bundle


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_pin_after_a_quote_in_a_comment(setup: Setup, make_env_file: MakeEnvFile, quote: str) -> None:
    """A pinned file whose pin follows an inline comment holding a quote: another pod's container is not
    created (one line, config.json unchanged); its own pod's sees every line of the file."""
    check_pins(setup)
    env_file = make_env_file(comment_quote_file(PIN, quote=quote))
    refused, before, bundle = run_pinned(setup, env_file, "uid-2", "shim-other-pod")
    line = (
        f"gpu-env-runtime: env file '{env_file}': is pinned to another pod "
        "(annotation io.kubernetes.cri.sandbox-uid differs)"
    )
    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", line + "\n")
    assert (bundle / "config.json").read_bytes() == before
    assert load_record(setup.record) is None

    accepted, _, _ = run_pinned(setup, env_file, "uid-1", "shim-own-pod")
    assert accepted.returncode == 0, accepted.stderr
    lines = accepted.stdout.splitlines()
    assert {"NVIDIA_VISIBLE_DEVICES=0,1", "APP_7=value-7", "USER_CUSTOM_ENV=hello"} <= set(lines)
    assert PIN not in lines
    cli = load_record(setup.record)
    assert cli is not None, accepted.stderr
    assert "--device=0,1" in cli["argv"]


@pytest.mark.parametrize(
    "quote", [pytest.param("'", id="single-quote"), pytest.param('"', id="double-quote")]
)
def test_refused_key_after_a_quote_in_a_comment(setup: Setup, make_env_file: MakeEnvFile, quote: str) -> None:
    """The same shape hiding LD_PRELOAD: the container is not created, one line names the key's line."""
    text = comment_quote_file(REFUSED, quote=quote)
    check_pins(setup)
    env_file = make_env_file(text)
    result, before, bundle = run_pinned(setup, env_file, "uid-1", "shim-hidden-key")
    line = (
        f"gpu-env-runtime: env file '{env_file}' line {hidden_line(text, REFUSED)}: "
        "a key matching LD_* may not be set from an env file"
    )
    assert (result.returncode, result.stdout, result.stderr) == (1, "", line + "\n")
    assert (bundle / "config.json").read_bytes() == before
    assert load_record(setup.record) is None


def normalise(text: str, *ids: str) -> str:
    """Drop what differs between two equal runs: log timestamps and the container ids."""
    text = re.sub(r'time="[^"]*"', 'time="T"', text)
    for index, cid in enumerate(ids):
        text = text.replace(cid, f"<id{index}>")
    return text


def test_passthrough_commands_match_runc(setup: Setup) -> None:
    """state, kill, delete and --version through the shim give runc's exact output and status."""
    bundle = make_runc_bundle(setup.tmp / "bundle", args=["sleep", "60"], env=["PATH=/bin", "A=1"])
    before = (bundle / "config.json").read_bytes()
    root = str(setup.root)
    via_shim, via_runc = setup.new_id("shim-pass"), setup.new_id("runc-pass")
    started = setup.shim("--root", root, "run", "--detach", "--bundle", str(bundle), via_shim, detach=True)
    assert started.returncode == 0
    assert (bundle / "config.json").read_bytes() == before  # no env file, no GPU: left alone
    assert (
        setup.runc(
            "--root", root, "run", "--detach", "--bundle", str(bundle), via_runc, detach=True
        ).returncode
        == 0
    )

    missing = unique_id("missing")
    commands = [
        ["--version"],
        ["--root", root, "state", "{id}"],
        ["--root", root, "state", missing],
        ["--root", root, "kill", missing, "KILL"],
        ["--root", root, "delete", missing],
        ["--root", root, "delete", "{id}"],  # refused: the container is running
        ["--root", root, "kill", "{id}", "KILL"],
        ["--root", root, "--log-format", "json", "delete", "--force", "{id}"],
        ["--root", root, "state", "{id}"],  # gone now
    ]
    for command in commands:
        shim = setup.shim(*(arg.replace("{id}", via_shim) for arg in command))
        runc = setup.runc(*(arg.replace("{id}", via_runc) for arg in command))
        got, want = outcome(shim, via_shim), outcome(runc, via_runc)
        assert got == want, command


def outcome(proc: subprocess.CompletedProcess[str], cid: str) -> tuple[int, object, str]:
    """Status, stdout and stderr as compared; of ``runc state`` JSON, the parts two containers from one
    bundle share."""
    stdout: object = normalise(proc.stdout, cid)
    if proc.returncode == 0 and proc.stdout.startswith("{"):
        state = json.loads(proc.stdout)
        stdout = {key: state[key] for key in ("ociVersion", "status", "bundle", "rootfs", "owner")}
    return proc.returncode, stdout, normalise(proc.stderr, cid)


# runc 1.1 (urfave/cli over Go's flag package) reads a help or version flag's value with strconv.ParseBool:
# false runs the command as if the flag were absent (measured: `runc --help=false list` lists).
FALSE_FORMS = ["--help=false", "-h=false", "--version=false", "-v=f", "--help=0", "--help=F", "--help=FALSE"]


@pytest.mark.parametrize("flag", [pytest.param(flag, id=flag) for flag in FALSE_FORMS])
def test_false_help_or_version_creates_with_the_env_file(
    setup: Setup, make_env_file: MakeEnvFile, flag: str
) -> None:
    """``gpu-env-runtime FLAG create``: runc creates the container, so the shim merges the env file first
    (config.json has the file's variables, our hook gave the cli the file's devices)."""
    env_file = make_env_file(ENV_FILE)
    bundle = make_runc_bundle(
        setup.tmp / "bundle", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    cid = setup.new_id("shim-false")
    result = setup.shim("--root", str(setup.root), flag, "create", "--bundle", str(bundle), cid, detach=True)
    assert result.returncode == 0
    env = json.loads((bundle / "config.json").read_text())["process"]["env"]
    assert {"USER_CUSTOM_ENV=hello", "NVIDIA_VISIBLE_DEVICES=0,1"} <= set(env)
    state = setup.runc("--root", str(setup.root), "state", cid)
    assert json.loads(state.stdout)["status"] == "created"
    cli = load_record(setup.record)
    assert cli is not None
    assert "--device=0,1" in cli["argv"]


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--help=yes"], id="help-yes"),
        pytest.param(["-v=no"], id="version-no"),
        pytest.param(["--help=false", "-h=false"], id="two-forms"),
        pytest.param(["-h=t"], id="help-t"),
        pytest.param(["--version=1"], id="version-1"),
    ],
)
def test_help_version_usage_and_true_forms_pass_through(
    setup: Setup, make_env_file: MakeEnvFile, flags: list[str]
) -> None:
    """A value runc refuses (its usage error), both forms of one flag, or a true value: runc creates nothing,
    and the shim leaves config.json alone and gives runc's own output and status."""
    env_file = make_env_file(ENV_FILE)
    bundle = make_runc_bundle(
        setup.tmp / "bundle", args=["env"], env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
    )
    before = (bundle / "config.json").read_bytes()
    via_shim, via_runc = setup.new_id("shim-usage"), setup.new_id("runc-usage")
    root = str(setup.root)
    shim = setup.shim("--root", root, *flags, "create", "--bundle", str(bundle), via_shim)
    runc = setup.runc("--root", root, *flags, "create", "--bundle", str(bundle), via_runc)
    assert outcome(shim, via_shim) == outcome(runc, via_runc)
    assert (bundle / "config.json").read_bytes() == before
    assert load_record(setup.record) is None
    for cid in (via_shim, via_runc):
        assert setup.runc("--root", root, "state", cid).returncode != 0
