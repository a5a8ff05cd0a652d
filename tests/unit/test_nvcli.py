"""nvidia-container-cli: PATH search with ``root``, ldconfig normalisation, compat mode, argv order, exec."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import pytest
from record_helpers import replaced

from hook.pipeline import nvcli
from hook.pipeline.config import CliSettings, parse_config
from hook.pipeline.nvcli import (
    build_argv,
    build_cli_env,
    build_search_path,
    cuda_compat_flags,
    exec_cli,
    locate_cli,
    normalize_ldconfig,
    resolve_rootfs,
)
from hook.pipeline.request import GpuRequest
from hook.util.errors import ExecError

STD = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NOT_FOUND = (
    'couldn\'t find binary nvidia-container-cli in PATH: exec: "nvidia-container-cli": '
    "executable file not found in $PATH"
)


@pytest.mark.parametrize(
    ("current", "root", "expected"),
    [
        pytest.param("", "", STD, id="empty-path"),
        pytest.param(STD, "", STD, id="already-standard"),
        pytest.param(
            "/opt/bin:/usr/bin",
            "",
            "/opt/bin:/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin:/bin",
            id="appends-missing",
        ),
        pytest.param("", "/", STD, id="slash-root-no-prefix"),
        pytest.param(
            "/opt/bin",
            "/run/nvidia/driver",
            "/run/nvidia/driver/opt/bin:/run/nvidia/driver/usr/local/sbin:/run/nvidia/driver/usr/local/bin:"
            "/run/nvidia/driver/usr/sbin:/run/nvidia/driver/usr/bin:/run/nvidia/driver/sbin:/run/nvidia/driver/bin:"
            f"/opt/bin:{STD}",
            id="root-prefixed-first",
        ),
        pytest.param(
            "",
            "/drv/",
            "/drv/usr/local/sbin:/drv/usr/local/bin:/drv/usr/sbin:/drv/usr/bin:/drv/sbin:/drv/bin:" + STD,
            id="root-trailing-slash-cleaned",
        ),
    ],
)
def test_build_search_path(current: str, root: str, expected: str) -> None:
    """PATH is the current entries plus the standard ones, all of them under root first."""
    assert build_search_path(current, root) == expected


def cli_settings(**changes: Any) -> CliSettings:
    """The default cli table with some keys changed."""
    return replaced(parse_config(None, suse=False).cli, **changes)


def executable(path: Path) -> Path:
    """Create an executable file at path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_locate_cli_configured_path_verbatim() -> None:
    """A configured path is used as-is, without an existence check and without touching PATH."""
    environ = {"PATH": "/x"}
    assert locate_cli(cli_settings(path="/no/such/cli"), environ) == "/no/such/cli"
    assert environ == {"PATH": "/x"}


def test_locate_cli_searches_path_and_rewrites_it(tmp_path: Path) -> None:
    """Without a configured path the cli is found on the rewritten PATH, which the cli inherits."""
    found = executable(tmp_path / "bin" / "nvidia-container-cli")
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "nvidia-container-cli").write_text("not executable")
    environ = {"PATH": f"{tmp_path / 'first'}:{tmp_path / 'bin'}"}
    assert locate_cli(cli_settings(), environ) == str(found)
    assert environ["PATH"] == f"{tmp_path / 'first'}:{tmp_path / 'bin'}:{STD}"


def test_locate_cli_under_root(tmp_path: Path) -> None:
    """With ``root`` the driver root's standard directories are searched first."""
    found = executable(tmp_path / "usr" / "bin" / "nvidia-container-cli")
    environ: dict[str, str] = {}
    assert locate_cli(cli_settings(root=str(tmp_path)), environ) == str(found)
    assert environ["PATH"].startswith(f"{tmp_path}/usr/local/sbin:")


def test_locate_cli_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cli on the search path is upstream's exec error."""
    monkeypatch.setattr(nvcli, "SEARCH_DIRS", (str(tmp_path / "none"),))
    with pytest.raises(ExecError, match=rf"^{re.escape(NOT_FOUND)}$"):
        locate_cli(cli_settings(), {"PATH": str(tmp_path)})


