"""Unit tests for hook.stages.shim: runc's command line, the real runtime, the bundle edit and the shim process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, MakeBundle, MakeConfig, MakeEnvFile

from hook.launcher import build_code
from hook.pipeline.config import DEFAULT_HOOK_TIMEOUT
from hook.stages.shim import (
    add_prestart_hook,
    build_hook_entry,
    format_log_line,
    has_gpu_hook,
    is_gpu_hook,
    load_runtimes,
    parse_runtime_args,
    resolve_runtime,
    resolve_spec,
)
from hook.util import paths
from hook.util.errors import EnvFileError, ExecError, HookError
from hook.util.paths import FIXED_PATH

HOOK: dict[str, object] = {
    "path": "/py",
    "args": ["/py", "-I", "-m", "hook", "prestart"],
    "env": ["PATH=/bin"],
}
FAKE_RUNTIME = """#!/bin/sh
# Records what the shim exec'd: argv (one per line), cwd, open fds, config.json at that moment.
out="{out}"
printf '%s\\n' "$0" "$@" > "$out/argv"
pwd > "$out/cwd"
ls /proc/$$/fd > "$out/fds"
cp "{bundle}/config.json" "$out/config.json" 2>/dev/null
exit {status}
"""


# --- parse_runtime_args ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "command", "bundle", "log_path", "log_json"),
    [
        pytest.param(["create", "--bundle", "/b", "id"], "create", "/b", None, False, id="bundle-space"),
        pytest.param(["create", "--bundle=/b", "id"], "create", "/b", None, False, id="bundle-equals"),
        pytest.param(["create", "-b", "/b", "id"], "create", "/b", None, False, id="short-space"),
        pytest.param(["create", "-b=/b", "id"], "create", "/b", None, False, id="short-equals"),
        pytest.param(["run", "-d", "--bundle", "/b", "id"], "run", "/b", None, False, id="run"),
        pytest.param(["create", "id"], "create", ".", None, False, id="default-cwd"),
        pytest.param(["create", "id", "--bundle", "/b"], "create", "/b", None, False, id="flag-after-id"),
        pytest.param(["create", "-b", "/a", "-b", "/b", "id"], "create", "/b", None, False, id="last-wins"),
        pytest.param(
            ["create", "--bundle", "create", "id"], "create", "create", None, False, id="bundle-named-create"
        ),
        pytest.param(
            ["create", "--pid-file", "--bundle", "id"],
            "create",
            ".",
            None,
            False,
            id="value-that-looks-like-flag",
        ),
        pytest.param(
            ["create", "--console-socket", "/s", "--pid-file", "/p", "--bundle", "/b", "id"],
            "create",
            "/b",
            None,
            False,
            id="podman-style",
        ),
        pytest.param(["create", "--", "-b", "/b"], "create", ".", None, False, id="double-dash-stops"),
        pytest.param(
            ["--root", "create", "state", "id"], "state", ".", None, False, id="root-value-not-command"
        ),
        pytest.param(["--root=/r", "create", "id"], "create", ".", None, False, id="root-equals"),
        pytest.param(
            ["--log", "/l", "--log-format", "json", "create", "id"], "create", ".", "/l", True, id="log-json"
        ),
        pytest.param(
            ["--log=/l", "--log-format=text", "kill", "id"], "kill", ".", "/l", False, id="log-text"
        ),
        pytest.param(["--systemd-cgroup", "--debug", "run", "id"], "run", ".", None, False, id="bool-flags"),
        pytest.param(
            ["-root", "/r", "-log", "/l", "delete", "id"], "delete", ".", "/l", False, id="single-dash"
        ),
        pytest.param(["--", "state", "id"], "state", ".", None, False, id="leading-double-dash"),
        pytest.param(["--version"], None, ".", None, False, id="version"),
        pytest.param(
            ["--help", "create", "--bundle", "/b", "x"], None, ".", None, False, id="help-before-create"
        ),
        pytest.param(["-h", "run", "x"], None, ".", None, False, id="short-help-before-run"),
        pytest.param(["--version", "create", "x"], None, ".", None, False, id="version-before-create"),
        pytest.param(["--debug", "-v", "run", "x"], None, ".", None, False, id="short-version-after-a-flag"),
        pytest.param(["--root", "-h", "create", "x"], "create", ".", None, False, id="root-value-named-h"),
        *(
            pytest.param([flag, "create", "-b", "/b", "x"], "create", "/b", None, False, id=f"false-{flag}")
            for flag in (
                "--help=false",
                "-h=false",
                "--version=false",
                "-v=f",
                "--help=0",
                "--help=F",
                "--help=FALSE",
                "--help=False",
                "-help=false",
                "--h=false",
            )
        ),
        *(
            pytest.param([flag, "create", "-b", "/b", "x"], None, ".", None, False, id=f"passes-{flag}")
            for flag in ("--help=true", "-h=1", "-v=t", "--version=T", "--help=TRUE", "--help=True")
        ),
        *(
            pytest.param([*flags, "create", "-b", "/b", "x"], None, ".", None, False, id=f"usage-{name}")
            for name, flags in (
                ("yes", ["--help=yes"]),
                ("empty", ["--help="]),
                ("mixed-case", ["--version=fAlse"]),
                ("two-forms", ["--help=false", "-h=false"]),
                ("two-forms-version", ["-v=0", "--version=0"]),
            )
        ),
        pytest.param(
            ["--help=true", "--help=false", "run", "x"], "run", ".", None, False, id="last-value-wins"
        ),
        pytest.param(["--help=false", "--help", "run", "x"], None, ".", None, False, id="last-value-help"),
        pytest.param(
            ["--help=false", "-v", "run", "x"], None, ".", None, False, id="false-help-then-version"
        ),
        pytest.param(["--help", "false", "run", "x"], None, ".", None, False, id="value-not-after-space"),
        pytest.param([], None, ".", None, False, id="empty"),
        pytest.param(["state", "--bundle", "/b"], "state", ".", None, False, id="bundle-ignored-on-state"),
    ],
)
def test_parse_runtime_args(
    argv: list[str], command: str | None, bundle: str, log_path: str | None, log_json: bool
) -> None:
    """Global flags and their values are skipped; the bundle comes from create/run's own flags."""
    invocation = parse_runtime_args(argv)
    assert (invocation.command, invocation.bundle, invocation.log_path, invocation.log_json) == (
        command,
        bundle,
        log_path,
        log_json,
    )


