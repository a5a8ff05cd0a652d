"""install --engine crio --nri: NRI switched on where the node's files keep it off, the plugin's unit on the
socket CRI-O listens on, and uninstall restoring every byte.

CRI-O has NRI on by default from 1.30 (off from 1.26 to 1.29): install's drop-in says ``enable_nri = true``
unless the node's files already do, so the plugin connects whatever the version. What CRI-O makes of the
files is checked with the real CRI-O (``crio config``, the configuration it would run with) when a build is
named by ``GPU_ENV_HOOK_CRIO``.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from engine_builds import crio_dir
from test_install_crio import DROPIN_DIR, OURS, PYTHON, RUNC_MAIN, write_node

from hook.install import InstallError, InstallOptions, write_install, write_uninstall
from hook.install.nri import UNIT_PATH
from hook.util import paths

NRI_OFF = '[crio.nri]\nenable_nri = false\nnri_plugin_request_timeout = "3s"\n'


def install(node: Path, **options: Any) -> list[str]:
    """install --engine crio --nri into the node tree."""
    return write_install(
        InstallOptions(engine="crio", python=PYTHON, root=str(node), nri=True, nri_python=PYTHON, **options)
    )


def dropin_of(node: Path) -> dict[str, Any]:
    """Our drop-in, parsed."""
    return tomllib.loads((node / OURS.lstrip("/")).read_text())


def exec_start(node: Path) -> str:
    """The unit's ExecStart command line."""
    for line in (node / UNIT_PATH.lstrip("/")).read_text().splitlines():
        if line.startswith("ExecStart="):
            return line.removeprefix("ExecStart=")
    raise AssertionError("no ExecStart")


def files_of(node: Path) -> dict[str, bytes]:
    """Every file of the node tree and its bytes."""
    return {str(path): path.read_bytes() for path in node.rglob("*") if path.is_file()}


@pytest.mark.parametrize(
    ("files", "nri", "socket"),
    [
        pytest.param(
            {"/etc/crio/crio.conf": RUNC_MAIN}, {"enable_nri": True}, paths.NRI_SOCKET, id="default"
        ),
        pytest.param(
            {"/etc/crio/crio.conf": RUNC_MAIN + NRI_OFF}, {"enable_nri": True}, paths.NRI_SOCKET, id="off"
        ),
        pytest.param(
            {
                "/etc/crio/crio.conf": RUNC_MAIN,
                f"{DROPIN_DIR}/10-nri.conf": '[crio.nri]\nenable_nri = true\nnri_listen = "/run/nri/crio.sock"\n',
            },
            None,
            "/run/nri/crio.sock",
            id="on-elsewhere",
        ),
        pytest.param(
            {
                "/etc/crio/crio.conf": RUNC_MAIN
                + "[crio.nri]\nenable_nri = true\nnri_disable_connections = true\n"
            },
            {"nri_disable_connections": False},
            paths.NRI_SOCKET,
            id="connections-off",
        ),
    ],
)
def test_nri_on_and_the_unit_on_crios_socket(
    tmp_path: Path, files: dict[str, str], nri: dict[str, Any] | None, socket: str
) -> None:
    """The drop-in switches on what keeps the plugin out (and nothing else); the unit runs the plugin on the
    socket CRI-O listens on, after crio.service; uninstall restores every byte."""
    node = write_node(tmp_path, files)
    before = files_of(node)
    lines = install(node)
    assert dropin_of(node)["crio"].get("nri") == nri
    assert exec_start(node) == f"{PYTHON} -I -m hook nri {socket}"
    unit = (node / UNIT_PATH.lstrip("/")).read_text()
    assert "After=crio.service\n" in unit
    assert "uninstall --engine crio" in unit
    assert (
        "next: start the NRI plugin: systemctl daemon-reload && systemctl enable --now gpu-env-hook-nri "
        f"(written to {node / UNIT_PATH.lstrip('/')})"
    ) in lines
    assert not any("base_runtime_spec" in line for line in lines)
    write_uninstall("crio", str(node))
    assert files_of(node) == before


def test_a_later_file_switching_nri_off_is_refused(tmp_path: Path) -> None:
    """A drop-in CRI-O reads after ours that turns NRI off would undo ours: refused, nothing written."""
    later = f"{DROPIN_DIR}/99-zz-local.conf"
    node = write_node(tmp_path, {"/etc/crio/crio.conf": RUNC_MAIN, later: NRI_OFF})
    before = files_of(node)
    with pytest.raises(InstallError) as caught:
        install(node)
    assert str(caught.value) == (
        f"{node / later.lstrip('/')}: [crio.nri] enable_nri = false is read after {OURS} and would keep the "
        "NRI plugin out; change it there, then install --nri"
    )
    assert files_of(node) == before


def test_an_earlier_file_switching_nri_off_is_overridden(tmp_path: Path) -> None:
    """A drop-in read before ours that turns NRI off is left as it is; ours, read later, wins."""
    node = write_node(tmp_path, {"/etc/crio/crio.conf": RUNC_MAIN, f"{DROPIN_DIR}/50-nri.conf": NRI_OFF})
    install(node)
    assert dropin_of(node)["crio"]["nri"] == {"enable_nri": True}
    assert (node / DROPIN_DIR.lstrip("/") / "50-nri.conf").read_text() == NRI_OFF


