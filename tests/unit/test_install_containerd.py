"""install --engine containerd: reading configs as containerd does, the handler's table, the edit and its undo.

containerd's own verdict on the edited files is in tests/integration/test_containerd.py (config dump, the CRI
plugin, a pod through the handler); these tests pin the decisions and every refusal's message.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tomllib
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from hook.install import InstallError, InstallOptions, write_install, write_uninstall
from hook.install.containerd import (
    BUILTIN_RUNC,
    build_handler_table,
    load_chain,
    real_runtime,
    resolve_base_runtime,
    resolve_cri,
    resolve_version,
    unmerge_config,
)
from hook.install.tomlwrite import render_tables
from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
CRI = "io.containerd.grpc.v1.cri"
MAIN = "/etc/containerd/config.toml"
V2_SYSTEMD = f"""\
version = 2
[plugins."{CRI}"]
  sandbox_image = "registry.example.com/pause:3.9"
  [plugins."{CRI}".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."{CRI}".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""


def write_node(root: Path, files: Mapping[str, str | bytes]) -> Path:
    """Write node files (node path → content) under root."""
    root.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        where = root / path.lstrip("/")
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def install(node: Path, **options: Any) -> list[str]:
    """install --engine containerd into the node tree."""
    return write_install(InstallOptions(engine="containerd", python=PYTHON, root=str(node), **options))


def main_config(node: Path) -> str:
    """The node's main containerd config."""
    return (node / MAIN.lstrip("/")).read_text()


def handler_of(document: dict[str, Any], plugin: str = CRI) -> dict[str, Any]:
    """The gpu-env runtime table in a parsed config."""
    found: dict[str, Any] = document["plugins"][plugin]["containerd"]["runtimes"][paths.RUNTIME_HANDLER]
    return found


# --- versions and load order -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param({}, 1, id="missing-is-1"),
        pytest.param({"version": 1}, 1, id="one"),
        pytest.param({"version": 2}, 2, id="two"),
        pytest.param({"version": 3}, 3, id="three"),
        pytest.param({"version": 4}, 4, id="four-containerd-2.3"),
    ],
)
def test_version_is_read_as_containerd_reads_it(document: dict[str, Any], expected: int) -> None:
    """No ``version`` key means version 1, as in containerd."""
    assert resolve_version(document, "/x.toml") == expected


@pytest.mark.parametrize("version", [5, 0, "2", True], ids=["five", "zero", "string", "bool"])
def test_unknown_version_is_refused(version: object) -> None:
    """A version install does not know is refused, naming the file and the value."""
    with pytest.raises(
        InstallError,
        match=r"^/x.toml: config version .+ is not one install knows \(1, 2, 3 or 4\); fix it first$",
    ):
        resolve_version({"version": version}, "/x.toml")