# --- the real runtime ------------------------------------------------------------------------------------


def make_executable(path: Path, mode: int = 0o755) -> Path:
    """Write a tiny shell script with the given mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("runtimes", "expected"),
    [
        pytest.param(("runc",), "b/runc", id="name-on-path"),
        pytest.param(("crun", "runc"), "a/crun", id="first-listed-wins"),
        pytest.param(("missing", "runc"), "b/runc", id="skips-missing"),
        pytest.param(("noexec", "runc"), "b/runc", id="skips-not-executable"),
        pytest.param(("./a/crun", "runc"), "b/runc", id="skips-relative-path"),
        pytest.param(("ABS",), "abs/tool", id="absolute-path"),
        pytest.param(("runc-in-both",), "a/runc-in-both", id="path-order"),
    ],
)
def test_resolve_runtime(tmp_path: Path, runtimes: tuple[str, ...], expected: str) -> None:
    """A name is looked up on the given search path in order; an absolute path is used as it is."""
    make_executable(tmp_path / "a" / "crun")
    make_executable(tmp_path / "a" / "runc-in-both")
    make_executable(tmp_path / "b" / "runc-in-both")
    make_executable(tmp_path / "b" / "runc")
    make_executable(tmp_path / "a" / "noexec", 0o644)
    make_executable(tmp_path / "abs" / "tool")
    names = tuple(str(tmp_path / "abs" / "tool") if name == "ABS" else name for name in runtimes)
    search = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    assert resolve_runtime(names, search) == str(tmp_path / expected)


def test_resolve_runtime_none_found(tmp_path: Path) -> None:
    """No executable among the configured runtimes is one line naming them and the search path."""
    with pytest.raises(
        ExecError,
        match=(
            r"^no runtime found: none of \[nvidia-container-runtime\] runtimes \(runc, crun\) is an absolute "
            r"path or a name on /nowhere of an executable file$"
        ),
    ):
        resolve_runtime(("runc", "crun"), "/nowhere")


def test_resolve_runtime_ignores_callers_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's PATH is never searched (the default search path is the fixed one)."""
    make_executable(tmp_path / "only-here")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ExecError, match=rf"^no runtime found: .* on {FIXED_PATH} of an executable file$"):
        resolve_runtime(("only-here",))


UPSTREAM_CONFIG = """\
disable-require = false
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#root = "/run/nvidia/driver"
environment = []
load-kmods = true
ldconfig = "@/sbin/ldconfig"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(None, ("runc", "crun"), id="no-file"),
        pytest.param("[nvidia-container-cli]\nload-kmods = false\n", ("runc", "crun"), id="other-keys"),
        pytest.param('# runtimes = ["x"]\n', ("runc", "crun"), id="commented-out"),
        pytest.param('[nvidia-container-runtime]\nruntimes = ["crun"]\n', ("crun",), id="table"),
        pytest.param('nvidia-container-runtime.runtimes = ["/x/y"]\n', ("/x/y",), id="dotted-key"),
        pytest.param('[nvidia-container-runtime]\n"runtim\\u0065s" = ["z"]\n', ("z",), id="escaped-key"),
        pytest.param(UPSTREAM_CONFIG, ("docker-runc", "runc", "crun"), id="upstream-shipped"),
        pytest.param(
            "[nvidia-container-runtime]\n  runtimes=[ \"a\" , 'b', ]  # x\n", ("a", "b"), id="spacing"
        ),
        pytest.param("[nvidia-container-runtime]\nruntimes = []\n", (), id="empty"),
        pytest.param('[nvidia-container-runtime]\nruntimes = [\n "a",\n]\n', ("a",), id="multi-line"),
        pytest.param('[other]\nruntimes = ["a"]\n', ("runc", "crun"), id="other-table"),
        pytest.param('x = "runtimes"\n', ("runc", "crun"), id="mentioned-in-a-value"),
        pytest.param('[gpu-env-runtime]\nruntime = "/usr/bin/crun"\n', ("/usr/bin/crun",), id="ours"),
        pytest.param(
            UPSTREAM_CONFIG + '[gpu-env-runtime]\nruntime = "/usr/sbin/runc"\n',
            ("/usr/sbin/runc",),
            id="ours-over-nvidia",
        ),
        pytest.param(
            '[gpu-env-runtime]\nruntime = ""\n[nvidia-container-runtime]\nruntimes = ["crun"]\n',
            ("crun",),
            id="ours-empty-is-unset",
        ),
        pytest.param("[nvidia-container-runtime]\nmode = 'auto'\n", ("runc", "crun"), id="table-no-key"),
        pytest.param(
            '[nvidia-container-runtime]\nruntimes = ["crun"]\n[x]\ny = """a"""\n',
            ("crun",),
            id="beyond-the-subset",
        ),
    ],
)
def test_load_runtimes(text: str | None, expected: tuple[str, ...]) -> None:
    """Our ``[gpu-env-runtime] runtime`` when set, else NVIDIA's runtimes list, else the default."""
    assert load_runtimes(text, "config.toml") == expected