def test_locate_cli_skips_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory named like the cli is not the cli."""
    (tmp_path / "nvidia-container-cli").mkdir()
    monkeypatch.setattr(nvcli, "SEARCH_DIRS", ())
    with pytest.raises(ExecError, match=rf"^{re.escape(NOT_FOUND)}$"):
        locate_cli(cli_settings(), {"PATH": str(tmp_path)})


@pytest.mark.parametrize(
    ("value", "has_real", "expected"),
    [
        pytest.param("@{d}/ldconfig", False, "@{d}/ldconfig", id="plain"),
        pytest.param("@{d}/ldconfig", True, "@{d}/ldconfig.real", id="prefers-real"),
        pytest.param("@{d}/ldconfig.real", False, "@{d}/ldconfig", id="real-stripped-when-absent"),
        pytest.param("@{d}/ldconfig.real", True, "@{d}/ldconfig.real", id="real-kept-when-present"),
        pytest.param("{d}/ldconfig", True, "{d}/ldconfig", id="container-path-verbatim"),
        pytest.param("", False, "", id="empty"),
    ],
)
def test_normalize_ldconfig(tmp_path: Path, value: str, has_real: bool, expected: str) -> None:
    """Host values strip '@' and one '.real', then use '<path>.real' when the host has it."""
    if has_real:
        executable(tmp_path / "ldconfig.real")
    d = str(tmp_path)
    assert normalize_ldconfig(value.format(d=d)) == expected.format(d=d)


def test_normalize_ldconfig_on_this_host() -> None:
    """On this Debian host the default stays @/sbin/ldconfig (there is no ldconfig.real)."""
    expected = "@/sbin/ldconfig.real" if Path("/sbin/ldconfig.real").exists() else "@/sbin/ldconfig"
    assert normalize_ldconfig("@/sbin/ldconfig") == expected


@pytest.mark.parametrize(
    ("mode", "allow", "flags"),
    [
        pytest.param("ldconfig", False, ["--cuda-compat-mode=ldconfig"], id="ldconfig"),
        pytest.param("mount", False, ["--cuda-compat-mode=mount"], id="mount"),
        pytest.param("disabled", False, ["--cuda-compat-mode=disabled"], id="disabled"),
        pytest.param("hook", False, ["--cuda-compat-mode=disabled"], id="hook-is-disabled"),
        pytest.param("", False, ["--cuda-compat-mode=disabled"], id="empty-is-disabled"),
        pytest.param("Mount", False, ["--cuda-compat-mode=disabled"], id="unknown-is-disabled"),
        pytest.param("ldconfig", True, ["--cuda-compat-mode=ldconfig"], id="known-with-feature"),
        pytest.param("hook", True, ["--cuda-compat-mode=disabled"], id="hook-with-feature"),
        pytest.param("", True, [], id="empty-with-feature-omitted"),
        pytest.param("other", True, [], id="unknown-with-feature-omitted"),
    ],
)
def test_cuda_compat_flags(mode: str, allow: bool, flags: list[str]) -> None:
    """The legacy cuda-compat-mode maps to the cli flag; unknown values fall back unless the feature is on."""
    settings = replaced(
        parse_config(None, suse=False), cuda_compat_mode=mode, allow_cuda_compat_libs_from_container=allow
    )
    assert cuda_compat_flags(settings) == flags


@pytest.mark.parametrize(
    ("root", "cwd", "expected"),
    [
        pytest.param("rootfs", "/b", "/b/rootfs", id="relative"),
        pytest.param("../x", "/b/c", "/b/x", id="dot-dot"),
        pytest.param("/b/./rootfs/", "/elsewhere", "/b/rootfs", id="absolute-cleaned"),
        pytest.param("", "/b", "/b", id="empty-is-cwd"),
        pytest.param("a//b/", "/", "/a/b", id="cwd-root"),
    ],
)
def test_resolve_rootfs(root: str, cwd: str, expected: str) -> None:
    """root.path is made absolute against the hook's cwd and cleaned."""
    assert resolve_rootfs(root, cwd) == expected


def request(**changes: Any) -> GpuRequest:
    """A GPU request for device 0 with the default capabilities."""
    base = GpuRequest(
        devices=["0"],
        mig_config="",
        mig_monitor="",
        imex_channels=[],
        capabilities=["compute", "utility"],
        requirements=[],
    )
    return replaced(base, **changes)


def test_build_argv_default() -> None:
    """The default argv matches the behaviour description's example for a Debian host."""
    settings = parse_config(None, suse=False)
    argv = build_argv(
        request(), settings, cli_path="/usr/bin/nvidia-container-cli", rootfs="/b/rootfs", pid=7, debug=False
    )
    assert argv == [
        "/usr/bin/nvidia-container-cli",
        "--load-kmods",
        "configure",
        "--cuda-compat-mode=ldconfig",
        f"--ldconfig={normalize_ldconfig('@/sbin/ldconfig')}",
        "--device=0",
        "--compute",
        "--utility",
        "--pid=7",
        "/b/rootfs",
    ]