def test_load_chain_follows_containerds_order(tmp_path: Path) -> None:
    """Main config first, then imports in order (globs sorted), imports of imports after, each file once."""
    node = write_node(
        tmp_path,
        {
            MAIN: 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml", "extra.toml"]\n',
            "/etc/containerd/conf.d/20-b.toml": 'version = 2\nimports = ["/etc/containerd/nested.toml"]\n',
            "/etc/containerd/conf.d/10-a.toml": "version = 2\n",
            "/etc/containerd/conf.d/.hidden.toml": "version = 2\n",
            "/etc/containerd/extra.toml": 'imports = ["/etc/containerd/conf.d/10-a.toml"]\n',
            "/etc/containerd/nested.toml": "version = 2\n",
        },
    )
    chain = load_chain(str(node), MAIN, (node / MAIN.lstrip("/")).read_bytes())
    assert [config.path for config in chain] == [
        MAIN,
        "/etc/containerd/conf.d/.hidden.toml",
        "/etc/containerd/conf.d/10-a.toml",
        "/etc/containerd/conf.d/20-b.toml",
        "/etc/containerd/extra.toml",
        "/etc/containerd/nested.toml",
    ]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        pytest.param(
            {MAIN: "version = = 2\n"},
            r"^{node}/etc/containerd/config.toml: not valid TOML \(.+\); fix it first$",
            id="invalid-toml",
        ),
        pytest.param(
            {MAIN: b"version = 2\n# \xff\n"},
            r"^{node}/etc/containerd/config.toml: not UTF-8 text; fix it first$",
            id="not-utf-8",
        ),
        pytest.param(
            {MAIN: "version = 7\n"},
            r"^{node}/etc/containerd/config.toml: config version 7 is not one install knows \(1, 2, 3 or 4\); "
            r"fix it first$",
            id="unknown-version",
        ),
        pytest.param(
            {
                MAIN: 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
                "/etc/containerd/conf.d/a.toml": "version = 3\n",
            },
            r"^{node}/etc/containerd/conf.d/a.toml: config version 3 is newer than the main config's \(2\); "
            r"containerd refuses that; fix it first$",
            id="dropin-newer-than-root",
        ),
        pytest.param(
            {MAIN: 'imports = ["/etc/containerd/gone.toml"]\n'},
            r"^{node}/etc/containerd/gone.toml: imported by the containerd config, but missing; fix it first$",
            id="missing-import",
        ),
        pytest.param(
            {MAIN: 'imports = "/etc/containerd/a.toml"\n'},
            r"^{node}/etc/containerd/config.toml: imports must be an array of strings; fix it first$",
            id="imports-not-an-array",
        ),
        pytest.param(
            {MAIN: f'version = 2\n[plugins."{CRI}".containerd.runtimes.gpu-env]\n  runtime_type = "x"\n'},
            r"^{node}/etc/containerd/config.toml: already defines runtime 'gpu-env', not written by install; "
            r"remove it first$",
            id="handler-not-ours",
        ),
        pytest.param(
            {
                MAIN: 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
                '  runtimes = { runc = { runtime_type = "io.containerd.runc.v2" } }\n'
            },
            r"^{node}/etc/containerd/config.toml: cannot add runtime 'gpu-env' by appending tables \(.+\); "
            r"add it by hand$",
            id="inline-runtimes-table",
        ),
    ],
)
def test_install_refuses_what_it_cannot_edit_safely(
    tmp_path: Path, files: dict[str, str | bytes], message: str
) -> None:
    """Each refusal is one line naming the file, and nothing is written."""
    node = write_node(tmp_path / "node", files)
    before = {path: path.read_bytes() for path in node.rglob("*") if path.is_file()}
    with pytest.raises(InstallError, match=message.format(node=node)):
        install(node)
    assert {path: path.read_bytes() for path in node.rglob("*") if path.is_file()} == before


# --- which table, which base runtime ---------------------------------------------------------------------


def test_v2_handler_goes_where_the_cri_table_containerd_uses_is(tmp_path: Path) -> None:
    """Version 2: the last file in load order with a CRI table wins whole (containerd 1.x), so it is edited."""
    node = write_node(
        tmp_path,
        {
            MAIN: f'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n[plugins."{CRI}"]\n  a = 1\n',
            "/etc/containerd/conf.d/10-cri.toml": f'version = 2\n[plugins."{CRI}"]\n  b = 2\n',
            "/etc/containerd/conf.d/20-other.toml": 'version = 2\n[debug]\n  level = "info"\n',
        },
    )
    target, cri = resolve_cri(load_chain(str(node), MAIN, (node / MAIN.lstrip("/")).read_bytes()))
    assert (target.path, cri) == ("/etc/containerd/conf.d/10-cri.toml", {"b": 2})


def test_v2_split_runtimes_are_refused(tmp_path: Path) -> None:
    """Version 2 with runtimes in the main config and a later CRI table without them: containerd 1.x and 2.x
    would run different runtimes, so install cannot know which to copy, and refuses."""
    node = write_node(
        tmp_path / "node",
        {
            MAIN: V2_SYSTEMD.replace(
                "version = 2\n", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
            ),
            "/etc/containerd/conf.d/10-cri.toml": f'version = 2\n[plugins."{CRI}"]\n  sandbox_image = "p:2"\n',
        },
    )
    with pytest.raises(
        InstallError,
        match=rf"^{node}/etc/containerd/conf.d/10-cri.toml: its CRI table and an earlier file's set the runtimes "
        r"differently \(containerd 1.x uses only the last table, 2.x merges them\); make them agree first$",
    ):
        install(node)


