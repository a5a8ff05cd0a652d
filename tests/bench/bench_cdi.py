"""Benchmark: ``create`` through the shim in CDI mode against plain ``runc create``, and (optionally) a
container's whole life through the shim against NVIDIA's own runtime in CDI mode (``make bench``).

The shim runs as engines run it after ``gpu-env-hook install`` (``installed.scratch_install``), with
``[gpu-env] device-mode = "cdi"``: for each create it reads the env file (``NVIDIA_VISIBLE_DEVICES=
nvidia.com/gpu=0``), loads every spec in the spec directory (one spec shaped like ``nvidia-ctk cdi generate``
output, over character devices made with mknod), applies the device's edits and execs runc. The same bundle,
unedited, is created by runc itself; the figure is the median of the per-pair ratios, reported without a
target (the container's creation end to end). Two spec encodings: JSON (the lean path, no parser import) and
YAML, with the spec cache warm (the decoded spec read back as JSON, no YAML parser) and cold (the cache
removed before each create: PyYAML imported, the spec decoded, the entry written).

Against NVIDIA's runtime: set ``GPU_ENV_HOOK_NVIDIA_RUNTIME`` to an ``nvidia-container-runtime`` binary
(skipped, saying so, when unset). Both runtimes get the same bundle (``NVIDIA_VISIBLE_DEVICES=
nvidia.com/gpu=0`` in config.json, no env file) and the same spec directory; NVIDIA's runs in ``mode =
"cdi"`` from a config.toml named by ``NVIDIA_CTK_CONFIG_FILE_PATH`` (its own override; /etc is not touched),
with runc as its low-level runtime. Each side's run is ``create`` + ``kill`` + ``delete`` through that
runtime; before timing, one create by each must leave ``/dev/nvidia0`` in config.json and as a character
device 195:0 in the created container. Judged: median of the paired ratios ours / NVIDIA's, target <= 1.15x
for the YAML spec with the cache warm; JSON and the cold cache are reported.

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
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_hook import bench_dir, config_text
from bench_shim import create_through_shim, make_bundle
from installed import BENCH_PYTHON, Installed, base_interpreter, enter_namespace, scratch_install
from timing import Command, Comparison, compare, format_header, format_row

from hook.cdi import speccache

RUNC = shutil.which("runc") or "/usr/sbin/runc"
GPUS = 8
NVIDIA_RUNTIME_VAR = "GPU_ENV_HOOK_NVIDIA_RUNTIME"
NVIDIA_TARGET = 1.15
ENGINE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
# (encoding, cache cold): every case of both comparisons.
CASES = (("json", False), ("yaml", False), ("yaml", True))


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
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    return parser.parse_args(argv)


def case_name(encoding: str, cold: bool) -> str:
    """``json spec`` / ``yaml spec, cache warm`` / ``yaml spec, cache cold``."""
    return f"{encoding} spec" + ("" if encoding == "json" else ", cache cold" if cold else ", cache warm")


def write_specs(workdir: Path, node: Path) -> dict[str, Path]:
    """The NVIDIA-shaped spec as JSON and as YAML, each alone in its directory; return the directories."""
    import yaml

    spec = nvidia_spec(node)
    directories = {"json": workdir / "cdi-json", "yaml": workdir / "cdi-yaml"}
    for directory in directories.values():
        directory.mkdir()
    (directories["json"] / "nvidia.json").write_text(json.dumps(spec, indent=2))
    (directories["yaml"] / "nvidia.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    # The cache stores only a spec whose ctime is SETTLE_NS before its read (a write in the same tick
    # after the read would keep its identity): let the specs settle, as a node's have.
    time.sleep(speccache.SETTLE_NS / 1e9)
    return directories


def main(argv: list[str] | None = None) -> int:
    """Time each case against runc, then against NVIDIA's runtime when given; print one line each."""
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
        spec_dirs = write_specs(workdir, node)
        state_root = workdir / "runc-root"
        installs: dict[str, Installed] = {}
        for encoding, directory in spec_dirs.items():
            text = config_text(cli="/bin/true", env_dir=env_dir)
            text += f'\n[nvidia-container-runtime]\nruntimes = ["{RUNC}"]\n'
            text += f'\n[gpu-env]\ndevice-mode = "cdi"\n\n[gpu-env.cdi]\nspec-dirs = ["{directory}"]\n'
            text += f'spec-cache = "{spec_cache(workdir, encoding)}"\n'
            (workdir / encoding).mkdir()
            installs[encoding] = scratch_install(workdir / encoding, text, runtime=RUNC)
        print(f"python:   a copy of {base_interpreter()} ({BENCH_PYTHON} picks another)")
        print(f"runtime:  {RUNC} --root {state_root}")
        print(f"judged:   median of per-pair ratios shim / runtime over {args.runs} pairs (no target)\n")
        print(format_header())
        for encoding, cold in CASES:
            bundle, pristine = make_bundle(
                workdir, f"bundle-{encoding}-{cold}", ["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
            )
            container = f"bench-cdi-{encoding}-{workdir.name}"  # unique per run: its cgroup too
            call = ["--root", str(state_root), "create", "--bundle", str(bundle), container]
            reset = resetter(
                bundle, pristine, state_root, container, spec_cache(workdir, encoding) if cold else None
            )
            try:
                check_create(installs[encoding], call, bundle, reset, ENGINE_ENV)
                check_cache(workdir, encoding, spec_dirs[encoding], cold=cold)
                shim = Command(
                    argv=[installs[encoding].runtime_wrapper, *call], env=ENGINE_ENV, prepare=reset
                )
                alone = Command(argv=[RUNC, *call], env=ENGINE_ENV, prepare=reset)
                name = f"shim create, CDI, {case_name(encoding, cold)} vs runc"
                result = compare(name, shim, alone, runs=args.runs, warmup=1, target=None)
            finally:
                reset()  # no container left behind, even when a check or a run failed
            results.append(result)
            print(format_row(result), flush=True)
        results += compare_with_nvidia(args, workdir, spec_dirs, installs, state_root)
    failed = [result.name for result in results if not result.passed]
    print(f"\nFAIL: over target: {'; '.join(failed)}" if failed else "")
    return 1 if failed and not args.no_fail else 0


def spec_cache(workdir: Path, encoding: str) -> Path:
    """The scratch spec cache of one encoding's install (never the host's /run)."""
    return workdir / encoding / "spec-cache"


def resetter(
    bundle: Path, pristine: bytes, state_root: Path, container: str, cache: Path | None
) -> Callable[[], None]:
    """Before each create: no container of that name, config.json as made, and (``cache``) no spec cache."""

    def reset() -> None:
        subprocess.run([RUNC, "--root", str(state_root), "delete", "--force", container],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)  # fmt: skip
        (bundle / "config.json").write_bytes(pristine)
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)

    return reset


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