def test_load_runtimes_relative_is_refused() -> None:
    """Our key takes an absolute path only: a name would be looked up, and could be NVIDIA's runtime."""
    with pytest.raises(
        HookError,
        match=r"^error getting hook config: failed to load config: c.toml: gpu-env-runtime.runtime must be an absolute path$",
    ):
        load_runtimes('[gpu-env-runtime]\nruntime = "runc"\n', "c.toml")


def test_load_runtimes_not_strings_is_refused() -> None:
    """A runtimes list of anything but names goes to the config parser, which says what is wrong."""
    with pytest.raises(
        HookError,
        match=r"^error getting hook config: failed to load config: c.toml: "
        r"nvidia-container-runtime.runtimes must be an array of strings, got an array$",
    ):
        load_runtimes('[nvidia-container-runtime]\nruntimes = [1]\n[x]\ny = """a"""\n', "c.toml")


# --- hooks -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param({"path": "/usr/bin/nvidia-container-runtime-hook"}, True, id="nvidia-hook"),
        pytest.param(
            {"path": "/usr/bin/nvidia-container-toolkit", "args": ["x", "prestart"]}, True, id="toolkit"
        ),
        pytest.param({"path": "/usr/local/libexec/gpu-env-hook/gpu-env-hook"}, True, id="our-wrapper"),
        pytest.param({"path": "/py", "args": ["/py", "-I", "-m", "hook", "prestart"]}, True, id="our-module"),
        pytest.param({"path": "/py", "args": ["/py", "-m", "hookx"]}, False, id="other-module"),
        pytest.param({"path": "/usr/bin/other-hook", "args": ["-m"]}, False, id="other-hook"),
        pytest.param("not-an-object", False, id="not-an-object"),
    ],
)
def test_is_gpu_hook(entry: object, expected: bool) -> None:
    """NVIDIA's hook names and ours (wrapper or ``-m hook``) count as a GPU hook."""
    assert is_gpu_hook(entry) is expected


@pytest.mark.parametrize(
    ("hooks", "expected"),
    [
        pytest.param(None, False, id="no-hooks"),
        pytest.param({"prestart": [{"path": "/x"}]}, False, id="other-prestart"),
        pytest.param(
            {"prestart": [{"path": "/x"}, {"path": "/b/nvidia-container-toolkit"}]}, True, id="prestart"
        ),
        pytest.param(
            {"createRuntime": [{"path": "/b/nvidia-container-runtime-hook"}]}, True, id="create-runtime"
        ),
        pytest.param({"poststart": [{"path": "/b/nvidia-container-runtime-hook"}]}, False, id="other-stage"),
    ],
)
def test_has_gpu_hook(hooks: dict[str, Any] | None, expected: bool) -> None:
    """Only prestart and createRuntime hooks count."""
    document: dict[str, object] = {} if hooks is None else {"hooks": hooks}
    assert has_gpu_hook(document) is expected


def test_add_prestart_hook_appends_and_copies() -> None:
    """The hook goes after existing prestart hooks; other stages and the input stay as they were."""
    document: dict[str, object] = {"hooks": {"prestart": [{"path": "/a"}], "poststop": [{"path": "/b"}]}}
    edited = add_prestart_hook(document, HOOK)
    assert edited == {"hooks": {"prestart": [{"path": "/a"}, HOOK], "poststop": [{"path": "/b"}]}}
    assert document == {"hooks": {"prestart": [{"path": "/a"}], "poststop": [{"path": "/b"}]}}


CODE = build_code("hook.__main__", "gpu-env-hook", lib="/lib")


