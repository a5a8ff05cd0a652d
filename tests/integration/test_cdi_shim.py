"""CDI mode end to end: an env file selects a CDI device, and the container gets that device's edits.

Through the runtime shim in front of runc, and through podman's precreate hook: inside the container the
device node exists with the host node's major/minor, the library mount is there, the spec's variables are
set (NVIDIA_VISIBLE_DEVICES is ``void``), and the spec's createContainer hook ran (it writes a marker).
The node is a scratch directory: character devices made with mknod, scratch files as "libraries".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from busybox import make_runc_bundle, unique_id
from cdi_helpers import (
    GPU_MAJOR,
    SECRET,
    FakeNode,
    make_fake_node,
    nvidia_like_spec,
    write_secret_specs,
    write_spec,
)
from podman import import_busybox_image, podman
from runc_hooks import load_record, write_config

pytestmark = pytest.mark.integration

MakeEnvFile = Callable[..., Path]
IMAGE = "localhost/gpu-env-hook-busybox"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
PROBE = (
    f"stat -c 'node %n %t:%T %F' /dev/nvidia* ; cat {LIBDIR}/libcuda.so.1 ; "
    "env | grep -E '^(NVIDIA_VISIBLE|NVIDIA_CTK|USER_)' | sort"
)


class Setup:
    """A scratch node with a spec shaped like NVIDIA's, our config in CDI mode, and a runc state root."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.node: FakeNode = make_fake_node(tmp_path / "node")
        self.marker = tmp_path / "hook-ran"
        self.etc, self.run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
        spec = nvidia_like_spec(
            self.node, hook_path="/bin/sh", hook_args=["sh", "-c", f"echo ran >> {self.marker}"]
        )
        self.spec_path = write_spec(self.etc, "nvidia.yaml", spec)
        self.record = tmp_path / "cli-record.json"
        self.env_dir = tmp_path / "nvidia-env"
        self.config = write_config(tmp_path / "config.toml", record=self.record, env_dirs=[self.env_dir])
        with self.config.open("a") as fh:
            fh.write(
                '\n[gpu-env]\ndevice-mode = "cdi"\n\n[gpu-env.cdi]\n'
                f"spec-dirs = {json.dumps([str(self.etc), str(self.run)])}\n"
                f'spec-cache = "{tmp_path / "spec-cache"}"\n'
            )
        self.root = tmp_path / "runc-root"
        self.ids: list[str] = []

    def bundle(
        self,
        env_file: Path | None,
        name: str = "bundle",
        *,
        env: tuple[str, ...] = (),
        annotations: dict[str, str] | None = None,
    ) -> Path:
        """A busybox bundle that prints what it sees of the GPU (stat added to the applets)."""
        named = [f"NVIDIA_ENV_FROM_FILE={env_file}"] if env_file is not None else []
        bundle = make_runc_bundle(
            self.tmp / name,
            args=["sh", "-c", PROBE],
            env=["PATH=/bin", *named, *env],
            annotations=annotations,
        )
        stat = bundle / "rootfs" / "bin" / "stat"
        if not stat.exists():
            stat.symlink_to("busybox")
        return bundle

    def shim(self, *args: str, engine: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``gpu-env-runtime ARGS`` with our config (and the engine install --engine would name)."""
        env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(self.config)}
        if engine is not None:
            env["GPU_ENV_HOOK_ENGINE"] = engine
        return subprocess.run(
            [sys.executable, "-I", "-m", "hook.stages.shim", *args],
            env=env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def run_container(self, bundle: Path, engine: str | None = None) -> subprocess.CompletedProcess[str]:
        cid = unique_id("cdi-shim")
        self.ids.append(cid)
        return self.shim("--root", str(self.root), "run", "--bundle", str(bundle), cid, engine=engine)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    value = Setup(tmp_path)
    yield value
    for cid in value.ids:
        subprocess.run(
            ["runc", "--root", str(value.root), "delete", "--force", cid],
            capture_output=True,
            check=False,
            timeout=30,
        )


def expected_lines(index: int) -> list[str]:
    """What the probe prints for GPU ``index`` (stat prints major:minor in hex)."""
    return [
        f"node /dev/nvidia{index} {GPU_MAJOR:x}:{index:x} character special file",
        "not really libcuda.so.1",
        f"NVIDIA_CTK_LIBCUDA_DIR={LIBDIR}",
        "NVIDIA_VISIBLE_DEVICES=void",
        "USER_CUSTOM_ENV=hello",
    ]


@pytest.mark.parametrize(
    "request_value",
    [pytest.param("nvidia.com/gpu=1", id="cdi-name"), pytest.param("1", id="plain-id-default-kind")],
)
def test_runc_through_shim_gets_cdi_device(
    setup: Setup, make_env_file: MakeEnvFile, request_value: str
) -> None:
    """The env file's device arrives as CDI edits: node, mount, env, createContainer hook; no legacy cli."""
    env_file = make_env_file(f"NVIDIA_VISIBLE_DEVICES={request_value}\nUSER_CUSTOM_ENV=hello\n")
    bundle = setup.bundle(env_file)
    result = setup.run_container(bundle)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("node ")] == [
        f"node /dev/nvidia1 {GPU_MAJOR:x}:1 character special file",
        f"node /dev/nvidiactl {GPU_MAJOR:x}:{255:x} character special file",
    ]
    assert [line for line in lines if not line.startswith("node ")] == expected_lines(1)[1:]
    assert setup.marker.read_text() == "ran\n"
    assert load_record(setup.record) is None  # NVIDIA's hook and cli were never involved
    hooks = json.loads((bundle / "config.json").read_text()).get("hooks", {})
    assert "prestart" not in hooks


