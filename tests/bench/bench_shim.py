"""Benchmark: what the runtime shim ``gpu-env-runtime`` adds to a runtime call (``make bench``).

For each case three processes run in turn, in a rotating order (shim, runtime alone, bare interpreter), so
that drift hits all alike: the shim exactly as ``gpu-env-hook install`` writes its wrapper (``sh`` ->
``env -i`` -> ``<python> -I -c "from hook.shim import main; ..."``), the runtime it execs run directly
with the same arguments, and ``<python> -I -c pass``. The judged figure is the median over rounds of
``(shim - runtime) / bare interpreter``; the target is 1.5 (the shim adds at most one and a half bare
interpreter starts).

Cases: ``--version`` and ``state`` of a missing container (passthrough: config.json is never read) against
runc itself, and ``create`` of a container that names no env file and asks for no GPU (config.json read,
not decoded) against a runtime that does nothing (``/bin/true``), so that runc's own create, which the shim
does not change, does not drown the shim's cost in noise. ``state`` of a missing container exits 1, so both
sides of that case run under ``sh -c '...; exit 0'`` (the same cost on both sides). A ``create`` that
merges an env file is timed for information (root only: the file must be owned by uid 0).

Like ``bench_hook.py`` it times a clean (non-editable) install by default: the editable finder in the
project's .venv imports pathlib and friends at every start and would hide the shim's own cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench_hook import bench_dir, build_spec, make_clean_install
from timing import Command, python_baseline, run_once

from hook.install import RUNTIME_ENTRY, RUNTIME_KEEP_ENV, build_wrapper

TARGET = 1.5
RUNC = shutil.which("runc") or "/usr/sbin/runc"
TRUE = "/bin/true"


@dataclass(frozen=True)
class Case:
    """One shim call: its arguments, the runtime the shim execs, whether it exits 1, the target."""

    name: str
    args: list[str]
    runtime: str
    target: float | None = TARGET
    fails: bool = False
    env_file: bool = False


@dataclass(frozen=True)
class Result:
    """Per-round timings (seconds) of the shim, the runtime alone and the bare interpreter."""

    case: Case
    shim: list[float]
    runtime: list[float]
    bare: list[float]

    @property
    def ratio(self) -> float:
        """Median over rounds of (shim - runtime) / bare interpreter: the judged figure."""
        return statistics.median(
            (s - r) / b for s, r, b in zip(self.shim, self.runtime, self.bare, strict=True)
        )

    @property
    def passed(self) -> bool:
        """Whether the judged figure meets the target (always True without one)."""
        return self.case.target is None or self.ratio <= self.case.target

    def row(self) -> str:
        """One printed line: medians, the overhead, the ratio and the verdict."""
        shim, runtime, bare = (statistics.median(t) * 1000 for t in (self.shim, self.runtime, self.bare))
        target = f"<={self.case.target:.1f}x" if self.case.target is not None else "-"
        verdict = "info" if self.case.target is None else "PASS" if self.passed else "FAIL"
        return (
            f"{self.case.name:<40} {shim:8.2f} {runtime:8.2f} {bare:8.2f} {shim - runtime:8.2f} "
            f"{self.ratio:6.2f}x {target:>7}  {verdict}"
        )


HEADER = (
    f"{'case':<40} {'shim ms':>8} {'rt ms':>8} {'bare ms':>8} {'+ms':>8} {'+/bare':>7} {'target':>7}  result"
)


def write_config(path: Path, *, runtime: str, env_dir: Path) -> Path:
    """config.toml naming the runtime the shim execs and the env-file directory."""
    path.write_text(
        f'[nvidia-container-runtime]\nruntimes = ["{runtime}"]\n\n'
        f'[env-file]\ndirectories = ["{env_dir}"]\n\n'
        '[nvidia-container-cli]\npath = "/bin/true"\n',
        encoding="utf-8",
    )
    return path


def write_runtime_wrapper(python: str, config: Path, name: str) -> Path:
    """The runtime wrapper ``gpu-env-hook install`` writes, with this case's config baked in."""
    path = Path(python).parent / name
    wrapper = build_wrapper(
        "gpu-env-runtime", RUNTIME_ENTRY, python=python, keep=RUNTIME_KEEP_ENV, config=str(config)
    )
    path.write_bytes(wrapper)
    path.chmod(0o755)
    return path


def tolerate_failure(argv: list[str]) -> list[str]:
    """Run ``argv`` under ``sh -c '"$@"; exit 0'`` so that its exit status 1 is not a benchmark failure."""
    return ["/bin/sh", "-c", '"$@"; exit 0', "sh", *argv]