@pytest.mark.parametrize(
    ("config", "environ", "args", "env"),
    [
        pytest.param("/etc/c.toml", {}, ["-config", "/etc/c.toml", "prestart"], [], id="config"),
        pytest.param(None, {}, ["prestart"], [], id="no-config"),
        pytest.param(None, {"XDG_CONFIG_HOME": "/x"}, ["prestart"], ["XDG_CONFIG_HOME=/x"], id="xdg"),
        pytest.param(
            "/etc/c.toml",
            {"XDG_CONFIG_HOME": "/x"},
            ["-config", "/etc/c.toml", "prestart"],
            [],
            id="config-over-xdg",
        ),
        pytest.param(
            "/etc/c.toml",
            {"GPU_ENV_HOOK_ENGINE": "containerd"},
            ["-config", "/etc/c.toml", "prestart"],
            ["GPU_ENV_HOOK_ENGINE=containerd"],
            id="engine-passed-on",
        ),
    ],
)
def test_build_hook_entry(
    config: str | None, environ: dict[str, str], args: list[str], env: list[str]
) -> None:
    """Our hook starts as the shim did (-I -S -B -X utf8, the shim's package directory) with a fixed PATH, the
    engine's name and the config file the shim used."""
    assert build_hook_entry(["/py"], config, environ, lib="/lib") == {
        "path": "/py",
        "args": ["/py", "-I", "-S", "-B", "-X", "utf8", "-c", CODE, *args],
        "env": [f"PATH={FIXED_PATH}", *env],
    }


def test_build_hook_entry_with_site() -> None:
    """A shim started with site (a development venv) gives the hook site too: its dependencies are there."""
    entry = build_hook_entry(["/py"], None, {}, lib="/lib", isolated_site=False)
    assert entry["args"] == ["/py", "-I", "-B", "-X", "utf8", "-c", CODE, "prestart"]


def test_our_launch_code_is_a_gpu_hook() -> None:
    """A hook entry running our launch code counts as ours: the shim adds no second one."""
    assert is_gpu_hook(build_hook_entry(["/py"], None, {}, lib="/lib"))
    assert not is_gpu_hook({"path": "/py", "args": ["/py", "-c", "import hook"]})


# --- resolve_spec: the decision --------------------------------------------------------------------------


def spec_of(bundle: Path) -> dict[str, object]:
    """Load a bundle's config.json."""
    document: dict[str, object] = json.loads((bundle / "config.json").read_text())
    return document


def env_config(make_config: MakeConfig, env_dir: Path, extra: str = "") -> str:
    """Return config.toml text accepting env files from ``env_dir``."""
    return make_config(f'[env-file]\ndirectories = ["{env_dir}"]\n{extra}').read_text()


@pytest.mark.parametrize(
    ("env", "file", "hooks", "expected_env", "handoff"),
    [
        pytest.param(["A=1"], None, None, None, None, id="no-file-no-gpu"),
        pytest.param(["NVIDIA_VISIBLE_DEVICES=void"], None, None, None, None, id="void-is-no-gpu"),
        pytest.param(
            ["NVIDIA_VISIBLE_DEVICES=0"], None, None, ["NVIDIA_VISIBLE_DEVICES=0"], "none", id="gpu-no-file"
        ),
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}", "A=1"],
            "NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n",
            None,
            ["NVIDIA_ENV_FROM_FILE={file}", "A=1", "NVIDIA_VISIBLE_DEVICES=0,1", "USER_CUSTOM_ENV=hello"],
            "unpinned:NVIDIA_VISIBLE_DEVICES,USER_CUSTOM_ENV",
            id="file-with-gpu",
        ),
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}"],
            "USER_CUSTOM_ENV=hello\n",
            None,
            ["NVIDIA_ENV_FROM_FILE={file}", "USER_CUSTOM_ENV=hello"],
            None,
            id="file-without-gpu",
        ),
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}", "NVIDIA_VISIBLE_DEVICES=all"],
            "NVIDIA_VISIBLE_DEVICES=void\n",
            None,
            ["NVIDIA_ENV_FROM_FILE={file}", "NVIDIA_VISIBLE_DEVICES=void"],
            None,
            id="file-removes-gpu",
        ),
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}"],
            "NVIDIA_VISIBLE_DEVICES=0\n",
            {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]},
            ["NVIDIA_ENV_FROM_FILE={file}", "NVIDIA_VISIBLE_DEVICES=0"],
            None,
            id="nvidia-hook-present",
        ),
        pytest.param(
            ["NVIDIA_VISIBLE_DEVICES=0"],
            None,
            {"createRuntime": [{"path": "/py", "args": ["/py", "-m", "hook", "createRuntime"]}]},
            ["NVIDIA_VISIBLE_DEVICES=0"],
            None,
            id="our-hook-present",
        ),
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}"],
            "NVIDIA_VISIBLE_DEVICES=0\n",
            {"prestart": [{"path": "/py", "args": ["/py", "-m", "hook", "-config", "/c.toml", "prestart"]}]},
            ["NVIDIA_ENV_FROM_FILE={file}", "NVIDIA_VISIBLE_DEVICES=0"],
            None,
            id="our-hook-present-gets-the-decision",
        ),
        pytest.param(
            ["NVIDIA_ENV_FROM_FILE={file}", "X=1"], "X=1\n", None, None, None, id="file-changes-nothing"
        ),
    ],
)
def test_resolve_spec(
    make_bundle: MakeBundle,
    make_config: MakeConfig,
    make_env_file: MakeEnvFile,
    env: list[str],
    file: str | None,
    hooks: dict[str, Any] | None,
    expected_env: list[str] | None,
    handoff: str | None,
) -> None:
    """The env file is merged into process.env; our hook is added only for a GPU request without one, with
    the shim's decision in its args; a hook of ours already there gets the decision too."""
    path = make_env_file(file or "")
    env = [entry.replace("{file}", str(path)) for entry in env]
    bundle = make_bundle(env)
    document = spec_of(bundle)
    if hooks is not None:
        document["hooks"] = hooks
    edited = resolve_spec(document, env_config(make_config, path.parent), source="c.toml", hook=HOOK)
    if expected_env is None and handoff is None:
        assert edited is None
        return
    assert edited is not None
    process = edited["process"]
    assert isinstance(process, dict)
    assert process["env"] == [entry.replace("{file}", str(path)) for entry in (expected_env or env)]
    prestart = (edited.get("hooks") or {}).get("prestart", [])  # type: ignore[attr-defined]
    injected = {
        **HOOK,
        "args": ["/py", "-I", "-m", "hook", f"-env-file-merged={handoff}", "prestart"],
        "timeout": DEFAULT_HOOK_TIMEOUT,
    }
    assert prestart.count(injected) == (handoff is not None)
    assert HOOK not in prestart
    present = [entry for stage in (hooks or {}).values() for entry in stage if entry["path"] == "/py"]
    edited_hooks = edited.get("hooks") or {}
    marked = [entry for stage in edited_hooks.values() for entry in stage if entry not in (injected, HOOK)]  # type: ignore[attr-defined]
    decision = "none" if file is None else "unpinned:" + file.partition("=")[0]
    assert [entry["args"] for entry in marked if entry["path"] == "/py"] == [
        [*entry["args"][:-1], f"-env-file-merged={decision}", entry["args"][-1]] for entry in present
    ]
    assert edited["extra-field"] == {"kept": True}