def test_unresolvable_device_refused(setup: Setup, make_env_file: MakeEnvFile) -> None:
    """A device no spec defines: one line naming the env file (not its content), nothing written or run."""
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=7\n")
    bundle = setup.bundle(env_file)
    before = (bundle / "config.json").read_bytes()
    result = setup.run_container(bundle)
    assert result.returncode == 1
    assert result.stderr == (
        f"gpu-env-runtime: env file '{env_file}': a device it requests is defined by no CDI spec in "
        f"{setup.etc}, {setup.run}\n"
    )
    assert (bundle / "config.json").read_bytes() == before
    assert not setup.marker.exists()


def test_podman_precreate_gets_cdi_device(setup: Setup, make_env_file: MakeEnvFile) -> None:
    """podman's precreate hook in CDI mode: the container sees the env file's CDI device and its edits."""
    import_busybox_image(IMAGE)
    hooks_dir = setup.tmp / "hooks.d"
    hooks_dir.mkdir()
    args = [sys.executable, "-I", "-m", "hook", "-config", str(setup.config), "precreate"]
    (hooks_dir / "precreate.json").write_text(
        json.dumps(
            {
                "version": "1.0.0",
                "hook": {"path": sys.executable, "args": args, "env": ["PATH=/usr/bin:/bin"]},
                "when": {"always": True},
                "stages": ["precreate"],
            }
        )
    )
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0\nUSER_CUSTOM_ENV=hello\n")
    name = unique_id("cdi-precreate")
    try:
        result = podman(
            "run",
            "--rm",
            "--name",
            name,
            "--hooks-dir",
            str(hooks_dir),
            "-e",
            f"NVIDIA_ENV_FROM_FILE={env_file}",
            IMAGE,
            "sh",
            "-c",
            PROBE.replace("stat -c", "busybox stat -c"),
            check=False,
        )
    finally:
        podman("rm", "-f", "--ignore", name, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"node /dev/nvidia0 {GPU_MAJOR:x}:0 character special file" in lines
    assert [line for line in lines if not line.startswith("node ")] == expected_lines(0)[1:]
    assert setup.marker.read_text() == "ran\n"


def test_producer_written_spec_used_by_podman_run(setup: Setup, tmp_path: Path) -> None:
    """A device plugin's per-allocation spec (``cdi alloc write``) in /var/run/cdi: ``podman run --device``
    with the allocation's name, no shim, no hook of ours: the container gets the real GPU's edits."""
    from cdi_podman import podman_with_cdi

    import_busybox_image(IMAGE)
    hook = [sys.executable, "-I", "-m", "hook", "-config", str(setup.config), "cdi", "alloc"]
    named = subprocess.run([*hook, "name", "slice-3", "slice-1"], capture_output=True, text=True, check=True)
    device = named.stdout.strip()
    written = subprocess.run(
        [
            *hook,
            "write",
            "--pod-uid",
            "pod-abc",
            "--id",
            "slice-1",
            "--id",
            "slice-3",
            "--device",
            "1",
            "--dir",
            str(setup.run),
            "USER_CUSTOM_ENV=hello",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert written.returncode == 0, written.stderr
    assert written.stdout.startswith(f"{device}\t{setup.run}/gpu-env.dev-alloc_")
    name = unique_id("cdi-alloc")
    try:
        result = podman_with_cdi(
            setup.etc,
            setup.run,
            tmp_path,
            "run",
            "--rm",
            "--name",
            name,
            "--device",
            device,
            IMAGE,
            "sh",
            "-c",
            PROBE.replace("stat -c", "busybox stat -c"),
            check=False,
        )
    finally:
        podman("rm", "-f", "--ignore", name, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"node /dev/nvidia1 {GPU_MAJOR:x}:1 character special file" in lines
    assert [line for line in lines if not line.startswith("node ")] == expected_lines(1)[1:]
    assert setup.marker.read_text() == "ran\n"


def test_bad_specs_harm_no_one_else(setup: Setup, make_env_file: MakeEnvFile) -> None:
    """Beside NVIDIA's spec, specs nested 100,000 deep (JSON, YAML) and an alias bomb are skipped with a
    warning each: the container still gets its device; a device only a bad spec could define is refused
    naming the skipped files, nothing written."""
    bad = [
        write_text(setup.etc / "deep.json", "[" * 100_000 + "]" * 100_000),
        write_text(setup.etc / "deep.yaml", "[" * 100_000 + "]" * 100_000),
        write_text(
            setup.etc / "bomb.yaml",
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            ),
        ),
    ]
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1\nUSER_CUSTOM_ENV=hello\n")
    result = setup.run_container(setup.bundle(env_file))
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if not line.startswith("node ")] == expected_lines(1)[
        1:
    ]
    reasons = {
        "bomb.yaml": "YAML aliases expand the document past 1048576 (its characters and nodes, counted as if every alias were written out)",
        "deep.json": "nested more than 64 levels deep",
        "deep.yaml": "nested more than 64 levels deep",
    }
    warnings = [line.split(' msg="', 1)[1] for line in result.stderr.splitlines()]
    assert warnings == [
        f'invalid CDI spec {setup.etc}/{name}: {reason}; skipped"' for name, reason in sorted(reasons.items())
    ]
    refused_file = make_env_file("NVIDIA_VISIBLE_DEVICES=other.com/gpu=0\n", name="other.env")
    bundle = setup.bundle(refused_file, name="refused")
    before = (bundle / "config.json").read_bytes()
    result = setup.run_container(bundle)
    assert result.returncode == 1
    skipped = ", ".join(f'"{path}"' for path in sorted(bad))
    assert result.stderr.splitlines()[-1] == (
        f"gpu-env-runtime: env file '{refused_file}': a device it requests is defined by no CDI spec in "
        f"{setup.etc}, {setup.run} (skipped specs: {skipped})"
    )
    assert (bundle / "config.json").read_bytes() == before


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("mode", "owner", "reason"),
    [
        pytest.param(0o666, 0, "must not be group- or world-writable (mode 0666)", id="mode-0666"),
        pytest.param(0o644, 1000, "must be owned by root (uid 0), is owned by uid 1000", id="uid-1000"),
    ],
)
def test_untrusted_spec_skipped(
    setup: Setup, make_env_file: MakeEnvFile, mode: int, owner: int, reason: str
) -> None:
    """A spec anyone but root could have written (its createContainer hook would run as root) is skipped
    with a warning: its device is refused, its hook never runs, NVIDIA's spec still serves."""
    loose_marker = setup.tmp / "loose-hook-ran"
    loose_spec = nvidia_like_spec(
        setup.node,
        kind="loose.com/gpu",
        hook_path="/bin/sh",
        hook_args=["sh", "-c", f"echo ran > {loose_marker}"],
    )
    loose = write_spec(setup.etc, "loose.json", loose_spec)
    loose.chmod(mode)
    os.chown(loose, owner, 0)
    result = setup.run_container(setup.bundle(make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1\n")))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        line
        for line in result.stderr.splitlines()
        if line.endswith(f'untrusted CDI spec {loose}: {reason}; skipped"')
    ]
    assert len(result.stderr.splitlines()) == 1
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=loose.com/gpu=0\n", name="loose.env")
    bundle = setup.bundle(env_file, name="loose")
    before = (bundle / "config.json").read_bytes()
    result = setup.run_container(bundle)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith(f'(skipped specs: "{loose}")')
    assert (bundle / "config.json").read_bytes() == before
    assert not loose_marker.exists()


VICTIM = {"io.kubernetes.cri.sandbox-uid": "pod-victim", "io.kubernetes.cri.container-name": "main"}
ATTACKER = {"io.kubernetes.cri.sandbox-uid": "pod-attacker", "io.kubernetes.cri.container-name": "main"}


def write_allocation(setup: Setup) -> str:
    """``cdi alloc write`` for pod-victim: GPU 1 and a secret; return the allocation's device name."""
    hook = [sys.executable, "-I", "-m", "hook", "-config", str(setup.config), "cdi", "alloc"]
    written = subprocess.run(
        [
            *hook,
            "write",
            "--pod-uid",
            "pod-victim",
            "--id",
            "slice-1",
            "--device",
            "1",
            "--dir",
            str(setup.run),
            "SECRET_TOKEN=victim-s3cret",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return written.stdout.split("\t")[0]


def test_allocation_only_for_its_own_pod(setup: Setup, make_env_file: MakeEnvFile) -> None:
    """Through the shim with real runc (containerd's pod annotations): the pod an allocation was written for
    gets its GPU and secret; another pod naming it -- in its image's env, or in its own pinned env file -- is
    refused in one line, config.json untouched, the secret never in a container."""
    device = write_allocation(setup)
    victim_file = make_env_file(
        f"GPU_ENV_HOOK_POD_UID=pod-victim\nNVIDIA_VISIBLE_DEVICES={device}\n", name="victim.env"
    )
    result = setup.run_container(setup.bundle(victim_file, "victim", annotations=VICTIM), engine="containerd")
    assert result.returncode == 0, result.stderr
    assert f"node /dev/nvidia1 {GPU_MAJOR:x}:1 character special file" in result.stdout.splitlines()

    probe = PROBE.replace("USER_", "USER_|SECRET_")
    image = setup.bundle(None, "image-env", env=(f"NVIDIA_VISIBLE_DEVICES={device}",), annotations=ATTACKER)
    own_file = make_env_file(
        f"GPU_ENV_HOOK_POD_UID=pod-attacker\nNVIDIA_VISIBLE_DEVICES={device}\n", name="attacker.env"
    )
    own = setup.bundle(own_file, "own-file", annotations=ATTACKER)
    for bundle in (image, own):
        config = json.loads((bundle / "config.json").read_text())
        config["process"]["args"] = ["sh", "-c", probe]
        (bundle / "config.json").write_text(json.dumps(config))
    cases = [
        (
            image,
            (
                f'gpu-env-runtime: CDI allocation "{device}" may be requested only by its pod\'s pinned env '
                "file, not by the image or the container's own environment"
            ),
        ),
        (
            own,
            (
                f"gpu-env-runtime: env file '{own_file}': a CDI allocation it requests is pinned to another "
                "pod (annotation io.kubernetes.cri.sandbox-uid differs)"
            ),
        ),
    ]
    for bundle, message in cases:
        before = (bundle / "config.json").read_bytes()
        result = setup.run_container(bundle, engine="containerd")
        assert (result.returncode, result.stderr) == (1, message + "\n")
        assert "victim-s3cret" not in result.stdout
        assert (bundle / "config.json").read_bytes() == before


@pytest.mark.parametrize("engine", ["podman", "docker", "none"])
def test_allocation_refused_without_pod_identity(
    setup: Setup, make_env_file: MakeEnvFile, engine: str
) -> None:
    """podman, Docker and none record no pod a tenant cannot choose: an allocation is refused there, even
    to a container whose annotations copy the right pod."""
    device = write_allocation(setup)
    env_file = make_env_file(f"NVIDIA_VISIBLE_DEVICES={device}\n")
    bundle = setup.bundle(env_file, annotations=VICTIM)
    before = (bundle / "config.json").read_bytes()
    result = setup.run_container(bundle, engine=engine)
    assert (result.returncode, result.stderr) == (
        1,
        (
            f'gpu-env-runtime: CDI allocation "{device}" may be requested only by its pod\'s pinned env file, '
            "not by the image or the container's own environment\n"
        ),
    )
    assert (bundle / "config.json").read_bytes() == before


def test_spec_content_never_in_the_shims_output(setup: Setup, make_env_file: MakeEnvFile) -> None:
    """Specs whose unknown field, device name, variable, hook name, kind, version or repeated key is a
    secret, two of them symlinks to root-only files that are no spec at all: each is skipped with one
    warning naming the file, the field and its position, never the content; the container still gets its
    device, and a device only they could define is refused naming the files. ``cdi validate``, which a
    person runs on a file they name, quotes what it refuses."""
    reasons = write_secret_specs(setup.etc, setup.tmp / "root-only")
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1\n")
    result = setup.run_container(setup.bundle(env_file))
    assert result.returncode == 0, result.stderr
    assert f"node /dev/nvidia1 {GPU_MAJOR:x}:1 character special file" in result.stdout.splitlines()
    warnings = [line.split(' msg="', 1)[1] for line in result.stderr.splitlines()]
    assert warnings == [
        f'invalid CDI spec {setup.etc}/{name}: {reason}; skipped"' for name, reason in reasons
    ]
    assert SECRET not in result.stderr

    refused_file = make_env_file("NVIDIA_VISIBLE_DEVICES=x.com/gpu=d\n", name="refused.env")
    bundle = setup.bundle(refused_file, name="refused")
    before = (bundle / "config.json").read_bytes()
    result = setup.run_container(bundle)
    skipped = ", ".join(f'"{setup.etc}/{name}"' for name, _ in reasons[:4])
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"gpu-env-runtime: env file '{refused_file}': a device it requests is defined by no CDI spec in "
        f"{setup.etc}, {setup.run} (skipped specs: {skipped} and {len(reasons) - 4} more)"
    )
    assert SECRET not in result.stderr
    assert (bundle / "config.json").read_bytes() == before

    validate = subprocess.run(
        [sys.executable, "-I", "-m", "hook", "cdi", "validate", str(setup.etc / "link-token.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (validate.returncode, validate.stdout) == (1, "")
    assert validate.stderr == (
        f"gpu-env-hook: invalid CDI spec {setup.etc}/link-token.json: the spec has unknown field "
        f'"{SECRET}-key"\n'
    )