def test_v3_handler_goes_to_the_main_config_and_sees_merged_tables(tmp_path: Path) -> None:
    """Version 3 (containerd 2.x merges per key): the main config is edited; the base runtime is merged."""
    plugin = "io.containerd.cri.v1.runtime"
    node = write_node(
        tmp_path,
        {
            MAIN: f'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
            f'[plugins."{plugin}".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n',
            "/etc/containerd/conf.d/10.toml": f'version = 3\n[plugins."{plugin}".containerd.runtimes.runc.options]\n'
            "  SystemdCgroup = true\n",
        },
    )
    target, cri = resolve_cri(load_chain(str(node), MAIN, (node / MAIN.lstrip("/")).read_bytes()))
    assert target.path == MAIN
    assert cri["containerd"]["runtimes"]["runc"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True},
    }


NVIDIA = {
    "runtime_type": "io.containerd.runc.v2",
    "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"},
}
RUNC = {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
KATA = {"runtime_type": "io.containerd.kata.v2"}


@pytest.mark.parametrize(
    ("containerd", "expected"),
    [
        pytest.param({}, ("runc", BUILTIN_RUNC[2]), id="no-runtimes-builtin-runc"),
        pytest.param({"runtimes": {"runc": RUNC}}, ("runc", RUNC), id="runc"),
        pytest.param(
            {"default_runtime_name": "nvidia", "runtimes": {"nvidia": NVIDIA, "runc": RUNC}},
            ("nvidia", NVIDIA),
            id="nvidia-default",
        ),
        pytest.param(
            {"default_runtime_name": "kata", "runtimes": {"kata": KATA, "runc": RUNC}},
            ("runc", RUNC),
            id="non-runc-default-falls-back-to-runc",
        ),
        pytest.param(
            {"default_runtime_name": "kata", "runtimes": {"kata": KATA}},
            ("runc", BUILTIN_RUNC[2]),
            id="no-runc-at-all-builtin",
        ),
    ],
)
def test_base_runtime(containerd: dict[str, Any], expected: tuple[str, dict[str, Any]]) -> None:
    """The default runtime when it runs the runc shim, else runc, else containerd's built-in runc."""
    assert resolve_base_runtime({"containerd": containerd}, 2, "/x") == expected


def test_handler_table_copies_the_base_and_sets_binary_name() -> None:
    """Every key and option of the base runtime is kept; BinaryName becomes the wrapper."""
    base: dict[str, Any] = {
        "runtime_type": "io.containerd.runc.v2",
        "pod_annotations": ["a.*"],
        "options": {"SystemdCgroup": True, "BinaryName": "/usr/bin/nvidia-container-runtime"},
    }
    assert build_handler_table(base, "/w") == {
        "runtime_type": "io.containerd.runc.v2",
        "pod_annotations": ["a.*"],
        "options": {"SystemdCgroup": True, "BinaryName": "/w"},
    }
    assert base["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        pytest.param(RUNC, None, id="runc-default"),
        pytest.param({"options": {"BinaryName": "/usr/local/bin/crun"}}, "/usr/local/bin/crun", id="crun"),
        pytest.param(NVIDIA, None, id="nvidia-runtime-never"),
    ],
)
def test_real_runtime_follows_the_base(base: dict[str, Any], expected: str | None) -> None:
    """The shim execs the base runtime's binary, except NVIDIA's runtime (it would add a second GPU hook)."""
    assert real_runtime(base) == expected


def test_real_runtime_bare_name_is_looked_up_on_the_nodes_path(tmp_path: Path) -> None:
    """A bare BinaryName is found on the node's PATH under --root, as the runc shim finds it; None if absent."""
    node = write_node(tmp_path, {"/usr/sbin/crun": "#!/bin/sh\n"})
    (node / "usr/sbin/crun").chmod(0o755)
    assert real_runtime({"options": {"BinaryName": "crun"}}, str(node)) == "/usr/sbin/crun"
    assert real_runtime({"options": {"BinaryName": "youki"}}, str(node)) is None


# --- the edit and its undo -------------------------------------------------------------------------------