def check_cache(workdir: Path, encoding: str, directory: Path, *, cold: bool) -> None:
    """The YAML spec's cache entry is there after a create (for the cold case, the reset removes it)."""
    if encoding != "yaml":
        return
    entry = spec_cache(workdir, encoding) / str(speccache.entry_name(str(directory / "nvidia.yaml")))
    if entry.is_file() == cold:
        sys.exit(f"bench_cdi: the spec cache entry is {'there' if cold else 'missing'} ({entry})")


# --- against NVIDIA's runtime ----------------------------------------------------------------------------


def nvidia_config(path: Path, spec_dir: Path) -> Path:
    """NVIDIA's config.toml: CDI mode over ``spec_dir``, runc as the low-level runtime."""
    path.write_text(
        f'[nvidia-container-runtime]\nmode = "cdi"\nruntimes = ["{RUNC}"]\n\n'
        f'[nvidia-container-runtime.modes.cdi]\ndefault-kind = "nvidia.com/gpu"\nspec-dirs = ["{spec_dir}"]\n'
    )
    return path


def lifecycle(
    runtime: str,
    state_root: Path,
    bundle: Path,
    container: str,
    env: dict[str, str],
    reset: Callable[[], None],
) -> list[Command]:
    """A container's life through ``runtime``: create (after ``reset``), kill, delete (once the container
    has stopped, as an engine deletes it after its exit; the wait is not timed)."""
    root = ["--root", str(state_root)]

    def stopped() -> None:
        for _ in range(500):
            state = subprocess.run([RUNC, *root, "state", container], capture_output=True, check=False)
            if state.returncode != 0 or json.loads(state.stdout)["status"] == "stopped":
                return
            time.sleep(0.01)

    return [
        Command(argv=[runtime, *root, "create", "--bundle", str(bundle), container], env=env, prepare=reset),
        Command(argv=[runtime, *root, "kill", container, "KILL"], env=env),
        Command(argv=[runtime, *root, "delete", container], env=env, prepare=stopped),
    ]