@pytest.mark.skipif(crio_dir() is None, reason="needs GPU_ENV_HOOK_CRIO (CRI-O)")
@pytest.mark.parametrize("main", [RUNC_MAIN, RUNC_MAIN + NRI_OFF], ids=["nri-default", "nri-off"])
def test_real_crio_loads_the_dropin_with_nri_on_and_every_setting(tmp_path: Path, main: str) -> None:
    """CRI-O's own verdict (``crio config``, the configuration it would run with): the node's files plus our
    drop-in load, NRI is on, our handler is there, the node's earlier settings (the runc handler, the NRI
    request timeout) are intact."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
    from crio import config_value, crio_config

    node = write_node(tmp_path / "node", {"/etc/crio/crio.conf": main})
    install(node)
    done = crio_config(node, tmp_path / "daemon")
    assert done.returncode == 0, done.stderr
    assert f"Updating config from drop-in file: {OURS}" in done.stderr
    assert config_value(done.stdout, "crio.nri", "enable_nri") == "true"
    config = tomllib.loads(done.stdout)["crio"]
    runtime = config["runtime"]
    assert runtime["default_runtime"] == "runc"
    assert runtime["runtimes"]["runc"]["runtime_config_path"] == "/etc/crio/runc.json"
    assert runtime["runtimes"]["runc"]["privileged_without_host_devices"] is True
    handler = runtime["runtimes"][paths.RUNTIME_HANDLER]
    assert handler["runtime_path"] == paths.runtime_wrapper("crio")
    if "3s" in main:
        assert config_value(done.stdout, "crio.nri", "nri_plugin_request_timeout") == '"3s"'


def test_install_md_example_runs_and_shows_what_install_writes(tmp_path: Path) -> None:
    """docs/install.md's CRI-O NRI example: its install line runs (beneath a node root) on a node whose
    crio.conf switches NRI off, and the drop-in ends with the fragment the page shows."""
    import re
    import shlex

    from conftest import REPO

    text = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    section = text[text.index("### CRI-O with the NRI plugin") :]
    commands = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    fragment = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert commands is not None
    assert fragment is not None
    line = commands.group(1).splitlines()[0]
    assert line == "gpu-env-hook install --engine crio --nri"
    node = write_node(tmp_path, {"/etc/crio/crio.conf": RUNC_MAIN + NRI_OFF})
    argv = [*shlex.split(line)[1:], "--root", str(node), "--python", PYTHON, "--nri-python", PYTHON]
    done = subprocess.run(
        [PYTHON, "-I", "-m", "hook", *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    shown = "\n".join(part.strip() for part in fragment.group(1).splitlines()).strip() + "\n"
    assert (node / OURS.lstrip("/")).read_text().endswith(shown)


def test_nri_md_cri_o_commands_are_install_mds() -> None:
    """docs/nri.md's CRI-O section shows the commands docs/install.md's does (whose install line a test runs),
    comments aside."""
    import re

    from conftest import REPO

    def commands(page: str, heading: str) -> list[str]:
        text = (REPO / "docs" / page).read_text(encoding="utf-8")
        block = re.search(r"```sh\n(.*?)```", text[text.index(heading) :], re.DOTALL)
        assert block is not None
        return [line.split("#")[0].strip() for line in block.group(1).splitlines()]

    assert commands("nri.md", "## On CRI-O") == commands("install.md", "### CRI-O with the NRI plugin")


def test_nri_writes_no_hooks_json_and_takes_back_an_earlier_one(tmp_path: Path) -> None:
    """With --nri no hooks JSON (its hook would run for every container and, being a GPU hook already there,
    keep the plugin from adding its own with the decision); one an install without --nri wrote is taken
    back by install --nri, and comes back when installed again without."""
    hooks = tmp_path / paths.OCI_HOOKS_DIRS[0].lstrip("/") / paths.HOOK_JSON_NAME
    node = write_node(tmp_path, {"/etc/crio/crio.conf": RUNC_MAIN})
    before = files_of(node)
    write_install(InstallOptions(engine="crio", python=PYTHON, root=str(node)))
    assert hooks.is_file()
    install(node)
    assert not hooks.exists()
    assert "# Env files on the default runtime: the NRI plugin" in (node / OURS.lstrip("/")).read_text()
    write_install(InstallOptions(engine="crio", python=PYTHON, root=str(node), nri=False))
    assert hooks.is_file()
    assert not (node / UNIT_PATH.lstrip("/")).exists()
    write_uninstall("crio", str(node))
    assert files_of(node) == before


def test_no_nri_unit_as_the_nri_daemonset_installs(tmp_path: Path) -> None:
    """--nri --no-nri-unit (the NRI DaemonSet's init container, NRI=pod): NRI switched on, no unit (the
    plugin runs in the pod), no hooks JSON; uninstall restores every byte."""
    node = write_node(tmp_path, {"/etc/crio/crio.conf": RUNC_MAIN + NRI_OFF})
    before = files_of(node)
    lines = install(node, nri_unit=False)
    assert dropin_of(node)["crio"]["nri"] == {"enable_nri": True}
    assert not (node / UNIT_PATH.lstrip("/")).exists()
    assert not (node / paths.OCI_HOOKS_DIRS[0].lstrip("/") / paths.HOOK_JSON_NAME).exists()
    assert not any("gpu-env-hook-nri" in line for line in lines)
    write_uninstall("crio", str(node))
    assert files_of(node) == before