def test_install_appends_and_keeps_every_earlier_byte(tmp_path: Path) -> None:
    """The main config gains only lines at its end; they read back as the handler with the base's options."""
    node = write_node(tmp_path, {MAIN: V2_SYSTEMD})
    lines = install(node)
    text = main_config(node)
    assert text.startswith(V2_SYSTEMD + "\n# gpu-env-hook: begin")
    assert handler_of(tomllib.loads(text)) == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True, "BinaryName": paths.runtime_wrapper("containerd")},
    }
    assert (
        f"next: restart containerd (systemctl restart containerd) to load the runtime handler gpu-env (added "
        f"to {node}/etc/containerd/config.toml, with the options of runtime runc); pods select it with a "
        "RuntimeClass whose handler is gpu-env"
    ) in lines


def test_a_config_naming_no_runtime_gets_the_builtin_runc_too(tmp_path: Path) -> None:
    """Naming one runtime replaces containerd 1.x's built-in list: runc is written out with its defaults."""
    node = write_node(tmp_path, {MAIN: f'version = 2\n[plugins."{CRI}"]\n  sandbox_image = "p:1"\n'})
    install(node)
    runtimes = tomllib.loads(main_config(node))["plugins"][CRI]["containerd"]["runtimes"]
    assert runtimes["runc"] == BUILTIN_RUNC[2]
    assert runtimes[paths.RUNTIME_HANDLER]["options"]["BinaryName"] == paths.runtime_wrapper("containerd")


def test_version_1_uses_short_plugin_names(tmp_path: Path) -> None:
    """A config without ``version`` is version 1: the handler goes under ``plugins.cri``."""
    node = write_node(tmp_path, {MAIN: '[plugins.cri]\n  sandbox_image = "p:1"\n'})
    install(node)
    assert handler_of(tomllib.loads(main_config(node)), "cri")["options"][
        "BinaryName"
    ] == paths.runtime_wrapper("containerd")


@pytest.mark.parametrize(
    ("version", "plugin"),
    [
        pytest.param(None, CRI, id="default-version-2"),
        pytest.param(3, "io.containerd.cri.v1.runtime", id="version-3"),
    ],
)
def test_no_config_file_creates_one_that_uninstall_removes(
    tmp_path: Path, version: int | None, plugin: str
) -> None:
    """Without a config, install writes one (version 2, or --containerd-config-version) holding runc and
    the handler; uninstall removes it."""
    node = write_node(tmp_path, {})
    install(node, containerd_config_version=version)
    document = tomllib.loads(main_config(node))
    assert document["version"] == (version or 2)
    assert handler_of(document, plugin)["options"]["BinaryName"] == paths.runtime_wrapper("containerd")
    write_uninstall("containerd", str(node))
    assert not (node / MAIN.lstrip("/")).exists()


def test_version_option_must_match_an_existing_config(tmp_path: Path) -> None:
    """--containerd-config-version only chooses the version of a file install creates."""
    node = write_node(tmp_path, {MAIN: V2_SYSTEMD})
    with pytest.raises(
        InstallError,
        match=rf"^--containerd-config-version 3: {node}/etc/containerd/config.toml is config version 2$",
    ):
        install(node, containerd_config_version=3)


@pytest.mark.parametrize(
    "original",
    [
        pytest.param(V2_SYSTEMD, id="trailing-newline"),
        pytest.param(V2_SYSTEMD.rstrip("\n"), id="no-trailing-newline"),
        pytest.param(V2_SYSTEMD + "\n\n", id="blank-lines-at-end"),
    ],
)
def test_reinstall_then_uninstall_restores_the_bytes(tmp_path: Path, original: str) -> None:
    """Installing twice adds the block once; uninstall restores the original bytes and mode."""
    node = write_node(tmp_path, {MAIN: original})
    (node / MAIN.lstrip("/")).chmod(0o600)
    install(node)
    first = main_config(node)
    install(node)
    assert main_config(node) == first
    assert first.count("# gpu-env-hook: begin") == 1
    write_uninstall("containerd", str(node))
    assert main_config(node) == original
    assert (node / MAIN.lstrip("/")).stat().st_mode & 0o7777 == 0o600


def test_uninstall_keeps_what_the_admin_added_since(tmp_path: Path) -> None:
    """A config changed after install loses only the block install added."""
    node = write_node(tmp_path, {MAIN: V2_SYSTEMD})
    install(node)
    config = node / MAIN.lstrip("/")
    config.write_text(config.read_text() + '\n[debug]\n  level = "debug"\n')
    lines = write_uninstall("containerd", str(node))
    assert main_config(node) == V2_SYSTEMD + '\n[debug]\n  level = "debug"\n'
    assert f"take our runtime out of {config}" in lines


