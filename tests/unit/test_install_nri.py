"""install --engine containerd --nri: the version check, NRI switched on where it is off, the plugin's unit,
and uninstall restoring every byte.

The version comes from running the node's ``containerd --version``: Debian's real containerd 1.6 (refused),
the containerd 2.x build named by ``GPU_ENV_HOOK_CONTAINERD2`` (its ``config dump`` also loads the edited
config), and, for 1.7 (NRI off by default; no 1.7 build on this machine), a script printing 1.7's line.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from engine_builds import containerd2
from test_install_containerd import CRI, MAIN, PYTHON, V2_SYSTEMD

from hook.install import InstallError, InstallOptions, write_install, write_uninstall
from hook.install.nri import NRI_PLUGIN, UNIT_PATH, build_unit, parse_version
from hook.util import paths

# A containerd 1.x config with earlier settings of its own (the containerd install tests' fixture).
V2 = V2_SYSTEMD
BINARY = "/usr/bin/containerd"
LINE_17 = "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da"
LINE_23 = "containerd github.com/containerd/containerd/v2 v2.3.4 db8809540e1a7a9da5d518876894933ff55692ab"


def node_with(root: Path, config: str | None, version_line: str) -> Path:
    """A node tree with ``config`` as containerd's main config and a containerd printing ``version_line``."""
    if config is not None:
        (root / "etc/containerd").mkdir(parents=True)
        (root / MAIN.lstrip("/")).write_text(config)
    binary = root / BINARY.lstrip("/")
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    binary.chmod(0o755)
    return root


def install(node: Path, **options: Any) -> list[str]:
    """install --engine containerd --nri into the node tree."""
    return write_install(
        InstallOptions(
            engine="containerd", python=PYTHON, root=str(node), nri=True, nri_python=PYTHON, **options
        )
    )


def config_of(node: Path) -> dict[str, Any]:
    """The node's main containerd config, parsed."""
    return tomllib.loads((node / MAIN.lstrip("/")).read_text())


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(
            "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1", (1, 6), id="debian"
        ),
        pytest.param(LINE_17, (1, 7), id="docker-packaged-1-7"),
        pytest.param(LINE_23, (2, 3), id="v2-with-v-prefix"),
        pytest.param("something else", None, id="not-containerd"),
        pytest.param("containerd x", None, id="no-version"),
    ],
)
def test_parse_version(line: str, expected: tuple[int, int] | None) -> None:
    """containerd --version's third field is its version, with or without a leading v."""
    assert parse_version(line + "\n") == expected


def test_containerd_1_7_gets_nri_switched_on_and_uninstall_restores_bytes(tmp_path: Path) -> None:
    """1.7 has NRI off by default: the block gains disable = false; the unit is written, not started; uninstall
    restores the config's bytes and removes the unit."""
    node = node_with(tmp_path, V2, LINE_17)
    lines = install(node)
    document = config_of(node)
    assert document["plugins"][NRI_PLUGIN] == {"disable": False}
    assert document["plugins"][CRI]["sandbox_image"] == "registry.example.com/pause:3.9"
    assert (node / MAIN.lstrip("/")).read_text().startswith(V2)
    unit = (node / UNIT_PATH.lstrip("/")).read_text()
    assert f"ExecStart={PYTHON} -I -m hook nri {paths.NRI_SOCKET}\n" in unit
    assert "Restart=always\n" in unit
    assert (
        "next: start the NRI plugin: systemctl daemon-reload && systemctl enable --now gpu-env-hook-nri "
        f"(written to {node}{UNIT_PATH})"
    ) in lines
    after = write_uninstall("containerd", str(node))
    assert (node / MAIN.lstrip("/")).read_text() == V2
    assert not (node / UNIT_PATH.lstrip("/")).exists()
    assert after[-2].startswith("next: systemctl stop gpu-env-hook-nri; systemctl daemon-reload")


def test_containerd_2_leaves_nri_as_it_is(tmp_path: Path) -> None:
    """2.x has NRI on by default: no NRI table is added, the unit is."""
    node = node_with(tmp_path, V2, LINE_23)
    install(node)
    assert NRI_PLUGIN not in config_of(node)["plugins"]
    assert (node / UNIT_PATH.lstrip("/")).is_file()


def test_containerd_2_dropin_switches_a_disabled_nri_back_on(tmp_path: Path) -> None:
    """A version-3 config that turns NRI off and imports conf.d: install's drop-in (merged per key) carries
    the node's NRI table with disable = false; the main config is not touched."""
    main = (
        'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
        f'[plugins."{NRI_PLUGIN}"]\n  disable = true\n  plugin_request_timeout = "3s"\n'
    )
    node = node_with(tmp_path, main, LINE_23)
    (node / "etc/containerd/conf.d").mkdir()
    install(node)
    assert (node / MAIN.lstrip("/")).read_text() == main
    dropin = tomllib.loads((node / "etc/containerd/conf.d" / paths.CONTAINERD_DROPIN_NAME).read_text())
    assert dropin["plugins"][NRI_PLUGIN] == {"disable": False, "plugin_request_timeout": "3s"}
    write_uninstall("containerd", str(node))
    assert not (node / "etc/containerd/conf.d" / paths.CONTAINERD_DROPIN_NAME).exists()