def test_resolve_spec_pinned_file_passes_unprivileged_gate(
    make_bundle: MakeBundle, make_config: MakeConfig, make_env_file: MakeEnvFile
) -> None:
    """With env-var requests refused for unprivileged containers, a file pinned to the pod still asks."""
    path = make_env_file("GPU_ENV_HOOK_POD_UID=u1\nNVIDIA_VISIBLE_DEVICES=0\n")
    bundle = make_bundle(
        [f"NVIDIA_ENV_FROM_FILE={path}"], annotations={"io.kubernetes.cri.sandbox-uid": "u1"}
    )
    text = env_config(
        make_config, path.parent, "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
    )
    text = "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n" + text.replace(
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n", ""
    )
    edited = resolve_spec(spec_of(bundle), text, source="c.toml", hook=HOOK, engine="containerd")
    assert edited is not None
    handed_off = {
        **HOOK,
        "args": ["/py", "-I", "-m", "hook", "-env-file-merged=pinned:NVIDIA_VISIBLE_DEVICES", "prestart"],
    }
    assert edited["hooks"] == {"prestart": [{**handed_off, "timeout": DEFAULT_HOOK_TIMEOUT}]}


GUARD_MOUNT = {
    "destination": paths.ENV_FILE_GUARD_TARGET,
    "type": "bind",
    "source": paths.ENV_FILE_GUARD_SOURCE,
    "options": ["bind", "ro"],
}
OTHER_MOUNT = {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind"]}


@pytest.mark.parametrize(
    ("env", "guard_kept"),
    [
        pytest.param(["NVIDIA_ENV_FROM_FILE={file}"], False, id="file-applied-guard-goes"),
        pytest.param(["NVIDIA_VISIBLE_DEVICES=0"], True, id="no-file-guard-stays"),
    ],
)
def test_resolve_spec_removes_the_guard_only_with_the_file(
    make_bundle: MakeBundle,
    make_config: MakeConfig,
    make_env_file: MakeEnvFile,
    env: list[str],
    guard_kept: bool,
) -> None:
    """The env-file guard's mount (the CDI device a device plugin names next to the file) goes when the shim
    applies the file, and only then; every other mount stays as it was."""
    path = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    document = spec_of(make_bundle([entry.replace("{file}", str(path)) for entry in env]))
    document["mounts"] = [OTHER_MOUNT, GUARD_MOUNT]
    edited = resolve_spec(document, env_config(make_config, path.parent), source="c.toml", hook=HOOK)
    assert edited is not None
    assert edited["mounts"] == ([OTHER_MOUNT, GUARD_MOUNT] if guard_kept else [OTHER_MOUNT])


def test_resolve_spec_refused_file(
    make_bundle: MakeBundle, make_config: MakeConfig, make_env_file: MakeEnvFile
) -> None:
    """A refused env file raises the hook's own one-line refusal."""
    path = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    path.chmod(0o664)
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE={path}"])
    with pytest.raises(
        EnvFileError, match=rf"^env file '{path}': must not be group- or world-writable \(mode 0664\)$"
    ):
        resolve_spec(spec_of(bundle), env_config(make_config, path.parent), source="c.toml", hook=HOOK)


@pytest.mark.parametrize(
    ("json_format", "expected"),
    [
        pytest.param(True, '{"level": "error", "msg": "a \\"b\\"", "time": "T"}\n', id="json"),
        pytest.param(False, 'time="T" level=error msg="a \\"b\\""\n', id="text"),
    ],
)
def test_format_log_line(json_format: bool, expected: str) -> None:
    """Log lines have runc's (logrus) JSON or text shape."""
    assert format_log_line('a "b"', json_format=json_format, stamp="T") == expected


# --- the shim as a process -------------------------------------------------------------------------------


class ShimRun:
    """One run of the shim: its result and what the fake runtime recorded."""

    def __init__(self, proc: subprocess.CompletedProcess[str], out: Path) -> None:
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        self.out = out

    @property
    def runtime_ran(self) -> bool:
        """Whether the fake runtime was exec'd."""
        return (self.out / "argv").exists()

    @property
    def runtime_argv(self) -> list[str]:
        """The argv the fake runtime received."""
        return (self.out / "argv").read_text().splitlines()

    @property
    def runtime_spec(self) -> dict[str, Any]:
        """config.json as the fake runtime saw it."""
        spec: dict[str, Any] = json.loads((self.out / "config.json").read_text())
        return spec


@pytest.fixture
def shim_env(tmp_path: Path, make_config: MakeConfig, make_env_file: MakeEnvFile) -> dict[str, str]:
    """The environment of a shim run: a config naming the fake runtime and the env-file directory."""
    env_dir = tmp_path / "nvidia-env"
    env_dir.mkdir(exist_ok=True)
    runtime = tmp_path / "fake-runtime"
    config = make_config(
        f'[env-file]\ndirectories = ["{env_dir}"]\n[nvidia-container-runtime]\nruntimes = ["{runtime}"]\n'
    )
    return {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}


def run_shim(
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    *,
    bundle: Path | None = None,
    status: int = 0,
    pass_fds: tuple[int, ...] = (),
    python_flags: tuple[str, ...] = (),
) -> ShimRun:
    """Run the shim with a recording fake runtime (written into tmp_path) and no PATH."""
    out = tmp_path / "runtime-out"
    out.mkdir(exist_ok=True)
    for stale in out.iterdir():
        stale.unlink()
    runtime = tmp_path / "fake-runtime"
    runtime.write_text(FAKE_RUNTIME.format(out=out, bundle=bundle or tmp_path, status=status))
    runtime.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, *python_flags, "-I", "-m", "hook.stages.shim", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        pass_fds=pass_fds,
        timeout=30,
        check=False,
    )
    return ShimRun(proc, out)