def test_unmerge_without_block_changes_nothing() -> None:
    """A config from which the block is already gone is returned as it is."""
    assert unmerge_config(b"version = 2\n", b"version = 2\n", "/x") == b"version = 2\n"


def test_disabled_cri_is_warned_about(tmp_path: Path) -> None:
    """``cri`` in disabled_plugins: install still adds the handler and says Kubernetes cannot use it."""
    node = write_node(tmp_path, {MAIN: 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n'})
    lines = install(node)
    assert (
        f"warning: {node}/etc/containerd/config.toml lists the CRI plugin in disabled_plugins: Kubernetes "
        "cannot use this containerd, and handler 'gpu-env' serves only CRI (ctr run --runc-binary still works)"
    ) in lines


# --- k3s / RKE2 templates --------------------------------------------------------------------------------

K3S_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"


def test_k3s_template_is_created_from_the_generated_config(tmp_path: Path) -> None:
    """--containerd-config …/config.toml.tmpl without a template: it becomes the base template plus the
    handler based on the generated config's runtime; uninstall removes it and leaves config.toml alone."""
    node = write_node(tmp_path, {f"{K3S_DIR}/config.toml": V2_SYSTEMD})
    install(node, containerd_config=f"{K3S_DIR}/config.toml.tmpl")
    template = (node / K3S_DIR.lstrip("/") / "config.toml.tmpl").read_text()
    assert template.startswith('{{ template "base" . }}\n\n# gpu-env-hook: begin')
    rendered = tomllib.loads(V2_SYSTEMD + template.split("\n", 1)[1])
    assert handler_of(rendered)["options"] == {
        "SystemdCgroup": True,
        "BinaryName": paths.runtime_wrapper("containerd"),
    }
    assert (node / K3S_DIR.lstrip("/") / "config.toml").read_text() == V2_SYSTEMD
    write_uninstall("containerd", str(node))
    assert not (node / K3S_DIR.lstrip("/") / "config.toml.tmpl").exists()


def test_k3s_template_needs_the_generated_config(tmp_path: Path) -> None:
    """Without the config.toml k3s generates, install cannot know the base runtime and says so."""
    node = write_node(tmp_path, {})
    with pytest.raises(
        InstallError,
        match=rf"^{node}{K3S_DIR}/config.toml: missing; start k3s/RKE2 once so that it writes the config {node}{K3S_DIR}/config.toml.tmpl extends, then install$",
    ):
        install(node, containerd_config=f"{K3S_DIR}/config.toml.tmpl")


def test_existing_k3s_template_gets_the_block_appended(tmp_path: Path) -> None:
    """A template of the admin's keeps every byte; the block follows it."""
    admin = '{{ template "base" . }}\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/hosts.d"\n'
    node = write_node(tmp_path, {f"{K3S_DIR}/config.toml": V2_SYSTEMD, f"{K3S_DIR}/config.toml.tmpl": admin})
    install(node, containerd_config=f"{K3S_DIR}/config.toml.tmpl")
    assert (
        (node / K3S_DIR.lstrip("/") / "config.toml.tmpl")
        .read_text()
        .startswith(admin + "\n# gpu-env-hook: begin")
    )
    write_uninstall("containerd", str(node))
    assert (node / K3S_DIR.lstrip("/") / "config.toml.tmpl").read_text() == admin


# --- --config is ours, never an engine's -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        pytest.param(V2_SYSTEMD, "containerd's", id="containerd"),
        pytest.param(
            'imports = ["/etc/containerd/conf.d/*.toml"]\n', "containerd's", id="containerd-imports"
        ),
        pytest.param('[crio.runtime]\ndefault_runtime = "crun"\n', "CRI-O's", id="crio"),
    ],
)
def test_config_option_refuses_an_engine_config(tmp_path: Path, content: str, kind: str) -> None:
    """install --config takes gpu-env-hook's config.toml; an engine's config there is refused in one line."""
    node = write_node(tmp_path, {"/etc/engine.toml": content})
    with pytest.raises(
        InstallError,
        match=rf"^--config /etc/engine.toml: is {kind} config, not gpu-env-hook's config.toml \(NVIDIA's format\); "
        r"install finds the engine's config itself \(containerd: --containerd-config\)$",
    ):
        install(node, config="/etc/engine.toml")