def prepare_bundle(workdir: Path, env_file: Path | None) -> tuple[Path, Callable[[], None]]:
    """Write a bundle whose config.json names ``env_file`` (or nothing); return it and a restore callback."""
    bundle = workdir / ("bundle-env-file" if env_file else "bundle-plain")
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    env = ["PATH=/bin", "HOSTNAME=bench", "TERM=xterm", *(f"APP_SETTING_{n}=value-{n}" for n in range(16))]
    if env_file is not None:
        env.append(f"NVIDIA_ENV_FROM_FILE={env_file}")
    pristine = json.dumps(build_spec(env), indent=2).encode()
    spec = bundle / "config.json"

    def restore() -> None:
        spec.write_bytes(pristine)

    restore()
    return bundle, restore


def measure(case: Case, shim: Command, runtime: Command, bare: Command, *, runs: int, warmup: int) -> Result:
    """Run the three commands ``runs`` times each in rotating order, after ``warmup`` untimed rounds."""
    commands = (shim, runtime, bare)
    for _ in range(warmup):
        for command in commands:
            run_once(command)
    times: list[list[float]] = [[], [], []]
    for index in range(runs):
        for offset in range(3):
            which = (index + offset) % 3
            times[which].append(run_once(commands[which]))
    return Result(case, *times)


def check_create(wrapper: Path, bundle: Path, restore: Callable[[], None], *, changes: bool) -> None:
    """Run the create case once and fail loudly if config.json was (or was not) rewritten as claimed."""
    restore()
    before = (bundle / "config.json").read_bytes()
    subprocess.run([str(wrapper), "create", "--bundle", str(bundle), "bench"], check=True)
    changed = (bundle / "config.json").read_bytes() != before
    if changed != changes:
        raise SystemExit(f"bench: the shim {'left' if changes else 'rewrote'} {bundle}/config.json")
    restore()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=30, help="timed rounds per case")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds per case first")
    parser.add_argument(
        "--install", choices=("clean", "dev"), default="clean", help="time a clean install or this .venv"
    )
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run every case and print one line each; non-zero if a target is missed."""
    args = parse_args(argv)
    results: list[Result] = []
    with bench_dir() as workdir:
        python = make_clean_install(workdir) if args.install == "clean" else sys.executable
        bare = python_baseline(python)
        env_dir = workdir / "nvidia-env"
        env_dir.mkdir(mode=0o755)
        state_root = workdir / "runc-root"
        env_file = env_dir / "bench.env"
        env_file.write_text("NVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n", encoding="utf-8")
        env_file.chmod(0o644)
        cases = [
            Case("passthrough: --version", ["--version"], RUNC),
            Case(
                "passthrough: state of a missing container",
                ["--root", str(state_root), "state", "nope"],
                RUNC,
                fails=True,
            ),
            Case("create, no env file, no GPU (rt: /bin/true)", ["create", "--bundle", "{plain}", "c"], TRUE),
        ]
        if os.geteuid() == 0:
            cases.append(
                Case(
                    "create, env file merged + hook (rt: true)",
                    ["create", "--bundle", "{env}", "c"],
                    TRUE,
                    target=None,
                    env_file=True,
                )
            )
        plain, restore_plain = prepare_bundle(workdir, None)
        with_file, restore_file = prepare_bundle(workdir, env_file)
        print(f"install:  {args.install} ({python})")
        print(
            f"runtime:  {RUNC} ({subprocess.run([RUNC, '--version'], capture_output=True, text=True, check=False).stdout.splitlines()[0]})"
        )
        print(f"baseline: {' '.join(bare.argv)}")
        print(f"judged:   median over {args.runs} rounds of (shim - runtime) / bare; rotating order\n")
        print(HEADER)
        for index, case in enumerate(cases):
            config = write_config(workdir / f"config-{index}.toml", runtime=case.runtime, env_dir=env_dir)
            wrapper = write_runtime_wrapper(python, config, f"gpu-env-runtime-{index}")
            case_args = [a.replace("{plain}", str(plain)).replace("{env}", str(with_file)) for a in case.args]
            restore = restore_file if case.env_file else None
            if case.args[0] == "create":
                check_create(
                    wrapper,
                    with_file if case.env_file else plain,
                    restore_file if case.env_file else restore_plain,
                    changes=case.env_file,
                )
            shim_argv = [str(wrapper), *case_args]
            runtime_argv = [case.runtime, *case_args]
            if case.fails:
                shim_argv, runtime_argv = tolerate_failure(shim_argv), tolerate_failure(runtime_argv)
            shim = Command(argv=shim_argv, prepare=restore)
            runtime = Command(argv=runtime_argv, prepare=restore)
            result = measure(case, shim, runtime, bare, runs=args.runs, warmup=args.warmup)
            results.append(result)
            print(result.row(), flush=True)
    failed = [result.case.name for result in results if not result.passed]
    print(f"\nFAIL: over target: {'; '.join(failed)}" if failed else "\nPASS: every case within its target")
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