def test_shim_create_merges_and_execs(
    tmp_path: Path, shim_env: dict[str, str], make_bundle: MakeBundle, make_env_file: MakeEnvFile
) -> None:
    """On create the env file is merged, our hook added, and the runtime gets the untouched argv."""
    path = make_env_file("NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n")
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE={path}"])
    args = ["--root", "/r", "--log", str(tmp_path / "log"), "create", "--bundle", str(bundle), "cid"]
    run = run_shim(tmp_path, args, shim_env, bundle=bundle)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.runtime_argv == [str(tmp_path / "fake-runtime"), *args]
    assert run.runtime_spec["process"]["env"] == [
        f"NVIDIA_ENV_FROM_FILE={path}",
        "NVIDIA_VISIBLE_DEVICES=0,1",
        "USER_CUSTOM_ENV=hello",
    ]
    config = shim_env["NVIDIA_CTK_CONFIG_FILE_PATH"]
    code = build_code("hook.__main__", "gpu-env-hook", lib=str(REPO))
    assert run.runtime_spec["hooks"]["prestart"] == [
        {
            "path": sys.executable,
            "args": [
                sys.executable,
                "-I",
                "-B",
                "-X",
                "utf8",
                "-c",
                code,
                "-config",
                config,
                "-env-file-merged=unpinned:NVIDIA_VISIBLE_DEVICES,USER_CUSTOM_ENV",
                "prestart",
            ],
            "env": [f"PATH={FIXED_PATH}"],
            "timeout": DEFAULT_HOOK_TIMEOUT,
        }
    ]


def test_shim_create_bundle_from_cwd(
    tmp_path: Path, shim_env: dict[str, str], make_env_file: MakeEnvFile, make_bundle: MakeBundle
) -> None:
    """Without --bundle the working directory is the bundle."""
    path = make_env_file("USER_CUSTOM_ENV=hello\n")
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE={path}"], name=".")
    run = run_shim(tmp_path, ["run", "cid"], shim_env, bundle=bundle)
    assert run.returncode == 0
    assert run.runtime_spec["process"]["env"][-1] == "USER_CUSTOM_ENV=hello"


@pytest.mark.parametrize(
    "env",
    [
        pytest.param(["A=1"], id="no-file-no-gpu"),
        pytest.param(["NVIDIA_ENV_FROM_FILE={dir}/missing.env", "X=1"], id="file-missing-ignored"),
    ],
)
def test_shim_create_leaves_spec_alone(
    tmp_path: Path, shim_env: dict[str, str], make_bundle: MakeBundle, env: list[str]
) -> None:
    """A create that needs no edit leaves config.json byte-identical and unreplaced."""
    config = Path(shim_env["NVIDIA_CTK_CONFIG_FILE_PATH"])
    config.write_text(config.read_text().replace("[env-file]\n", '[env-file]\non-missing = "ignore"\n'))
    env_dir = tmp_path / "nvidia-env"
    bundle = make_bundle([entry.replace("{dir}", str(env_dir)) for entry in env])
    before = (bundle / "config.json").read_bytes()
    inode = (bundle / "config.json").stat().st_ino
    run = run_shim(tmp_path, ["create", "-b", str(bundle), "cid"], shim_env, bundle=bundle)
    assert (run.returncode, run.stderr) == (0, "")
    assert run.runtime_ran
    assert (bundle / "config.json").read_bytes() == before
    assert (bundle / "config.json").stat().st_ino == inode


