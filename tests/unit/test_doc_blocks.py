"""Every code block of the deployment documents is run by a test, or checked by one in another way.

The documents a Kubernetes user reads to deploy (README.md, docs/install.md, docs/nri.md, docs/env-file.md,
packaging/kubernetes/README.md, docs/upgrading.md, docs/troubleshooting.md) promise that every command in
them runs as written. ``WHO`` lists each of their code blocks with the test that runs or checks it (a
``tests/…::test_name`` that must exist), or, for a block that holds no command (a file layout, a diagram,
an output sample), why; a block added without an entry, or an entry whose block is gone, fails here.

The commands run here through the real process: in a private mount namespace (``unshare -m``) whose
/run, /var/lib, /var/log, /opt and /usr/local are fresh tmpfs and whose /etc and /usr/share/containers are
overlays, so they write node paths as written and nothing on the host changes; or beneath a scratch node
root (``--root``) for engine installs whose engine is not started here (the engine tests start them), with
the lines after them compared to the advice install itself prints. ``kubectl`` cannot run here: its lines
are checked against the manifests (every file, namespace, DaemonSet, container and image they name exists,
and a command run in a pod sees what it needs), and the command they run in the pod runs here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
BIN = str(Path(PYTHON).parent)
STANDIN = REPO / "tests" / "standin" / "nvidia-container-cli"
KUBERNETES = REPO / "packaging" / "kubernetes"
DOCUMENTS = (
    "README.md",
    "docs/install.md",
    "docs/nri.md",
    "docs/env-file.md",
    "packaging/kubernetes/README.md",
    "docs/upgrading.md",
    "docs/troubleshooting.md",
)
ROOT_AND_UNSHARE = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a mount namespace)"
)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its document, the heading it is under, its place there, language and text."""

    document: str
    heading: str
    index: int
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.document}: {self.heading} [{self.index}]"


FENCE = re.compile(r"^( *)(```|~~~)(\S*)\s*$")


def blocks(document: str) -> list[Block]:
    """The fenced code blocks of a document (indented ones in lists too, their indentation removed)."""
    found: list[Block] = []
    heading, counts = "(top)", dict[str, int]()
    lines = (REPO / document).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            if lines[i].startswith("#"):
                heading = lines[i].lstrip("#").strip()
            i += 1
            continue
        indent, fence, language = opening.groups()
        body = []
        i += 1
        while not re.match(rf"^{indent}{fence}\s*$", lines[i]):
            body.append(lines[i][len(indent) :])
            i += 1
        i += 1
        counts[heading] = counts.get(heading, 0) + 1
        found.append(Block(document, heading, counts[heading], language, "\n".join(body) + "\n"))
    return found


def block(document: str, heading: str, index: int = 1) -> str:
    """The text of one block."""
    (found,) = [b for b in blocks(document) if (b.heading, b.index) == (heading, index)]
    return found.text


