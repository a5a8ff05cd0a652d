"""What install writes into a shell script, a unit or a tmpfiles.d line is quoted for that format, or refused in
one line: administrator input never becomes a command or an entry of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hook.install.common import InstallError
from hook.install.nri import build_unit
from hook.install.retire import build_retired_wrapper
from hook.install.wrappers import build_runtime_wrapper
from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
TMPFILES = shutil.which("systemd-tmpfiles")


def run_install(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the ``gpu-env-hook install`` process for podman beneath ``root``."""
    return subprocess.run(
        [PYTHON, "-I", "-m", "hook", "install", "--engine", "podman", "--root", str(root), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def tree(root: Path) -> list[str]:
    """Every path below ``root``, relative, sorted."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize(
    ("args", "config", "message"),
    [
        pytest.param(
            ("--runtime", "/usr/bin/runc\ntouch /tmp/injected #"),
            None,
            "--runtime /usr/bin/runc\\ntouch /tmp/injected #: must not hold a control character (a newline "
            "would start a line of its own in the files install writes)",
            id="runtime-option-with-a-newline",
        ),
        pytest.param(
            (),
            '[gpu-env-runtime]\nruntime = "/usr/bin/runc\\rtouch /tmp/injected"\n',
            "runtime /usr/bin/runc\\rtouch /tmp/injected: must not hold a control character (a newline "
            "would start a line of its own in the files install writes)",
            id="runtime-from-the-config-with-a-carriage-return",
        ),
        pytest.param(
            ("--python", "/usr/bin/python3\nid"),
            None,
            "--python /usr/bin/python3\\nid: must not hold a control character (a newline would start a line "
            "of its own in the files install writes)",
            id="python-with-a-newline",
        ),
        pytest.param(
            (),
            '[env-file]\ndirectories = ["/run/nvidia-env\\nR! /var/lib"]\n',
            "[env-file] directories: /run/nvidia-env\\nR! /var/lib: must not hold a control character (a "
            "newline would start a line of its own in the files install writes)",
            id="env-directory-forging-a-tmpfiles-line",
        ),
    ],
)
def test_install_refuses_a_value_that_would_start_a_line_of_its_own(
    tmp_path: Path, args: tuple[str, ...], config: str | None, message: str
) -> None:
    """A newline (or another control character) in the runtime, the interpreter or an env-file directory
    is refused by the install process in one line, and nothing is written."""
    root = tmp_path / "node"
    root.mkdir()
    if config is not None:
        (root / "etc").mkdir()
        (root / "etc/gpu-env-hook.toml").write_text(config)
        args = (*args, "--config", "/etc/gpu-env-hook.toml")
    before = tree(root)
    proc = run_install(root, *args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"gpu-env-hook: {message}\n")
    assert tree(root) == before


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(
            lambda runtime: build_runtime_wrapper(python=PYTHON, runtime=runtime, engine="podman"),
            id="runtime-wrapper",
        ),
        pytest.param(lambda runtime: build_retired_wrapper(runtime, "podman"), id="retired-wrapper"),
    ],
)
def test_a_forged_runtime_runs_no_command_in_the_wrappers(tmp_path: Path, build: object) -> None:
    """The runtime wrapper and the retired wrapper (which uninstall writes from the runtime an earlier
    install recorded, so install's refusal does not cover it) built with a runtime holding a newline: run
    with /bin/sh, the injected command does not run; the runtime is one (missing) file name."""
    marker = tmp_path / "injected"
    runtime = f"/nonexistent/runc\ntouch {marker} #"
    wrapper = tmp_path / "wrapper"
    wrapper.write_bytes(build(runtime))  # type: ignore[operator]
    proc = subprocess.run(
        ["/bin/sh", str(wrapper), "state", "abc"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
        cwd=tmp_path,
        env={"PATH": paths.FIXED_PATH},
    )
    assert proc.returncode == 127, proc.stderr
    assert not marker.exists()


@pytest.mark.skipif(TMPFILES is None, reason="needs systemd-tmpfiles (apt package systemd)")
@pytest.mark.parametrize(
    "directory",
    [
        pytest.param("/run/nvidia env", id="space"),
        pytest.param("/run/env-%h-%%", id="percent-specifiers"),
        pytest.param('/run/quote"back\\slash', id="quote-and-backslash"),
        pytest.param("/run/tab\there", id="tab-refused"),
        pytest.param("/run/nvidia-env", id="plain"),
    ],
)
def test_tmpfiles_line_creates_exactly_the_directory_named(tmp_path: Path, directory: str) -> None:
    """The tmpfiles.d entry install writes, read back by systemd-tmpfiles --create into an empty scratch
    root, creates exactly the env-file directory the config names (a space, a % specifier, a quote, a
    backslash are escaped); a control character is refused by install in one line."""
    root = tmp_path / "node"
    (root / "etc").mkdir(parents=True)
    (root / "etc/gpu-env-hook.toml").write_text(
        "[env-file]\ndirectories = " + json.dumps([directory]) + "\n", encoding="utf-8"
    )
    proc = run_install(root, "--config", "/etc/gpu-env-hook.toml")
    if not directory.isprintable():
        assert proc.returncode == 1
        assert proc.stderr.startswith("gpu-env-hook: [env-file] directories: /run/tab\\there: must not hold")
        return
    assert proc.returncode == 0, proc.stderr
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert TMPFILES is not None
    created = subprocess.run(
        [TMPFILES, "--create", f"--root={scratch}", str(root / paths.TMPFILES_CONF.lstrip("/"))],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    assert created.stderr == ""
    assert tree(scratch) == ["run", directory.removeprefix("/")]
    assert (scratch / directory.lstrip("/")).stat().st_mode & 0o7777 == 0o700


@pytest.mark.parametrize(
    ("python", "shown"),
    [
        pytest.param("/opt/env%h/bin/python", "'/opt/env%h/bin/python'", id="percent-specifier"),
        pytest.param("/opt/env\nExecStartPre=/bin/id", "'/opt/env\\nExecStartPre=/bin/id'", id="newline"),
    ],
)
def test_nri_unit_refuses_a_path_systemd_would_expand_or_split(python: str, shown: str) -> None:
    """The NRI unit's ExecStart takes plain paths only: a % specifier or a newline (a directive of its own)
    is refused in one line."""
    with pytest.raises(InstallError) as caught:
        build_unit(python, None)
    assert (
        str(caught.value) == f"--nri: {shown} cannot be written unquoted in a systemd unit; use a plain path"
    )