# --- the TOML writer -------------------------------------------------------------------------------------


def test_render_tables_reads_back_exactly() -> None:
    """Strings with quotes, backslashes and control characters, numbers, arrays and nested tables survive."""
    table = {
        "runtime_type": "io.containerd.runc.v2",
        "weird": 'a "quoted" \\ back\tslash\n\x01 ünï',
        "count": -3,
        "ratio": 0.25,
        "flag": False,
        "list": ["a.*", "b"],
        "empty": [],
        "inline": [{"k": "v"}],
        "options": {"BinaryName": "/x", "nested": {"deep": 1}},
        "odd key": 1,
    }
    text = render_tables(("plugins", "io.containerd.grpc.v1.cri", "r"), table)
    assert tomllib.loads(text) == {"plugins": {"io.containerd.grpc.v1.cri": {"r": table}}}
    assert text.splitlines()[0] == '[plugins."io.containerd.grpc.v1.cri".r]'


@pytest.mark.parametrize("value", [math.nan, date(2024, 1, 1)], ids=["nan", "date"])
def test_render_tables_refuses_what_it_cannot_write(value: object) -> None:
    """A value the writer does not know is refused, never written approximately."""
    with pytest.raises(InstallError, match=r"^cannot write .+ as TOML"):
        render_tables(("t",), {"v": value})


def test_manifest_records_the_config_as_a_merge(tmp_path: Path) -> None:
    """The manifest lists the edited config with its merge kind and the bytes it replaced."""
    node = write_node(tmp_path, {MAIN: V2_SYSTEMD})
    install(node)
    manifest = json.loads((node / "var/lib/gpu-env-hook/install-containerd.json").read_text())
    entry = next(entry for entry in manifest["files"] if entry["path"] == MAIN)
    assert entry["merge"] == "containerd-handler"
    assert entry["previous"]["data"]


# --- containerd 2.3 (version 4) and the drop-in directory ------------------------------------------------