def commands(text: str) -> list[str]:
    """The command lines of an sh block: comments and blank lines dropped, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", "", text)
    lines = [re.sub(r"(^|\s+)#.*$", "", line).strip() for line in joined.splitlines()]
    return [line for line in lines if line]


HERE = "tests/unit/test_doc_blocks.py::"
INSTALL_RETIRE = (
    "tests/unit/test_install_retire.py::test_remove_everything_example_runs_as_written_and_leaves_nothing"
)
CRIO_NRI = "tests/unit/test_install_crio_nri.py::"
NODE_ENGINE = "tests/unit/test_node_engine.py::"
GO_WRITER = "tests/unit/test_docs_go_writer.py::"

# Each block: the test that runs or checks it, or (a block without a command) "not a command: why".
WHO = {
    # README.md
    "README.md: Quick start [1]": "tests/integration/test_demo.py::test_demo_runs_and_its_table_aligns",
    "README.md: Getting the command on PATH [1]": HERE + "test_readme_path_block_runs_as_written",
    "README.md: With podman, on this machine (no GPU needed) [1]": (
        "tests/integration/test_readme_podman.py::test_readme_podman_quick_start_runs_as_written"
    ),
    "README.md: Install on a node [1]": HERE + "test_kubectl_lines_name_what_the_manifests_define",
    "README.md: Install on a node [2]": HERE + "test_readme_install_on_a_node_runs_as_written",
    "README.md: Configure [1]": HERE + "test_readme_configure_shows_the_defaults",
    "README.md: Using it [1]": HERE + "test_first_steps_run_as_written_on_an_installed_node",
    "README.md: Layout [1]": "not a command: the package's directories",
    # docs/install.md
    "docs/install.md: Installing on a node: podman, CRI-O, containerd, Docker, Kubernetes [1]": (
        HERE + "test_install_synopsis_names_only_what_the_commands_take"
    ),
    "docs/install.md: What install writes [1]": (
        "tests/unit/test_install_trust.py::test_install_refuses_what_someone_else_can_change"
    ),
    "docs/install.md: The node's own runtime, and how the engines start it [1]": (
        "not a command: the layout of /opt/gpu-env-hook"
    ),
    "docs/install.md: The tree's own interpreter (`--python tree`) [1]": "not a command: the layout of python/",
    "docs/install.md: The tree's own interpreter (`--python tree`) [2]": (
        HERE + "test_loader_form_is_what_install_python_tree_writes"
    ),
    "docs/install.md: The tree's own interpreter (`--python tree`) [3]": (
        HERE + "test_hook_wrapper_is_what_install_writes"
    ),
    "docs/install.md: Remove everything [1]": INSTALL_RETIRE,
    "docs/install.md: Uninstall with running containers, and upgrades [1]": (
        "tests/integration/test_containerd.py::test_uninstall_while_a_pod_runs_through_the_handler_leaves_it_stoppable"
    ),
    "docs/install.md: podman [1]": HERE + "test_engine_block_installs_and_says_what_install_advises",
    "docs/install.md: CRI-O [1]": HERE + "test_engine_block_installs_and_says_what_install_advises",
    "docs/install.md: CRI-O with the NRI plugin [1]": HERE
    + "test_engine_block_installs_and_says_what_install_advises",
    "docs/install.md: CRI-O with the NRI plugin [2]": (
        CRIO_NRI + "test_install_md_example_runs_and_shows_what_install_writes"
    ),
    "docs/install.md: containerd [1]": HERE + "test_engine_block_installs_and_says_what_install_advises",
    "docs/install.md: What install writes: a drop-in where containerd merges per key, else a marked block [1]": (
        HERE + "test_containerd_block_is_what_install_appends"
    ),
    "docs/install.md: k3s and RKE2 [1]": HERE + "test_engine_block_installs_and_says_what_install_advises",
    "docs/install.md: Docker [1]": HERE + "test_engine_block_installs_and_says_what_install_advises",
    # docs/nri.md
    "docs/nri.md: How it flows [1]": "not a command: a diagram",
    "docs/nri.md: Running it [1]": HERE + "test_nri_plugin_lines_run_as_written",
    "docs/nri.md: On a node without Kubernetes [1]": HERE
    + "test_engine_block_installs_and_says_what_install_advises",
    "docs/nri.md: On a node without Kubernetes [2]": HERE
    + "test_nri_switch_on_fragment_is_what_install_writes",
    "docs/nri.md: Never a GPU container without its file: the env-file guard [1]": (
        "not a command: runc's error through containerd (tests/integration/test_nri_containerd.py sees it)"
    ),
    "docs/nri.md: On CRI-O [1]": CRIO_NRI + "test_nri_md_cri_o_commands_are_install_mds",
    "docs/nri.md: On CRI-O [2]": "not a command: CRI-O's error (tests/integration/test_nri_crio.py sees it)",
    # docs/env-file.md
    "docs/env-file.md: File format [1]": HERE + "test_env_file_format_example_reads_as_shown",
    "docs/env-file.md: Settings: `[env-file]` in config.toml [1]": HERE
    + "test_env_file_settings_are_the_defaults",
    "docs/env-file.md: The flow [1]": "not a command: a diagram",
    "docs/env-file.md: The Allocate answer [1]": GO_WRITER
    + "test_go_writer_allocate_answer_is_the_python_apis",
    "docs/env-file.md: The CDI flow, next to the legacy one [1]": "not a command: a diagram",
    "docs/env-file.md: The path scheme [1]": "not a command: pseudo-code (tests/unit/test_producer.py pins it)",
    "docs/env-file.md: The format, as a specification [1]": "not a command: the grammar",
    "docs/env-file.md: The format, as a specification [2]": (
        "tests/unit/test_docs.py::test_specification_example_reads_as_described"
    ),
    "docs/env-file.md: From Go [1]": GO_WRITER + "test_go_writer_output_reads_back_exactly",
    "docs/env-file.md: From the command line [1]": (
        NODE_ENGINE + "test_env_file_cli_example_runs_as_written_on_an_installed_node"
    ),
    "docs/env-file.md: From Python [1]": NODE_ENGINE
    + "test_python_example_checks_against_the_installed_engine",
    # packaging/kubernetes/README.md
    "packaging/kubernetes/README.md: Build the image and push it to your registry [1]": (
        HERE + "test_image_build_line_is_what_the_image_test_runs"
    ),
    "packaging/kubernetes/README.md: The NRI path: gpu-env-hook-nri.yaml [1]": (
        HERE + "test_kubectl_lines_name_what_the_manifests_define"
    ),
    "packaging/kubernetes/README.md: The runtime handler: gpu-env-hook.yaml [1]": (
        HERE + "test_kubectl_lines_name_what_the_manifests_define"
    ),
    "packaging/kubernetes/README.md: Check a node [1]": HERE
    + "test_doctor_in_the_pod_runs_on_an_installed_node",
    "packaging/kubernetes/README.md: Check a node [2]": HERE
    + "test_doctor_in_the_pod_runs_on_an_installed_node",
    "packaging/kubernetes/README.md: The node needs no Python [1]": (
        HERE + "test_loader_form_is_what_install_python_tree_writes"
    ),
    "packaging/kubernetes/README.md: The node needs no Python [2]": (
        "tests/integration/test_daemonset_image.py::test_image_refuses_a_node_it_cannot_serve_in_one_line"
    ),
    "packaging/kubernetes/README.md: With a GPU-sharing device plugin [1]": "not a command: a diagram",
    "packaging/kubernetes/README.md: With a GPU-sharing device plugin [2]": (
        HERE + "test_device_plugin_steps_run_as_written_on_an_installed_node"
    ),
    "packaging/kubernetes/README.md: With a GPU-sharing device plugin [3]": (
        HERE + "test_device_plugin_steps_run_as_written_on_an_installed_node"
    ),
    "packaging/kubernetes/README.md: With a GPU-sharing device plugin [4]": (
        HERE + "test_gpu_pod_snippet_names_the_runtime_class"
    ),
    # docs/upgrading.md
    "docs/upgrading.md: Upgrading the DaemonSet [1]": HERE
    + "test_kubectl_lines_name_what_the_manifests_define",
    # docs/troubleshooting.md
    "docs/troubleshooting.md: Troubleshooting [1]": HERE
    + "test_first_steps_run_as_written_on_an_installed_node",
    "docs/troubleshooting.md: runc (directly) [1]": "not a command: runc's error",
    "docs/troubleshooting.md: containerd and kubelet (Kubernetes) [1]": (
        HERE + "test_kubectl_lines_name_what_the_manifests_define"
    ),
    "docs/troubleshooting.md: podman [1]": (
        "tests/integration/test_install_podman.py::test_podman_shows_a_short_error_and_the_refusal_log_has_the_reason"
    ),
    "docs/troubleshooting.md: podman [2]": (
        "tests/integration/test_install_podman.py::test_podman_shows_a_short_error_and_the_refusal_log_has_the_reason"
    ),
    "docs/troubleshooting.md: podman [3]": (
        "tests/integration/test_install_podman.py::test_podman_shows_a_short_error_and_the_refusal_log_has_the_reason"
    ),
    "docs/troubleshooting.md: Docker [1]": "not a command: dockerd's error (tests/integration/test_docker.py sees it)",
}


def all_blocks() -> list[Block]:
    return [found for document in DOCUMENTS for found in blocks(document)]


def test_every_block_is_listed_with_what_runs_it() -> None:
    """Each block of the deployment documents has an entry in WHO, and each entry a block."""
    ids = [found.id for found in all_blocks()]
    assert len(ids) == len(set(ids))
    assert sorted(set(ids) - set(WHO)) == []  # a new block: say which test runs it
    assert sorted(set(WHO) - set(ids)) == []  # a block gone or renamed


def test_every_command_block_names_a_test_that_exists() -> None:
    """A block in a language that runs (sh, python, toml, yaml) names a test, not a reason; every test named
    exists."""
    missing = []
    for found in all_blocks():
        who = WHO.get(found.id, "")
        if who.startswith("not a command"):
            assert found.language not in ("sh", "python", "toml", "yaml"), found.id
            continue
        path, _, name = who.partition("::")
        source = REPO / path
        if not source.is_file() or f"def {name}(" not in source.read_text(encoding="utf-8"):
            missing.append(f"{found.id}: {who}")
    assert missing == []


# --- a node in a mount namespace ---------------------------------------------------------------------------


def namespace_setup(scratch: Path) -> str:
    """Shell lines that make a private mount namespace a node: fresh tmpfs on /run, /var/lib, /var/log, /opt
    and /usr/local, overlays on /etc and /usr/share/containers (written there, seen nowhere else; their
    upper layers in ``scratch``, a tmpfs too)."""
    setup = ["set -e", f"mount -t tmpfs -o mode=0700 tmpfs {scratch}"]
    setup += [
        f"mount -t tmpfs -o mode=0755 tmpfs {place}" for place in ("/run", "/var/lib", "/var/log", "/opt")
    ]
    setup += ["mount -t tmpfs -o mode=0755 tmpfs /usr/local", "mkdir /usr/local/bin /usr/local/sbin"]
    for index, place in enumerate(("/etc", "/usr/share/containers")):
        if Path(place).is_dir():
            upper, work = scratch / f"upper{index}", scratch / f"work{index}"
            setup += [
                f"mkdir {upper} {work}",
                f"mount -t overlay overlay -o lowerdir={place},upperdir={upper},workdir={work} {place}",
            ]
    return "\n".join(setup) + "\n"


NODE_PATH = f"{BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def in_namespace(
    tmp_path: Path, script: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (each line must succeed: ``set -e``) in a private mount namespace made a node
    (namespace_setup), with this interpreter's bin directory first on PATH."""
    scratch = tmp_path / "ns"
    scratch.mkdir()
    environ = {"PATH": NODE_PATH, "LANG": "C.UTF-8", "HOME": "/root", **(env or {})}
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", namespace_setup(scratch) + script],
        capture_output=True, text=True, env=environ, cwd=cwd, timeout=300, check=False,
    )  # fmt: skip