@pytest.mark.parametrize(
    ("log_format", "expected"),
    [
        pytest.param(
            "json",
            r'^\{"level": "error", "msg": "gpu-env-runtime: env file .*", "time": ".*"\}\n$',
            id="json",
        ),
        pytest.param("text", r'^time=".*" level=error msg="gpu-env-runtime: env file .*"\n$', id="text"),
    ],
)
def test_shim_refused_file(
    tmp_path: Path,
    shim_env: dict[str, str],
    make_bundle: MakeBundle,
    make_env_file: MakeEnvFile,
    log_format: str,
    expected: str,
) -> None:
    """A refused file: one line on stderr and in runc's log, exit 1, config.json untouched, no runtime."""
    path = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    path.chmod(0o666)
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE={path}"])
    before = (bundle / "config.json").read_bytes()
    log = tmp_path / "runc.log"
    args = ["--log", str(log), f"--log-format={log_format}", "create", "--bundle", str(bundle), "cid"]
    run = run_shim(tmp_path, args, shim_env, bundle=bundle)
    line = f"gpu-env-runtime: env file '{path}': must not be group- or world-writable (mode 0666)"
    assert (run.returncode, run.stderr) == (1, line + "\n")
    assert not run.runtime_ran
    assert (bundle / "config.json").read_bytes() == before
    assert re.match(expected, log.read_text())
    assert line in log.read_text().replace('\\"', '"')


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["state", "cid"], id="state"),
        pytest.param(["--root", "create", "kill", "cid", "KILL"], id="kill-root-named-create"),
        pytest.param(["delete", "--force", "cid"], id="delete"),
        pytest.param(["--version"], id="version"),
        pytest.param(["--log-format", "json", "start", "cid"], id="start"),
    ],
)
def test_shim_passthrough(tmp_path: Path, shim_env: dict[str, str], args: list[str]) -> None:
    """Other commands exec the runtime at once with the same argv and exit status, even without PATH."""
    (tmp_path / "config.json").write_text("not json")
    run = run_shim(tmp_path, args, shim_env, status=3)
    assert (run.returncode, run.stderr) == (3, "")
    assert run.runtime_argv == [str(tmp_path / "fake-runtime"), *args]
    assert (run.out / "cwd").read_text() == f"{tmp_path}\n"


def test_shim_keeps_inherited_fds(tmp_path: Path, shim_env: dict[str, str]) -> None:
    """A descriptor the caller passes (podman's sync pipes) is still open in the runtime."""
    read_end, write_end = os.pipe()
    try:
        run = run_shim(tmp_path, ["state", "cid"], shim_env, pass_fds=(write_end,))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert run.returncode == 0
    assert str(write_end) in (run.out / "fds").read_text().split()


def test_shim_no_runtime(tmp_path: Path, shim_env: dict[str, str]) -> None:
    """Without a runtime to exec, the shim says so in one line and exits 1."""
    config = Path(shim_env["NVIDIA_CTK_CONFIG_FILE_PATH"])
    config.write_text(config.read_text().replace(str(tmp_path / "fake-runtime"), "/nowhere/runc"))
    run = run_shim(tmp_path, ["state", "cid"], shim_env)
    assert run.returncode == 1
    assert run.stderr == (
        "gpu-env-runtime: no runtime found: none of [nvidia-container-runtime] runtimes (/nowhere/runc) is an "
        f"absolute path or a name on {FIXED_PATH} of an executable file\n"
    )


def test_shim_bad_config(tmp_path: Path) -> None:
    """A missing required config file is refused before any runtime runs."""
    run = run_shim(tmp_path, ["state", "cid"], {"NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml")})
    assert run.returncode == 1
    assert run.stderr == (
        "gpu-env-runtime: error getting hook config: failed to load config: couldn't open required "
        f"configuration file {tmp_path / 'none.toml'}: file does not exist\n"
    )
    assert not run.runtime_ran