RUNTIME_PLUGIN = "io.containerd.cri.v1.runtime"
DROPIN = f"{paths.CONTAINERD_DROPIN_DIR}/{paths.CONTAINERD_DROPIN_NAME}"
# What containerd 2.3's `config default` starts with: version 4, importing the conf.d drop-in directory.
V4_DEFAULT_HEAD = f'version = 4\nimports = ["{paths.CONTAINERD_DROPIN_DIR}/*.toml"]\n'
V4_SYSTEMD = (
    V4_DEFAULT_HEAD
    + f'[plugins."{RUNTIME_PLUGIN}".containerd]\n  default_runtime_name = "runc"\n'
    + f'[plugins."{RUNTIME_PLUGIN}".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
    + f'[plugins."{RUNTIME_PLUGIN}".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
    + '[plugins."io.containerd.grpc.v1.cri"]\n  stream_idle_timeout = "2h0m0s"\n'
)
# The drop-in `nvidia-ctk runtime configure --runtime=containerd` writes for a containerd 2.x config.
NVIDIA_DROPIN_PATH = f"{paths.CONTAINERD_DROPIN_DIR}/99-nvidia.toml"
NVIDIA_DROPIN = f"""\
version = 3

[plugins]

  [plugins."{RUNTIME_PLUGIN}"]

    [plugins."{RUNTIME_PLUGIN}".containerd]

      [plugins."{RUNTIME_PLUGIN}".containerd.runtimes]

        [plugins."{RUNTIME_PLUGIN}".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."{RUNTIME_PLUGIN}".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""


def effective(node: Path) -> dict[str, Any]:
    """The config containerd would run with on the node (main config plus imports, our blocks kept)."""
    from hook.install.containerd import effective_config

    data = (node / MAIN.lstrip("/")).read_bytes()
    return effective_config(load_chain(str(node), MAIN, data, keep_blocks=True))


def test_version_4_with_a_dropin_directory_gets_a_dropin_beside_nvidias(tmp_path: Path) -> None:
    """containerd 2.3's config (version 4, conf.d imported) with NVIDIA's 99-nvidia.toml: install writes its
    own drop-in there, touches neither file, and the effective config is the old one plus exactly our
    handler; uninstall removes the drop-in and nothing else."""
    node = write_node(tmp_path, {MAIN: V4_SYSTEMD, NVIDIA_DROPIN_PATH: NVIDIA_DROPIN})
    before = effective(node)
    lines = install(node)
    assert main_config(node) == V4_SYSTEMD
    assert (node / NVIDIA_DROPIN_PATH.lstrip("/")).read_text() == NVIDIA_DROPIN
    dropin = node / DROPIN.lstrip("/")
    assert f"wrote {dropin}" in lines
    document = tomllib.loads(dropin.read_text())
    assert document["version"] == 4
    assert list(document["plugins"][RUNTIME_PLUGIN]["containerd"]["runtimes"]) == [paths.RUNTIME_HANDLER]
    after = effective(node)
    runtimes = after["plugins"][RUNTIME_PLUGIN]["containerd"]["runtimes"]
    assert runtimes[paths.RUNTIME_HANDLER]["options"] == {
        "SystemdCgroup": True,
        "BinaryName": paths.runtime_wrapper("containerd"),
    }
    del runtimes[paths.RUNTIME_HANDLER]
    assert after == before
    assert sorted(runtimes) == ["nvidia", "runc"]
    install(node)
    assert tomllib.loads(dropin.read_text()) == document
    write_uninstall("containerd", str(node))
    assert not dropin.exists()
    assert main_config(node) == V4_SYSTEMD
    assert (node / NVIDIA_DROPIN_PATH.lstrip("/")).read_text() == NVIDIA_DROPIN


def test_dropin_writes_the_builtin_runc_when_no_file_names_a_runtime(tmp_path: Path) -> None:
    """containerd 2.3's bare default (no runtime named anywhere): the drop-in also writes out the built-in
    runc, which a runtimes table naming only ours would replace."""
    node = write_node(tmp_path, {MAIN: V4_DEFAULT_HEAD})
    install(node)
    document = tomllib.loads((node / DROPIN.lstrip("/")).read_text())
    runtimes = document["plugins"][RUNTIME_PLUGIN]["containerd"]["runtimes"]
    assert runtimes["runc"] == BUILTIN_RUNC[4]
    assert main_config(node) == V4_DEFAULT_HEAD


@pytest.mark.parametrize(
    ("main", "why"),
    [
        pytest.param(
            V2_SYSTEMD,
            "no imports",
            id="v2-without-imports",
        ),
        pytest.param(
            'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n' + V2_SYSTEMD.split("\n", 1)[1],
            "containerd 1.x replaces a plugin table whole",
            id="v2-with-dropin-directory",
        ),
        pytest.param(
            f'version = 4\n[plugins."{RUNTIME_PLUGIN}".containerd.runtimes.runc]\n'
            '  runtime_type = "io.containerd.runc.v2"\n',
            "no drop-in directory imported",
            id="v4-without-imports",
        ),
    ],
)
def test_marked_block_stays_where_a_dropin_would_not_keep_every_setting(
    tmp_path: Path, main: str, why: str
) -> None:
    """No drop-in directory imported, or a merge that replaces tables whole: today's marked block."""
    del why
    node = write_node(tmp_path, {MAIN: main})
    install(node)
    assert main_config(node).startswith(main)
    assert "# gpu-env-hook: begin" in main_config(node)
    assert not (node / DROPIN.lstrip("/")).exists()


def test_reinstall_moves_the_block_to_the_dropin_once_conf_d_is_imported(tmp_path: Path) -> None:
    """A block written before the node imported conf.d moves to the drop-in on the next install: the main
    config gets its earlier bytes back, plus the imports line the admin added."""
    plain = f'version = 3\n[plugins."{RUNTIME_PLUGIN}".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
    node = write_node(tmp_path, {MAIN: plain})
    install(node)
    assert "# gpu-env-hook: begin" in main_config(node)
    config = node / MAIN.lstrip("/")
    with_imports = 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + config.read_text()
    config.write_text(with_imports)
    install(node)
    assert main_config(node) == 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + plain
    assert (node / DROPIN.lstrip("/")).is_file()
    runtimes = effective(node)["plugins"][RUNTIME_PLUGIN]["containerd"]["runtimes"]
    assert sorted(runtimes) == [paths.RUNTIME_HANDLER, "runc"]