NODE_CONFIG = f"""mkdir -p /etc/nvidia-container-runtime
printf '[nvidia-container-cli]\\npath = "{STANDIN}"\\n' > /etc/nvidia-container-runtime/config.toml
"""


@ROOT_AND_UNSHARE
def test_first_steps_run_as_written_on_an_installed_node(tmp_path: Path) -> None:
    """troubleshooting.md's first steps and README's "Using it" on a node where podman's install ran (the cli
    named in config.toml: the recording stand-in), with an env file and a bundle: every line exits 0."""
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    shutil.copy(REPO / "tests/fixtures/oci-config/good/minimal-for-start.json", bundle / "config.json")
    setup = NODE_CONFIG + (
        "gpu-env-hook install --engine podman >/dev/null\n"
        "gpu-env-hook env-file write /run/nvidia-env/x.env NVIDIA_VISIBLE_DEVICES=0 >/dev/null\n"
    )
    for document, heading in (("docs/troubleshooting.md", "Troubleshooting"), ("README.md", "Using it")):
        script = setup + block(document, heading)
        scratch = tmp_path / document.replace("/", "-")
        scratch.mkdir()
        done = in_namespace(scratch, script, {"BUNDLE": str(bundle)})
        assert (done.returncode, done.stderr) == (0, ""), document + "\n" + done.stdout + done.stderr
        assert "✗" not in done.stdout, done.stdout


