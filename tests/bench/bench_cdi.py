"""Benchmark: ``create`` through the shim in CDI mode against plain ``runc create`` (``make bench``).

The shim runs as engines run it after ``gpu-env-hook install`` (``installed.scratch_install``), with
``[gpu-env] device-mode = "cdi"``: for each create it reads the env file (``NVIDIA_VISIBLE_DEVICES=
nvidia.com/gpu=0``), loads every spec in the spec directory (one spec shaped like ``nvidia-ctk cdi generate``
output, over character devices made with mknod), applies the device's edits and execs runc. The same bundle,
unedited, is created by runc itself; the figure is the median of the per-pair ratios, reported without a
target (the container's creation end to end). Two spec encodings: JSON (the lean path, no parser import) and
YAML (PyYAML imported for it).

Needs root (runc creates real containers; mknod).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench_hook import bench_dir, config_text
from bench_shim import create_through_shim, make_bundle
from installed import Installed, enter_namespace, scratch_install
from timing import Command, Comparison, compare, format_header, format_row

RUNC = shutil.which("runc") or "/usr/sbin/runc"
GPUS = 8


def make_node(workdir: Path) -> Path:
    """Character devices nvidia0..7 and nvidiactl (195:*), and library files; return the node directory."""
    node = workdir / "node"
    (node / "dev").mkdir(parents=True)
    (node / "lib").mkdir()
    for index in range(GPUS):
        os.mknod(node / "dev" / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(195, index))
    os.mknod(node / "dev" / "nvidiactl", 0o666 | stat.S_IFCHR, os.makedev(195, 255))
    for name in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"):
        (node / "lib" / name).write_text("not a library\n")
    return node


def nvidia_spec(node: Path) -> dict[str, object]:
    """A spec shaped like NVIDIA's: common env, library mounts, a createContainer hook, a node per GPU."""
    libs = sorted((node / "lib").iterdir())
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {"name": str(i), "containerEdits": {"deviceNodes": [
                {"path": f"/dev/nvidia{i}", "hostPath": str(node / "dev" / f"nvidia{i}")}]}}
            for i in range(GPUS)
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": str(node / "dev" / "nvidiactl")}],
            "mounts": [
                {"hostPath": str(lib), "containerPath": f"/usr/lib/x86_64-linux-gnu/{lib.name}",
                 "options": ["ro", "nosuid", "nodev", "bind"]}
                for lib in libs
            ],
            "hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true", "update-ldcache"]}],
        },
    }  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20, help="timed runs of each side per case")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Time both encodings; print one line each."""
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench_cdi: SKIP (needs root: runc creates real containers, mknod)")
        return 0
    enter_namespace()
    results: list[Comparison] = []
    with bench_dir() as workdir:
        node = make_node(workdir)
        env_dir = workdir / "nvidia-env"
        env_dir.mkdir(mode=0o755)
        env_file = env_dir / "cdi.env"
        env_file.write_text("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0\nUSER_ENV=hello\n", encoding="utf-8")
        env_file.chmod(0o644)
        spec_dirs = {"json": workdir / "cdi-json", "yaml": workdir / "cdi-yaml"}
        spec = nvidia_spec(node)
        spec_dirs["json"].mkdir()
        (spec_dirs["json"] / "nvidia.json").write_text(json.dumps(spec, indent=2))
        spec_dirs["yaml"].mkdir()
        import yaml

        (spec_dirs["yaml"] / "nvidia.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        state_root = workdir / "runc-root"
        runc = [RUNC, "--root", str(state_root)]
        engine_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        print(f"runtime:  {' '.join(runc)}")
        print(f"judged:   median of per-pair ratios shim / runtime over {args.runs} pairs (no target)\n")
        print(format_header())
        for encoding, directory in spec_dirs.items():
            text = config_text(cli="/bin/true", env_dir=env_dir)
            text += f'\n[nvidia-container-runtime]\nruntimes = ["{RUNC}"]\n'
            text += f'\n[gpu-env]\ndevice-mode = "cdi"\n\n[gpu-env.cdi]\nspec-dirs = ["{directory}"]\n'
            (workdir / encoding).mkdir()
            installed = scratch_install(workdir / encoding, text, runtime=RUNC)
            bundle, pristine = make_bundle(
                workdir, f"bundle-{encoding}", ["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
            )
            container = f"bench-cdi-{encoding}"
            call = ["--root", str(state_root), "create", "--bundle", str(bundle), container]

            def reset(bundle: Path = bundle, pristine: bytes = pristine, container: str = container) -> None:
                subprocess.run([*runc, "delete", "--force", container], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # fmt: skip
                (bundle / "config.json").write_bytes(pristine)

            check_create(installed, call, bundle, reset, engine_env)
            shim = Command(argv=[installed.runtime_wrapper, *call], env=engine_env, prepare=reset)
            alone = Command(argv=[RUNC, *call], env=engine_env, prepare=reset)
            name = f"shim create, CDI device ({encoding} spec) vs runc create"
            result = compare(name, shim, alone, runs=args.runs, warmup=1, target=None)
            results.append(result)
            print(format_row(result), flush=True)
            reset()
    return 0


def check_create(
    installed: Installed, call: list[str], bundle: Path, reset: Callable[[], None], env: dict[str, str]
) -> None:
    """Create once through the shim: config.json must carry the device node, the mounts and void."""
    reset()
    spec = create_through_shim(installed, call, bundle, env, prog="bench_cdi")
    devices = [device["path"] for device in spec.get("linux", {}).get("devices", [])]
    if "/dev/nvidia0" not in devices or "NVIDIA_VISIBLE_DEVICES=void" not in spec["process"]["env"]:
        sys.exit("bench_cdi: the shim did not apply the CDI device's edits")
    reset()


if __name__ == "__main__":
    sys.exit(main())
