"""Benchmark: the runtime shim ``gpu-env-runtime`` against the runtime alone (``make bench``).

The shim runs exactly as engines run it after ``gpu-env-hook install`` (``installed.scratch_install``: the
runtime wrapper install wrote into a scratch ``--root``, config.toml baked in naming runc as the runtime).
Each case times the shim and runc itself with the same arguments, alternating, and judges the median of the
per-pair ratios shim / runc:

* the commands that are not ``create``/``run`` — ``--version``, ``state``, ``kill`` (signal 0) and
  ``delete`` of a real (created, never started) busybox container — target <= 1.3: no Python there;
* ``create`` through the shim of a container that names an env file (merged into config.json, our prestart
  hook added and run, the cli being /bin/true) against plain ``runc create`` of the same bundle: the
  container's creation end to end, reported without a target;
* for reference, ``/bin/sh -c 'exec runc --version'`` against ``runc --version``: what any script in front
  of the runtime costs (the node's ``sh`` starting), the floor of the wrapper's own figure.

Needs root (runc creates real containers). ``delete`` and ``create`` get a fresh container (or none) before
each run, outside the timed part.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_hook import bench_dir, config_text
from installed import BENCH_PYTHON, Installed, base_interpreter, enter_namespace, scratch_install
from timing import Command, Comparison, compare, format_header, format_row

TARGET = 1.3
RUNC = shutil.which("runc") or "/usr/sbin/runc"
BUSYBOX = shutil.which("busybox") or "/bin/busybox"


@dataclass(frozen=True)
class Case:
    """One runtime call: its arguments (after the global flags) and the target."""

    name: str
    args: list[str]
    target: float | None = TARGET


def make_bundle(workdir: Path, name: str, env: list[str]) -> tuple[Path, bytes]:
    """A bundle with a busybox rootfs and ``runc spec``'s config.json (process env ``env``); its bytes."""
    bundle = workdir / name
    (bundle / "rootfs" / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, bundle / "rootfs" / "bin" / "busybox")
    subprocess.run([RUNC, "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["process"].update(terminal=False, args=["/bin/busybox", "sleep", "600"], env=env)
    raw = json.dumps(spec, indent=2).encode()
    (bundle / "config.json").write_bytes(raw)
    return bundle, raw


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each side per case")
    parser.add_argument("--warmup", type=int, default=3, help="untimed pairs per case first")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run every case and print one line each; non-zero if a target is missed."""
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench_shim: SKIP (needs root: runc creates real containers)")
        return 0
    enter_namespace()
    results: list[Comparison] = []
    with bench_dir() as workdir:
        env_dir = workdir / "nvidia-env"
        env_dir.mkdir(mode=0o755)
        env_file = env_dir / "bench.env"
        env_file.write_text("NVIDIA_VISIBLE_DEVICES=0,1\nUSER_ENV=hello\n", encoding="utf-8")
        env_file.chmod(0o644)
        text = config_text(cli="/bin/true", env_dir=env_dir)
        text += f'\n[nvidia-container-runtime]\nruntimes = ["{RUNC}"]\n'
        installed = scratch_install(workdir, text, runtime=RUNC)
        state_root = workdir / "runc-root"
        plain, _ = make_bundle(workdir, "bundle-plain", ["PATH=/bin"])
        with_file, pristine = make_bundle(
            workdir, "bundle-env-file", ["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"]
        )
        runc = [RUNC, "--root", str(state_root)]
        engine_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

        def runc_quiet(*call: str) -> None:
            # never a pipe: a created container's init keeps its stdio open, and a pipe would never end
            subprocess.run([*runc, *call], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)  # fmt: skip

        def fresh(container: str) -> Callable[[], None]:
            def prepare() -> None:
                runc_quiet("delete", "--force", container)
                runc_quiet("create", "--bundle", str(plain), container)

            return prepare

        def none(container: str, bundle: Path) -> Callable[[], None]:
            def prepare() -> None:
                runc_quiet("delete", "--force", container)
                (bundle / "config.json").write_bytes(pristine)

            return prepare

        fresh("bench-standing")()
        cases = [
            (Case("shim: --version", ["--version"]), None),
            (Case("shim: state", ["state", "bench-standing"]), None),
            (Case("shim: kill (signal 0)", ["kill", "bench-standing", "0"]), None),
            (Case("shim: delete", ["delete", "bench-delete"]), fresh("bench-delete")),
        ]
        create = Case("shim create, env file + hook vs runc create", [], target=None)
        print(f"shim:     {installed.runtime_wrapper} (the runtime wrapper install wrote)")
        print(f"python:   a copy of {base_interpreter()} ({BENCH_PYTHON} picks another)")
        print(f"runtime:  {' '.join(runc)}")
        print(f"judged:   median of per-pair ratios shim / runtime over {args.runs} pairs\n")
        print(format_header())
        for case, prepare in cases:
            global_flags = ["--root", str(state_root)] if case.args[0] != "--version" else []
            shim = Command(
                argv=[installed.runtime_wrapper, *global_flags, *case.args], env=engine_env, prepare=prepare
            )
            alone = Command(argv=[RUNC, *global_flags, *case.args], env=engine_env, prepare=prepare)
            result = compare(case.name, shim, alone, runs=args.runs, warmup=args.warmup, target=case.target)
            results.append(result)
            print(format_row(result), flush=True)
        # The floor of any script in front of the runtime: the node's /bin/sh doing nothing but exec it.
        sh_floor = Command(argv=["/bin/sh", "-c", 'exec "$0" --version', RUNC], env=engine_env)
        alone = Command(argv=[RUNC, "--version"], env=engine_env)
        reference = compare("reference: /bin/sh -c 'exec runc --version'", sh_floor, alone, runs=args.runs,
                            warmup=args.warmup, target=None)  # fmt: skip
        print(format_row(reference), flush=True)
        call = ["--root", str(state_root), "create", "--bundle", str(with_file), "bench-create"]
        check_create(installed, call, with_file, pristine, engine_env)
        shim = Command(
            argv=[installed.runtime_wrapper, *call], env=engine_env, prepare=none("bench-create", with_file)
        )
        alone = Command(argv=[RUNC, *call], env=engine_env, prepare=none("bench-create", with_file))
        result = compare(create.name, shim, alone, runs=max(10, args.runs // 2), warmup=1, target=None)
        results.append(result)
        print(format_row(result), flush=True)
        for container in ("bench-standing", "bench-delete", "bench-create"):
            runc_quiet("delete", "--force", container)
    failed = [result.name for result in results if not result.passed]
    print(f"\nFAIL: over target: {'; '.join(failed)}" if failed else "\nPASS: every case within its target")
    return 1 if failed and not args.no_fail else 0


def create_through_shim(
    installed: Installed, call: list[str], bundle: Path, env: dict[str, str], *, prog: str
) -> dict[str, Any]:
    """Run one create through the installed runtime wrapper; return the config.json it left (exit with the
    shim's message when the create fails)."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: the container's init keeps it open
        proc = subprocess.run([installed.runtime_wrapper, *call], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=err, check=False)  # fmt: skip
        err.seek(0)
        message = err.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        sys.exit(f"{prog}: create through the shim failed: {message}")
    spec: dict[str, Any] = json.loads((bundle / "config.json").read_text())
    return spec


def check_create(
    installed: Installed, call: list[str], bundle: Path, pristine: bytes, env: dict[str, str]
) -> None:
    """Create once through the shim: config.json must carry the file's variables and our hook."""
    (bundle / "config.json").write_bytes(pristine)
    spec = create_through_shim(installed, call, bundle, env, prog="bench")
    if "NVIDIA_VISIBLE_DEVICES=0,1" not in spec["process"]["env"] or not spec.get("hooks", {}).get(
        "prestart"
    ):
        sys.exit("bench: the shim did not merge the env file and add the hook")
    subprocess.run([RUNC, *call[:2], "delete", "--force", call[-1]], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