@pytest.mark.integration
@ROOT_AND_UNSHARE
def test_readme_install_on_a_node_runs_as_written(tmp_path: Path) -> None:
    """README's pip-on-node lines, from a copy of the checkout (pip writes dist/ there), on a node whose
    config.toml names the recording stand-in: the wheel, the venv in /opt, install for podman and doctor all
    exit 0, and doctor finds nothing wrong. (pip fetches the dependencies: it needs PyPI or its cache.)"""
    checkout = tmp_path / "checkout"
    skip = shutil.ignore_patterns(".venv", ".git", "build", "dist", "__pycache__", "*.egg-info", ".*_cache")
    shutil.copytree(REPO, checkout, ignore=skip)
    script = NODE_CONFIG + block("README.md", "Install on a node", 2)
    done = in_namespace(tmp_path, script, {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}, cwd=checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✗" not in done.stdout, done.stdout
    assert "✓  podman" in done.stdout, done.stdout


@ROOT_AND_UNSHARE
def test_readme_path_block_runs_as_written(tmp_path: Path) -> None:
    """README's PATH lines, from the checkout: gpu-env-hook is found on PATH, then through /usr/local/bin."""
    script = block("README.md", "Getting the command on PATH") + (
        'test "$(command -v gpu-env-hook)" = "$PWD/.venv/bin/gpu-env-hook"\n'
        "/usr/local/bin/gpu-env-hook --version\n"
    )
    done = in_namespace(tmp_path, script)
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert done.stdout.startswith("gpu-env-hook ")


def settings_state(value: Any) -> Any:
    """A settings object's values, nested objects' too (where it came from left out)."""
    if hasattr(value, "__slots__"):
        return {name: settings_state(getattr(value, name)) for name in value.__slots__ if name != "source"}
    return value


def test_readme_configure_shows_the_defaults() -> None:
    """README's config.toml is the defaults it says it is."""
    from hook.pipeline.config import parse_config

    shown = settings_state(parse_config(block("README.md", "Configure")))
    assert shown == settings_state(parse_config(None))


def test_env_file_settings_are_the_defaults() -> None:
    """env-file.md's [env-file] table is the defaults."""
    from hook.pipeline.config import parse_config

    shown = parse_config(block("docs/env-file.md", "Settings: `[env-file]` in config.toml"))
    assert settings_state(shown) == settings_state(parse_config(None))


def test_env_file_format_example_reads_as_shown() -> None:
    """env-file.md's first example is read by the hook's reader with the values it shows."""
    from hook.pipeline.dotenvreader import parse_dotenv

    values = {key: value for key, value, _ in parse_dotenv(block("docs/env-file.md", "File format"))}
    assert values == {
        "GPU_ENV_HOOK_POD_UID": "6f1c2a9e-0d7b-4c55-9d8e-2d6f3b1a9c10",
        "GPU_ENV_HOOK_CONTAINER_NAME": "main",
        "NVIDIA_VISIBLE_DEVICES": "0",
        "USER_CUSTOM_ENV": "hello",
        "QUOTED": "a value with spaces",
    }


# --- engine installs beneath a node root ---------------------------------------------------------------------

K3S = "/var/lib/rancher/k3s/agent/etc/containerd"
ENGINE_BLOCKS = [
    pytest.param("docs/install.md", "podman", id="install.md-podman"),
    pytest.param("docs/install.md", "CRI-O", id="install.md-crio"),
    pytest.param("docs/install.md", "CRI-O with the NRI plugin", id="install.md-crio-nri"),
    pytest.param("docs/install.md", "containerd", id="install.md-containerd"),
    pytest.param("docs/install.md", "k3s and RKE2", id="install.md-k3s"),
    pytest.param("docs/install.md", "Docker", id="install.md-docker"),
    pytest.param("docs/nri.md", "On a node without Kubernetes", id="nri.md-containerd-nri"),
]
# Lines that start a container with an image and a GPU, run by the engine tests (which start the engine):
ENGINE_RUNS = {
    "podman run": "tests/integration/test_install_podman.py",
    "docker run": "tests/integration/test_docker.py",
}


def containerd2() -> Path | None:
    from engine_builds import containerd2_dir

    return containerd2_dir()


@pytest.mark.parametrize(("document", "heading"), ENGINE_BLOCKS)
def test_engine_block_installs_and_says_what_install_advises(
    tmp_path: Path, document: str, heading: str
) -> None:
    """An engine section's lines: its install line runs (beneath a scratch node root, with this interpreter);
    each systemctl line is the step install's `next:` advice names; `containerd --version` runs the
    containerd 2.x build; a `podman run`/`docker run` line is the engine test's own command."""
    lines = commands(block(document, heading))
    node = tmp_path / "node"
    (node / K3S.lstrip("/")).mkdir(parents=True)
    (node / K3S.lstrip("/") / "config.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
    )
    advice = ""
    for line in lines:
        argv = shlex.split(line)
        if argv[:2] == ["gpu-env-hook", "install"]:
            extra = ["--root", str(node), "--python", PYTHON]
            if "--nri" in argv:
                extra += ["--nri-python", PYTHON]
                if "containerd" in argv:
                    build = containerd2()
                    if build is None:
                        pytest.skip("needs GPU_ENV_HOOK_CONTAINERD2 (containerd 2.x: install --nri asks it)")
                    (node / "usr/local/bin").mkdir(parents=True, exist_ok=True)
                    shutil.copy(build / "containerd", node / "usr/local/bin/containerd")
            done = subprocess.run(
                [PYTHON, "-I", "-m", "hook", *argv[1:], *extra],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            advice += "\n".join(out for out in done.stdout.splitlines() if out.startswith("next: "))
        elif argv[0] == "systemctl":
            verb, unit = argv[1], argv[-1]
            assert line in advice or f"{verb} {unit}" in advice, (line, advice)
        elif argv[:2] == ["containerd", "--version"]:
            build = containerd2()
            assert build is not None
            version = subprocess.run(
                [str(build / "containerd"), "--version"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            assert version.stdout.startswith("containerd ")
        else:
            engine = " ".join(argv[:2])
            assert engine in ENGINE_RUNS, line
            test = (REPO / ENGINE_RUNS[engine]).read_text(encoding="utf-8")
            assert "NVIDIA_ENV_FROM_FILE" in line
            assert all(
                f'"{flag}"' in test or f"'{flag}'" in test for flag in argv[2:4] if flag.startswith("--")
            )
    assert advice, "the block has no install line"
    steps = re.findall(r"systemctl [a-z-]+ [\w-]+(?: && systemctl enable --now [\w-]+)?", advice)
    assert [step for step in steps if not any(step in line for line in lines)] == []  # every step shown


def test_install_synopsis_names_only_what_the_commands_take() -> None:
    """install.md's synopsis: every option it shows is one install/uninstall takes, every engine one
    --engine accepts."""
    text = block("docs/install.md", "Installing on a node: podman, CRI-O, containerd, Docker, Kubernetes")
    for line in commands(text):
        command = line.split()[1]
        shown = subprocess.run(
            [PYTHON, "-I", "-m", "hook", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for option in re.findall(r"--[a-z-]+", line):
            assert option in shown or option == "--engine", (command, option)
        for engine in re.findall(r"--engine ([a-z|]+)", line)[0].split("|") if "--engine" in line else []:
            assert engine in shown or engine in ("podman", "crio", "containerd", "docker", "auto")


def test_hook_wrapper_is_what_install_writes(tmp_path: Path) -> None:
    """install.md's hook wrapper is the file install writes for --python /usr/bin/python3, the launch code
    aside (the block names it in angle brackets)."""
    done = subprocess.run(
        [PYTHON, "-I", "-m", "hook", "install", "--engine", "podman", "--root", str(tmp_path),
         "--python", "/usr/bin/python3"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = (tmp_path / paths.HOOK_WRAPPER.lstrip("/")).read_text()
    written = "\n".join(line for line in written.splitlines() if not line.startswith("# ")) + "\n"
    written = written.replace("#\n", "")
    written = re.sub(r"-c '.*?' \"\$@\"", "-c '<launch>' \"$@\"", written, flags=re.DOTALL)
    shown = block("docs/install.md", "The tree's own interpreter (`--python tree`)", 3)
    shown = re.sub(r"-c '<launch code: [^>]*>'", "-c '<launch>'", shown)
    assert shown == written


def test_loader_form_is_what_install_python_tree_writes(tmp_path: Path) -> None:
    """The loader form install.md and the Kubernetes README show is how the files install --python tree
    writes start the tree's interpreter."""
    done = subprocess.run(
        [PYTHON, "-I", "-m", "hook", "install", "--engine", "podman", "--root", str(tmp_path), "--python", "tree"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    wrapper = " ".join((tmp_path / paths.HOOK_WRAPPER.lstrip("/")).read_text().split())
    for document, heading, index in (
        ("docs/install.md", "The tree's own interpreter (`--python tree`)", 2),
        ("packaging/kubernetes/README.md", "The node needs no Python", 1),
    ):
        shown = " ".join(block(document, heading, index).split())
        assert shown.endswith(" ..."), document
        interpreter = Path(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}").name
        shown = shown.removesuffix(" ...").replace("python3.11", interpreter)
        assert shown in wrapper, (document, wrapper)


def test_containerd_block_is_what_install_appends(tmp_path: Path) -> None:
    """install.md's marked block is what install appends to a version 2 config whose runc has SystemdCgroup."""
    config = tmp_path / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    before = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
    )
    config.write_text(before)
    done = subprocess.run(
        [PYTHON, "-I", "-m", "hook", "install", "--engine", "containerd", "--root", str(tmp_path), "--python", PYTHON],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = block(
        "docs/install.md",
        "What install writes: a drop-in where containerd merges per key, else a marked block",
    )
    from hook import __version__ as version

    assert config.read_text() == before + "\n" + shown.replace(
        "gpu-env-hook 0.1.0;", f"gpu-env-hook {version};"
    )


@pytest.mark.skipif(containerd2() is None, reason="needs GPU_ENV_HOOK_CONTAINERD2 (containerd 2.x)")
def test_nri_switch_on_fragment_is_what_install_writes(tmp_path: Path) -> None:
    """nri.md's fragment switching NRI on is what install --nri writes in its drop-in on a containerd 2.x
    whose config switches NRI off (version 3, conf.d imported)."""
    node = tmp_path
    (node / "etc/containerd/conf.d").mkdir(parents=True)
    (node / "etc/containerd/config.toml").write_text(
        "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n"
        "[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n"
    )
    (node / "usr/local/bin").mkdir(parents=True)
    build = containerd2()
    assert build is not None
    shutil.copy(build / "containerd", node / "usr/local/bin/containerd")
    done = subprocess.run(
        [PYTHON, "-I", "-m", "hook", "install", "--engine", "containerd", "--nri", "--root", str(node),
         "--python", PYTHON, "--nri-python", PYTHON],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import tomllib

    shown = tomllib.loads(block("docs/nri.md", "On a node without Kubernetes", 2))
    written = tomllib.loads((node / "etc/containerd/conf.d/gpu-env-hook.toml").read_text())
    assert written["version"] == shown["version"]
    assert written["plugins"]["io.containerd.nri.v1.nri"] == shown["plugins"]["io.containerd.nri.v1.nri"]


# --- the NRI plugin's own lines -------------------------------------------------------------------------------


@ROOT_AND_UNSHARE
def test_nri_plugin_lines_run_as_written(tmp_path: Path) -> None:
    """nri.md's two plugin lines, each started as written on a node with the config file and no runtime
    serving NRI: it says on stdout it cannot connect to /var/run/nri/nri.sock and retries; TERM stops it,
    exit 0."""
    for index, line in enumerate(commands(block("docs/nri.md", "Running it"))):
        log = tmp_path / f"plugin{index}.log"
        script = NODE_CONFIG + f"exec {line} >{log}"  # it logs on stdout
        scratch = tmp_path / f"run{index}"
        scratch.mkdir()
        with subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "bash", "-c", namespace_setup(scratch) + script],
            env={"PATH": NODE_PATH, "LANG": "C.UTF-8"},
            stdout=subprocess.PIPE, text=True,
        ) as plugin:  # fmt: skip
            try:
                deadline = time.monotonic() + 30
                while "retrying" not in log.read_text() if log.exists() else True:
                    assert plugin.poll() is None, log.read_text()
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
                plugin.send_signal(signal.SIGTERM)
                assert plugin.wait(timeout=10) == 0
            finally:
                if plugin.poll() is None:
                    plugin.kill()
                    plugin.wait()
        text = log.read_text()
        assert f"cannot connect to {paths.NRI_SOCKET}" in text
        assert text.splitlines()[-1] == "gpu-env-hook nri: stopped"


# --- Kubernetes ---------------------------------------------------------------------------------------------


def manifests() -> dict[str, list[dict[str, Any]]]:
    """Each manifest's documents."""
    return {
        path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for path in sorted(KUBERNETES.glob("*.yaml"))
    }


def daemonsets() -> dict[str, dict[str, Any]]:
    """The DaemonSets of the manifests, by name."""
    return {
        doc["metadata"]["name"]: doc
        for docs in manifests().values()
        for doc in docs
        if doc["kind"] == "DaemonSet"
    }


def kubectl_lines() -> list[tuple[str, str]]:
    """Every kubectl line of the deployment documents' sh blocks, with the block's id."""
    found = []
    for entry in all_blocks():
        if entry.language == "sh":
            found += [(entry.id, line) for line in commands(entry.text) if line.startswith("kubectl ")]
    return found


def test_kubectl_lines_name_what_the_manifests_define() -> None:
    """Each kubectl line names files that exist, the manifests' namespace, their DaemonSets and those
    DaemonSets' containers; a command it runs in a pod is on the image's PATH, and a --root it gives is
    where that pod sees the node's /; an image it starts is the manifests' image."""
    sets = daemonsets()
    namespaces = {doc["metadata"]["namespace"] for doc in sets.values()}
    images = {
        container["image"]
        for doc in sets.values()
        for container in [*doc["spec"]["template"]["spec"].get("initContainers", []),
                          *doc["spec"]["template"]["spec"]["containers"]]
    }  # fmt: skip
    containerfile = (KUBERNETES / "Containerfile").read_text()
    lines = kubectl_lines()
    assert len(lines) >= 8
    for where, line in lines:
        argv = shlex.split(line)
        words, _, inside = (
            (argv, None, [])
            if "--" not in argv
            else (argv[: argv.index("--")], None, argv[argv.index("--") + 1 :])
        )
        for index, word in enumerate(words):
            if word == "-f":
                assert (REPO / words[index + 1]).is_file(), (where, line)
            if word == "-n":
                assert words[index + 1] in namespaces, (where, line)
            if word.startswith("--image="):
                assert word.removeprefix("--image=") in images, (where, line)
        daemonset = next((word.removeprefix("ds/") for word in words if word.startswith("ds/")), None)
        if daemonset is not None:
            assert daemonset in sets, (where, line)
            pod = sets[daemonset]["spec"]["template"]["spec"]
            containers = {container["name"]: container for container in pod["containers"]}
            name = words[words.index("-c") + 1] if "-c" in words else next(iter(containers))
            assert name in containers, (where, line)
            if inside:
                assert inside[0] == "gpu-env-hook"
                assert "/usr/local/lib/gpu-env-hook/bin" in containerfile
                if "--root" in inside:
                    root = inside[inside.index("--root") + 1]
                    volumes = {volume["name"]: volume for volume in pod["volumes"]}
                    mounted = {
                        mount["mountPath"]: volumes[mount["name"]].get("hostPath", {}).get("path")
                        for mount in containers[name]["volumeMounts"]
                    }
                    assert mounted.get(root) == "/", (where, line)
        if words[1] == "debug":
            assert any(word.startswith("node/") for word in words)
            assert "--profile=sysadmin" in words
            assert inside[:1] == ["gpu-env-hook"]
            assert inside[inside.index("--root") + 1] == "/host"


@ROOT_AND_UNSHARE
def test_doctor_in_the_pod_runs_on_an_installed_node(tmp_path: Path) -> None:
    """The command the README runs in a pod (doctor --root /host) on a node root the DaemonSet's install
    wrote (--engine containerd --python tree, as the pod runs it): it runs, and reports what install wrote
    as intact."""
    node = tmp_path / "node"
    node.mkdir()
    done = subprocess.run(
        [PYTHON, "-I", "-m", "hook", "install", "--engine", "containerd", "--root", str(node), "--python", "tree"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ran = []
    for where, line in kubectl_lines():
        argv = shlex.split(line)
        if "doctor" not in argv:
            continue
        inside = argv[argv.index("--") + 1 :]
        inside[inside.index("--root") + 1] = str(node)
        doctor = subprocess.run(
            [PYTHON, "-I", "-m", "hook", *inside[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert doctor.stderr == "", (where, doctor.stderr)
        lines = doctor.stdout.splitlines()
        assert any(out.startswith("✓  installed for") and "containerd" in out for out in lines), doctor.stdout
        assert any(out.startswith("✓  env-file guard") for out in lines), doctor.stdout
        assert any(out.startswith("✓  runtime tree") for out in lines), doctor.stdout
        ran.append(where)
    assert len(ran) == 2


@ROOT_AND_UNSHARE
def test_device_plugin_steps_run_as_written_on_an_installed_node(tmp_path: Path) -> None:
    """The Kubernetes README's device-plugin steps (Allocate's path, PreStartContainer's write), run in
    order on a node where install ran, make a file the hook's checks accept for that pod."""
    script = (
        "gpu-env-hook install --engine containerd --python tree >/dev/null\n"
        + block("packaging/kubernetes/README.md", "With a GPU-sharing device plugin", 2)
        + block("packaging/kubernetes/README.md", "With a GPU-sharing device plugin", 3)
        + 'gpu-env-hook env-file check "$path" --pod-uid "$POD_UID" --container "$CONTAINER_NAME"\n'
    )
    uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    done = in_namespace(tmp_path, script, {"POD_UID": uid, "CONTAINER_NAME": "main"})
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert "✗" not in done.stdout
    assert "binding" in done.stdout


def test_gpu_pod_snippet_names_the_runtime_class() -> None:
    """The GPU pod's runtimeClassName is runtimeclass.yaml's RuntimeClass, whose handler install writes."""
    snippet = yaml.safe_load(block("packaging/kubernetes/README.md", "With a GPU-sharing device plugin", 4))
    (runtime_class,) = manifests()["runtimeclass.yaml"]
    assert snippet["spec"]["runtimeClassName"] == runtime_class["metadata"]["name"]
    assert runtime_class["handler"] == paths.RUNTIME_HANDLER


def test_image_build_line_is_what_the_image_test_runs() -> None:
    """The build line is `make image` with IMAGE set, as the image test runs it; the pushed image is the
    one built and the one the manifests name."""
    lines = commands(block("packaging/kubernetes/README.md", "Build the image and push it to your registry"))
    build, push = lines
    image = build.split()[0].removeprefix("IMAGE=")
    assert build == f"IMAGE={image} make image"
    assert push == f"podman push {image}"
    test = (REPO / "tests/integration/test_daemonset_image.py").read_text(encoding="utf-8")
    assert '["make", "-C", str(REPO), "image"]' in test
    assert '{"IMAGE": IMAGE}' in test
    for doc in daemonsets().values():
        pod = doc["spec"]["template"]["spec"]
        assert {c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]} == {image}