def check_device(steps: list[Command], bundle: Path, state_root: Path, container: str, who: str) -> None:
    """Run ``steps`` once, checking after the create that config.json names /dev/nvidia0 and that the created
    container has it as the character device 195:0."""
    create, *rest = steps
    if create.prepare is not None:
        create.prepare()
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: the container's init keeps it open
        proc = subprocess.run(create.argv, env=create.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=err, check=False)  # fmt: skip
        err.seek(0)
        message = err.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        sys.exit(f"bench_cdi: create through {who} failed: {message}")
    spec = json.loads((bundle / "config.json").read_text())
    devices = [device["path"] for device in spec.get("linux", {}).get("devices", [])]
    state = json.loads(subprocess.run([RUNC, "--root", str(state_root), "state", container],
                                      capture_output=True, check=True).stdout)  # fmt: skip
    found = Path(f"/proc/{state['pid']}/root/dev/nvidia0").stat()
    if (
        "/dev/nvidia0" not in devices
        or not stat.S_ISCHR(found.st_mode)
        or found.st_rdev != os.makedev(195, 0)
    ):
        sys.exit(f"bench_cdi: {who} did not give the container /dev/nvidia0")
    for step in rest:
        if step.prepare is not None:
            step.prepare()
        subprocess.run(step.argv, env=step.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)  # fmt: skip


def compare_with_nvidia(
    args: argparse.Namespace,
    workdir: Path,
    spec_dirs: dict[str, Path],
    installs: dict[str, Installed],
    state_root: Path,
) -> list[Comparison]:
    """Each case's create + kill + delete through the shim against the same through NVIDIA's runtime."""
    nvidia = os.environ.get(NVIDIA_RUNTIME_VAR, "")
    if not nvidia:
        print(f"\nvs NVIDIA's runtime: SKIP (set {NVIDIA_RUNTIME_VAR}=/path/to/nvidia-container-runtime)")
        return []
    version = subprocess.run([nvidia, "--version"], capture_output=True, text=True, check=False).stdout
    print(f"\nvs NVIDIA's runtime: {nvidia} ({version.splitlines()[0] if version else 'version unknown'})")
    print(f"judged:   median of per-pair ratios ours / NVIDIA's over {args.runs} pairs of create + kill + "
          f"delete; target <= {NVIDIA_TARGET:.2f}x for the YAML spec with the cache warm\n")  # fmt: skip
    print(format_header())
    bundle, pristine = make_bundle(
        workdir, "bundle-vs-nvidia", ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"]
    )
    results = []
    names = {side: f"bench-cdi-{side}-{workdir.name}" for side in ("ours", "nvidia")}  # unique per run
    for encoding, cold in CASES:
        theirs_env = {**ENGINE_ENV, "NVIDIA_CTK_CONFIG_FILE_PATH": str(
            nvidia_config(workdir / f"nvidia-{encoding}.toml", spec_dirs[encoding]))}  # fmt: skip
        cache = spec_cache(workdir, encoding) if cold else None
        resets = {side: resetter(bundle, pristine, state_root, names[side], cache if side == "ours" else None)
                  for side in names}  # fmt: skip
        ours = lifecycle(installs[encoding].runtime_wrapper, state_root, bundle, names["ours"], ENGINE_ENV,
                         resets["ours"])  # fmt: skip
        theirs = lifecycle(nvidia, state_root, bundle, names["nvidia"], theirs_env, resets["nvidia"])
        try:
            check_device(ours, bundle, state_root, names["ours"], "the shim")
            check_cache(workdir, encoding, spec_dirs[encoding], cold=False)
            check_device(theirs, bundle, state_root, names["nvidia"], "NVIDIA's runtime")
            target = NVIDIA_TARGET if encoding == "yaml" and not cold else None
            name = f"CDI, {case_name(encoding, cold)}: ours vs NVIDIA's"
            result = compare(name, ours, theirs, runs=args.runs, warmup=1, target=target)
        finally:
            for reset in resets.values():
                reset()  # no container left behind, even when a check or a run failed
        results.append(result)
        print(format_row(result), flush=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