FULL = """
[nvidia-container-cli]
root = "/drv"
debug = "/log"
ldcache = "/etc/ld.so.cache"
no-pivot = true
no-cgroups = true
user = "root:video"
ldconfig = "@/nonexistent/ldconfig"
[features]
disable-imex-channel-creation = true
"""


@pytest.mark.parametrize(
    ("debug", "debug_flag"),
    [
        pytest.param(False, "--debug=/log", id="configured-debug"),
        pytest.param(True, "--debug=/dev/stderr", id="flag"),
    ],
)
def test_build_argv_every_option_in_order(debug: bool, debug_flag: str) -> None:
    """Every option appears in upstream's exact order; the hook's -debug overrides the configured one."""
    settings = parse_config(FULL, suse=False)
    req = request(
        devices=["GPU-a", "1"],
        mig_config="0, 1",
        mig_monitor="2",
        imex_channels=["0", "1"],
        capabilities=["compat32", "compute", "video"],
        requirements=["cuda>=12.0", "brand=tesla"],
    )
    argv = build_argv(req, settings, cli_path="cli", rootfs="/r", pid=1, debug=debug)
    assert argv == [
        "cli",
        "--root=/drv",
        "--load-kmods",
        "--no-create-imex-channels",
        "--no-pivot",
        debug_flag,
        "--ldcache=/etc/ld.so.cache",
        "--user=root:video",
        "configure",
        "--cuda-compat-mode=ldconfig",
        "--ldconfig=@/nonexistent/ldconfig",
        "--no-cgroups",
        "--device=GPU-a,1",
        "--mig-config=0, 1",
        "--mig-monitor=2",
        "--imex-channel=0,1",
        "--compat32",
        "--compute",
        "--video",
        "--require=cuda>=12.0",
        "--require=brand=tesla",
        "--pid=1",
        "/r",
    ]


def test_build_argv_minimal() -> None:
    """With load-kmods off, no ldconfig, devices ``none`` and no capabilities, only the fixed items remain."""
    text = '[nvidia-container-cli]\nload-kmods = false\nldconfig = ""\n[features]\nallow-ldconfig-from-container = true\n'
    settings = parse_config(text, suse=False)
    argv = build_argv(
        request(devices=[""], capabilities=[], imex_channels=[""]),
        settings,
        cli_path="c",
        rootfs="/r",
        pid=0,
        debug=False,
    )
    assert argv == ["c", "configure", "--cuda-compat-mode=ldconfig", "--pid=0", "/r"]


@pytest.mark.parametrize(
    ("environ", "extra", "expected"),
    [
        pytest.param({"A": "1"}, (), {"A": "1"}, id="nothing-extra"),
        pytest.param({"A": "1"}, ("B=2", "C=x=y"), {"A": "1", "B": "2", "C": "x=y"}, id="added"),
        pytest.param({"PATH": "/x"}, ("PATH=/y",), {"PATH": "/x"}, id="existing-name-wins"),
        pytest.param({}, ("B=1", "B=2"), {"B": "1"}, id="first-entry-wins"),
        pytest.param({}, ("NOEQUALS", "=v", "E="), {"": "v", "E": ""}, id="without-equals-dropped"),
    ],
)
def test_build_cli_env(environ: dict[str, str], extra: tuple[str, ...], expected: dict[str, str]) -> None:
    """Configured entries are added unless the name is already set (getenv would find the first anyway)."""
    assert build_cli_env(environ, extra) == expected
    assert build_cli_env(environ, extra) is not environ


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        pytest.param(None, "no such file or directory", id="missing"),
        pytest.param(0o644, "permission denied", id="not-executable"),
    ],
)
def test_exec_cli_failure(tmp_path: Path, make: int | None, reason: str) -> None:
    """A failed exec is upstream's one line with Go's lower-case errno text."""
    path = tmp_path / "cli"
    if make is not None:
        path.write_text("#!/bin/sh\n")
        path.chmod(make)
        assert not path.stat().st_mode & stat.S_IXUSR
    with pytest.raises(ExecError, match=rf"^exec failed: {reason}$"):
        exec_cli([str(path)], {})