@pytest.mark.parametrize(
    ("config", "line", "message"),
    [
        pytest.param(
            V2 + f'[plugins."{NRI_PLUGIN}"]\n  disable = true\n',
            LINE_23,
            f'{{node}}{MAIN}: [plugins."{NRI_PLUGIN}"] switches NRI off; set disable = false there, then '
            "install --nri",
            id="explicitly-off-on-2x",
        ),
        pytest.param(
            V2 + f'[plugins."{NRI_PLUGIN}"]\n  socket_path = "/var/run/nri/nri.sock"\n',
            LINE_17,
            f'{{node}}{MAIN}: [plugins."{NRI_PLUGIN}"] switches NRI off; set disable = false there, then '
            "install --nri",
            id="own-table-off-by-default-on-1-7",
        ),
        pytest.param(
            'version = 1\n[plugins.cri]\n  sandbox_image = "p:1"\n',
            LINE_17,
            "--nri: containerd config version 1 names plugins by short names; migrate it to version 2 first "
            "(containerd config migrate)",
            id="config-version-1",
        ),
        pytest.param(
            V2,
            "containerd is broken",
            f"--nri: {{node}}{BINARY} --version did not name a containerd version",
            id="no-version",
        ),
    ],
)
def test_refusals_write_nothing(tmp_path: Path, config: str, line: str, message: str) -> None:
    """What install --nri cannot do safely is refused in one line, and nothing is written."""
    node = node_with(tmp_path, config, line)
    with pytest.raises(InstallError) as caught:
        install(node)
    assert str(caught.value) == message.format(node=node)
    assert (node / MAIN.lstrip("/")).read_text() == config
    assert not (node / UNIT_PATH.lstrip("/")).exists()


def test_real_containerd_1_6_is_refused(tmp_path: Path) -> None:
    """Debian's containerd 1.6, run for its version: it has no NRI."""
    real = shutil.which("containerd")
    if real is None:
        pytest.skip("no containerd on PATH")
    node = node_with(tmp_path, V2, LINE_17)
    (node / "opt").mkdir()
    (node / "opt/containerd").symlink_to(real)
    with pytest.raises(InstallError) as caught:
        install(node, containerd_binary="/opt/containerd")
    assert str(caught.value) == (
        "--nri: containerd 1.6 has no NRI (it came in 1.7); upgrade containerd, or use the runtime handler "
        "alone (install without --nri)"
    )


def test_only_the_nri_engines(tmp_path: Path) -> None:
    """--nri with an engine that has no NRI is refused."""
    with pytest.raises(InstallError) as caught:
        write_install(InstallOptions(engine="docker", python=PYTHON, root=str(tmp_path), nri=True))
    assert str(caught.value) == (
        "--nri: NRI runs in containerd and CRI-O; use it with --engine containerd or crio"
    )


def test_unit_refuses_a_path_systemd_would_split() -> None:
    """A path with a space cannot be written unquoted in ExecStart."""
    with pytest.raises(InstallError) as caught:
        build_unit("/opt/my env/bin/python", None)
    assert str(caught.value) == (
        "--nri: '/opt/my env/bin/python' cannot be written unquoted in a systemd unit; use a plain path"
    )


@pytest.mark.skipif(containerd2() is None, reason="needs GPU_ENV_HOOK_CONTAINERD2 (containerd 2.x)")
def test_containerd_2_config_dump_loads_the_edit_with_every_setting(tmp_path: Path) -> None:
    """containerd 2.x's own verdict: `config dump` of the edited config (NRI explicitly re-enabled is not
    install's to do, so a version-2 config on 2.x) keeps every earlier setting and has our handler; its
    version is read from the real binary."""
    binary = containerd2()
    assert binary is not None
    node = node_with(tmp_path, V2, LINE_23)
    (node / BINARY.lstrip("/")).unlink()
    (node / BINARY.lstrip("/")).symlink_to(binary)
    install(node)
    config = node / MAIN.lstrip("/")
    dumped = subprocess.run(
        [str(binary), "--config", str(config), "config", "dump"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    document = tomllib.loads(dumped.stdout)
    runtime = document["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
    images = document["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "registry.example.com/pause:3.9"
    assert runtime["runc"]["options"]["SystemdCgroup"] is True
    assert runtime[paths.RUNTIME_HANDLER]["options"]["BinaryName"] == paths.runtime_wrapper("containerd")
    assert runtime[paths.RUNTIME_HANDLER]["options"]["SystemdCgroup"] is True
    assert document["plugins"][NRI_PLUGIN]["disable"] is False


def test_no_nri_unit_without_a_containerd_binary_takes_containerd_2(tmp_path: Path) -> None:
    """--nri --no-nri-unit (the NRI DaemonSet, for containerd 2.0 and later) on a node whose containerd is
    not on the fixed PATH (k3s, RKE2; the DaemonSet's tests' node root): taken as 2.x, whose NRI is on
    unless a config turns it off, and no unit is written."""
    (tmp_path / "etc/containerd").mkdir(parents=True)
    (tmp_path / MAIN.lstrip("/")).write_text(V2)
    lines = install(tmp_path, nri_unit=False)
    assert not (tmp_path / UNIT_PATH.lstrip("/")).exists()
    assert NRI_PLUGIN not in config_of(tmp_path).get("plugins", {})
    assert not any("gpu-env-hook-nri" in line for line in lines)