# Every exec the shim could use is replaced, so that no real runtime ever runs from this test (a real
# `runc create` of a spec without a mount namespace would leave its rootfs mount on the host).
LEAN_PROBE = """
import os, posix, sys
def fake_exec(path, argv, env=None):
    print(" ".join(sorted(sys.modules)))
    sys.exit(0)
os.execve = os.execv = posix.execve = posix.execv = fake_exec
import hook.stages.shim
sys.exit(hook.stages.shim.main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("args", "spec_env", "config"),
    [
        pytest.param(["state", "cid"], None, None, id="passthrough-no-config"),
        pytest.param(["state", "cid"], None, "[nvidia-container-cli]\nload-kmods = true\n", id="passthrough"),
        pytest.param(
            ["kill", "cid"],
            None,
            '[nvidia-container-runtime]\nruntimes = ["runc"]\n',
            id="passthrough-runtimes",
        ),
        pytest.param(["create", "cid"], ["A=1", "NVIDIA_REQUIRE_CUDA=cuda>=12"], None, id="create-no-gpu"),
    ],
)
def test_shim_lean_imports(
    tmp_path: Path, make_bundle: MakeBundle, args: list[str], spec_env: list[str] | None, config: str | None
) -> None:
    """Passthrough, and a create with nothing to do, import neither typing, json, tomllib nor dotenv."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "no-xdg")}
    if config is not None:
        (tmp_path / "lean.toml").write_text(config)
        env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "lean.toml")}
    if spec_env is not None:
        make_bundle(spec_env, name=".")
    proc = subprocess.run(
        [sys.executable, "-I", "-c", LEAN_PROBE, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=30,
        check=True,
    )
    modules = set(proc.stdout.split())
    assert "hook.stages.shim" in modules
    assert not modules & {
        "typing",
        "json",
        "tomllib",
        "dotenv",
        "hook.pipeline.config",
        "hook.pipeline.envfile",
        "hook.pipeline.request",
    }


# --- the shim never runs itself again ---------------------------------------------------------------------

LOOP_LINE = (
    "gpu-env-runtime: the runtime {runtime} leads back to this shim; set the real runtime (runc, crun) with "
    "`install --runtime PATH` or [gpu-env-runtime] runtime\n"
)
REENTRY_LINE = (
    "gpu-env-runtime: refusing to run: the runtime it executed started it again (a loop); set the real "
    "runtime (runc, crun) with `install --runtime PATH` or [gpu-env-runtime] runtime\n"
)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param('[gpu-env-runtime]\nruntime = "{}"\n', id="our-key"),
        pytest.param('[nvidia-container-runtime]\nruntimes = ["{}"]\n', id="nvidia-key"),
    ],
)
@pytest.mark.parametrize(
    "call", [pytest.param("exec ", id="exec-wrapper"), pytest.param("", id="forking-wrapper")]
)
def test_shim_refuses_a_runtime_that_is_itself(
    tmp_path: Path,
    make_config: MakeConfig,
    make_env_file: MakeEnvFile,
    make_bundle: MakeBundle,
    call: str,
    key: str,
) -> None:
    """A runtime that is a wrapper around the shim (exec'ing it or not) is refused on create before
    config.json is written, in one line; without the guard the shim would run itself forever."""
    wrapper = tmp_path / "looping-runtime"
    wrapper.write_text(f'#!/bin/sh\n{call}{sys.executable} -I -m hook.stages.shim "$@"\n')
    wrapper.chmod(0o755)
    env_dir = tmp_path / "nvidia-env"
    config = make_config(
        f'[env-file]\ndirectories = ["{env_dir}"]\n[gpu-env-runtime]\nruntime = "{wrapper}"\n'
    )
    path = make_env_file("NVIDIA_VISIBLE_DEVICES=0\nUSER_CUSTOM_ENV=hello\n")
    bundle = make_bundle([f"NVIDIA_ENV_FROM_FILE={path}"])
    before = (bundle / "config.json").read_bytes()
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "hook.stages.shim", "create", "--bundle", str(bundle), "cid"],
        capture_output=True,
        text=True,
        env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)},
        cwd=tmp_path,
        timeout=30,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", LOOP_LINE.format(runtime=wrapper))
    assert (bundle / "config.json").read_bytes() == before


@pytest.mark.parametrize(
    "call", [pytest.param("exec ", id="exec-wrapper"), pytest.param("", id="forking-wrapper")]
)
def test_shim_passthrough_loop_stops(tmp_path: Path, make_config: MakeConfig, call: str) -> None:
    """A command with nothing to write (``state``) through a runtime that leads back to the shim stops at
    the second pass: one line, exit 1, no endless exec."""
    wrapper = tmp_path / "looping-runtime"
    wrapper.write_text(f'#!/bin/sh\n{call}{sys.executable} -I -m hook.stages.shim "$@"\n')
    wrapper.chmod(0o755)
    config = make_config(f'[gpu-env-runtime]\nruntime = "{wrapper}"\n')
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "hook.stages.shim", "state", "cid"],
        capture_output=True,
        text=True,
        env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)},
        cwd=tmp_path,
        timeout=30,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", REENTRY_LINE)


def test_shim_answers_the_probe(tmp_path: Path) -> None:
    """With the probe variable set the shim only answers (no config read, no runtime run)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "hook.stages.shim", "--version"],
        capture_output=True,
        text=True,
        env={"GPU_ENV_RUNTIME_PROBE": "t0k", "NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "missing")},
        timeout=30,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "gpu-env-runtime probe t0k\n", "")


def test_shim_runtime_gets_the_loop_guard(tmp_path: Path, shim_env: dict[str, str]) -> None:
    """The runtime's environment carries the shim's pid as the loop guard, and nothing else changes."""
    out = tmp_path / "env-out"
    runtime = tmp_path / "fake-runtime"
    runtime.write_text(f'#!/bin/sh\necho "$$ $GPU_ENV_RUNTIME_PID" > {out}\n')
    runtime.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "hook.stages.shim", "state", "cid"],
        capture_output=True,
        text=True,
        env=shim_env,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    pid, guard = out.read_text().split()
    assert pid == guard
