"""Benchmark: the hook and the producer commands as whole processes against the bare interpreter.

``make bench`` runs this, then ``bench_shim.py`` and ``bench_cdi.py``. Every figure is printed against its
target, as the median of per-pair ratios measured in one run (``TARGETS``):

* The hook is started exactly as an engine starts it after ``gpu-env-hook install``: the benchmark installs
  into a scratch ``--root`` (``installed.scratch_install``: a clean interpreter, ``install --engine podman``)
  and runs the oci-hooks.d JSON's ``hook`` entry (its path, args and env) with ``prestart``, cwd = the
  bundle, the OCI state on stdin. config.toml (baked in by ``install --config``) points
  ``[nvidia-container-cli] path`` at /bin/true, so the exec at the end is cheap.
* The producer commands a device plugin may run per container (``env-file path``, ``write``, ``check``) run
  through the same installed executable.
* The floor is ``<same python> -I -S -c pass``: the interpreter's own start, nothing else.
* Before timing, each hook case runs once against the recording stand-in cli to prove the hook takes the
  path the case claims (no cli, or ``--device=0,1``), and each env-file case that config.json was
  rewritten.

* The env-file reader's worst shapes: each must take linear time, its time per byte at 1 MiB at most
  ``envfile_shapes.LINEAR_GROWTH`` times its time per byte at 64 KiB (in-process, best of 3); through the whole hook at
  60 KB each is shown without a target.

Exit status: 0 when every case meets its target, 1 otherwise (``--no-fail``: report only). Add a case by
appending to ``CASES`` (an env-file case gives the file's content).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from envfile_shapes import SHAPES, print_parse_table
from installed import (
    BENCH_PYTHON,
    TREE_BASE,
    Installed,
    base_interpreter,
    enter_namespace,
    scratch_install,
    tree_wanted,
    unbind_node_dirs,
)
from timing import Command, Comparison, compare, format_header, format_row

from hook.util.paths import RUNTIME_TREE

TESTS = Path(__file__).resolve().parent.parent
# Ratio targets against the bare interpreter: the start of a container without and with a GPU, with an env
# file (merged and config.json rewritten), and the producer commands a device plugin runs per container.
TARGETS = {"non-GPU": 1.25, "GPU": 1.5, "env file 100 B": 1.7, "env file 60 KB": 2.5, "producer": 2.0}
STANDIN_CLI = TESTS / "standin" / "nvidia-container-cli"
# What a typical image carries before any GPU variable: enough entries that the env scan is not trivial.
IMAGE_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOSTNAME=bench",
    "TERM=xterm",
    "LANG=C.UTF-8",
    *(f"APP_SETTING_{n}=value-{n}" for n in range(16)),
]
# 100 bytes, as the case: the devices, their capabilities and one variable of the user's.
SMALL_ENV_FILE = (
    "# by a plugin.\nNVIDIA_VISIBLE_DEVICES=0,1\nNVIDIA_DRIVER_CAPABILITIES=compute,utility\nUSER_ENV=hello\n"
)


def large_env_file(size: int = 60 * 1024) -> str:
    """A ``size``-byte env file: the devices, then quoted, commented and exported variables to fill it."""
    lines = ["# written by the device plugin", "NVIDIA_VISIBLE_DEVICES=0,1"]
    total = sum(len(line) + 1 for line in lines)
    index = 0
    while True:
        kind = index % 4
        value = f"value-{index}-" + "x" * 40
        line = (
            f"APP_{index}={value}",
            f'export APP_{index}="{value} with spaces"',
            f"APP_{index}='{value}' # trailing comment",
            f"# comment line {index} " + "-" * 40,
        )[kind]
        if total + len(line) + 1 > size:
            break
        lines.append(line)
        total += len(line) + 1
        index += 1
    text = "\n".join(lines) + "\n"
    return text + "#" * (size - len(text) - 1) + "\n" if len(text) < size else text


@dataclass(frozen=True)
class Case:
    """One container to run the hook for: its extra env, an optional env file, the ratio target."""

    name: str
    env: list[str]
    target: float | None  # None: shown for information (the worst-case env-file shapes)
    env_file: str | None = None  # content; the container's NVIDIA_ENV_FROM_FILE is set to point at it
    expect_devices: str | None = None  # the --device=... the stand-in must receive; None: cli not run
    needs_root: bool = False
    notes: list[str] = field(default_factory=list)


CASES = [
    Case(name="non-GPU container", env=[], target=TARGETS["non-GPU"]),
    Case(
        name="GPU, NVIDIA_VISIBLE_DEVICES",
        env=["NVIDIA_VISIBLE_DEVICES=0,1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
        target=TARGETS["GPU"],
        expect_devices="0,1",
    ),
    Case(
        name=f"GPU, env file {len(SMALL_ENV_FILE)} B merged+rewritten",
        env=["NVIDIA_VISIBLE_DEVICES=fake0,fake1"],
        env_file=SMALL_ENV_FILE,
        target=TARGETS["env file 100 B"],
        expect_devices="0,1",
        needs_root=True,  # the env file must be owned by uid 0
    ),
    Case(
        name="GPU, env file 60 KB merged+rewritten",
        env=["NVIDIA_VISIBLE_DEVICES=fake0,fake1"],
        env_file=large_env_file(),
        target=TARGETS["env file 60 KB"],
        expect_devices="0,1",
        needs_root=True,
    ),
    # The worst env-file shapes (tests/bench/envfile_shapes.py), 60 KB each, through the whole hook: shown
    # without a target (their target is linear time, judged by print_parse_table at 64 KiB and 1 MiB).
    *(
        Case(
            name=f"60 KB worst: {shape}",
            env=["NVIDIA_VISIBLE_DEVICES=fake0,fake1"],
            env_file=build(60 * 1024),
            target=None,
            expect_devices="0,1",
            needs_root=True,
        )
        for shape, build in SHAPES.items()
        if not shape.startswith("normal")
    ),
]


@dataclass(frozen=True)
class Producer:
    """One producer command (after ``env-file``), its target, and whether it needs root."""

    name: str
    args: list[str]  # "{dir}": the env-file directory; "{file}": a file written there beforehand
    target: float = TARGETS["producer"]
    needs_root: bool = False


PRODUCERS = [
    Producer("producer: env-file path", ["path", "GPU-0", "GPU-1"]),
    Producer(
        "producer: env-file write",
        ["write", "{dir}/written.env", "NVIDIA_VISIBLE_DEVICES=0,1", "--pod-uid", "pod-1"],
        needs_root=True,
    ),
    Producer("producer: env-file check", ["check", "{file}"], needs_root=True),
]


def build_spec(env: list[str]) -> dict[str, object]:
    """A config.json shaped like ``runc spec``'s default, with the given process env."""
    caps = [
        "CAP_AUDIT_WRITE",
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FOWNER",
        "CAP_FSETID",
        "CAP_KILL",
        "CAP_MKNOD",
        "CAP_NET_BIND_SERVICE",
        "CAP_NET_RAW",
        "CAP_SETFCAP",
        "CAP_SETGID",
        "CAP_SETPCAP",
        "CAP_SETUID",
        "CAP_SYS_CHROOT",
    ]
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "ro"]},
        {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["rbind", "ro"]},
    ]
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh", "-c", "echo hello"],
            "env": [*IMAGE_ENV, *env],
            "cwd": "/",
            "capabilities": dict.fromkeys(("bounding", "effective", "permitted"), caps),
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "bench",
        "mounts": mounts,
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": kind} for kind in ("pid", "network", "ipc", "uts", "mount", "cgroup")],
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def config_text(*, cli: str, env_dir: Path, record: Path | None = None) -> str:
    """config.toml with the cli path, the env-file directory and (for checks) the stand-in's record."""
    lines = ["[nvidia-container-cli]", f'path = "{cli}"']
    if record is not None:
        lines.append(f'environment = ["STANDIN_RECORD={record}"]')
    lines += ["", "[env-file]", f'directories = ["{env_dir}"]', ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Prepared:
    """A case laid out on disk: the bundle, its pristine config.json bytes and the state file."""

    bundle: Path
    state: Path
    spec_bytes: bytes

    def restore(self) -> None:
        """Put config.json back as it was (the env-file case rewrites it on every run)."""
        (self.bundle / "config.json").write_bytes(self.spec_bytes)


def prepare_case(case: Case, workdir: Path, env_dir: Path, index: int) -> Prepared:
    """Write the bundle, state and (if any) root-owned 0644 env file for ``case``."""
    bundle = workdir / f"bundle-{index}"
    (bundle / "rootfs").mkdir(parents=True)
    env = list(case.env)
    if case.env_file is not None:
        env_path = env_dir / f"case-{index}.env"
        env_path.write_text(case.env_file, encoding="utf-8")
        env_path.chmod(0o644)
        env.append(f"NVIDIA_ENV_FROM_FILE={env_path}")
    spec_bytes = json.dumps(build_spec(env), indent=2).encode()
    (bundle / "config.json").write_bytes(spec_bytes)
    state = workdir / f"state-{index}.json"
    state.write_text(json.dumps({"ociVersion": "1.0.2", "id": f"bench-{index}", "pid": os.getpid(),
                                 "status": "created", "bundle": str(bundle)}), encoding="utf-8")  # fmt: skip
    return Prepared(bundle=bundle, state=state, spec_bytes=spec_bytes)


def check_case(case: Case, prepared: Prepared, installed: Installed, record: Path) -> None:
    """Run the case once against the stand-in cli (config.toml says so meanwhile); fail loudly if the hook
    took another path or left config.json as it was when an env file should change it."""
    prepared.restore()
    record.unlink(missing_ok=True)
    with prepared.state.open("rb") as stdin:
        proc = subprocess.run(
            installed.hook_command("prestart"),
            stdin=stdin,
            capture_output=True,
            cwd=prepared.bundle,
            env=installed.hook_env,
            check=False,
        )
    if proc.returncode != 0:
        sys.exit(f"{case.name}: the hook failed: {proc.stderr.decode(errors='replace').strip()}")
    rewritten = (prepared.bundle / "config.json").read_bytes() != prepared.spec_bytes
    if rewritten != (case.env_file is not None):
        sys.exit(f"{case.name}: config.json was {'' if rewritten else 'not '}rewritten")
    argv = json.loads(record.read_text())["argv"] if record.exists() else None
    prepared.restore()
    if case.expect_devices is None:
        if argv is not None:
            sys.exit(f"{case.name}: expected no cli call, got {argv}")
        return
    if argv is None or f"--device={case.expect_devices}" not in argv:
        sys.exit(f"{case.name}: expected --device={case.expect_devices} in the cli argv, got {argv}")


def module_profile(installed: Installed, argv: list[str], cwd: Path, stdin: Path | None) -> list[str]:
    """Run ``argv`` once under ``-X importtime`` on the installed interpreter, the package put on sys.path
    as the installed files do, and list what it imported beyond the bare interpreter (one run: noisy)."""
    site = f"{RUNTIME_TREE}/current/lib"  # the tree's interpreter has no site-packages: the tree's own copy
    if not tree_wanted():
        site = subprocess.run(
            [installed.python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    launcher = f"import sys; sys.path[:0] = [{site!r}]; from hook.__main__ import main; sys.exit(main())"

    def imports(code: str, args: list[str]) -> list[tuple[int, str]]:
        with open(stdin or os.devnull, "rb") as fh:
            err = subprocess.run(
                [*installed.command, "-X", "importtime", "-I", "-S", "-c", code, *args],
                stdin=fh, capture_output=True, cwd=cwd, env=installed.hook_env, check=False,
            ).stderr.decode(errors="replace")  # fmt: skip
        rows = []
        for line in err.splitlines():
            if line.startswith("import time:") and "cumulative" not in line:
                self_us, _, name = line.removeprefix("import time:").split("|")
                rows.append((int(self_us), name.strip()))
        return rows

    floor = {name for _, name in imports("pass", [])}
    rows = [(us, name) for us, name in imports(launcher, argv) if name not in floor]
    top = ", ".join(f"{name} {us}" for us, name in sorted(rows, reverse=True)[:8])
    total = sum(us for us, _ in rows) / 1000
    return [f"    {len(rows)} modules beyond the bare start, {total:.1f} ms self; costliest (us): {top}"]


@contextmanager
def bench_dir() -> Iterator[Path]:
    """A temporary directory for bundles, configs and the env-file directory (0755, owned by the runner)."""
    path = Path(tempfile.mkdtemp(prefix="gpu-env-hook-bench-"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        unbind_node_dirs()
        shutil.rmtree(path, ignore_errors=True)


def floor_command(command: list[str]) -> Command:
    """The floor: the bare interpreter without site, ``python -I -S -c pass`` (started as the installed files
    start it: the tree's through its loader)."""
    return Command(argv=[*command, "-I", "-S", "-c", "pass"])


def tree_start(args: argparse.Namespace, floor: Command) -> Comparison:
    """The tree's interpreter through its loader against the same interpreter started as the node's own
    (``TREE_BASE -I -S -c pass``): what the loader form and the tree's own libraries cost."""
    system = floor_command([TREE_BASE])
    result = compare(
        f"tree interpreter start vs {TREE_BASE}",
        floor,
        system,
        runs=args.runs,
        warmup=args.warmup,
        target=1.1,
    )
    print(format_row(result))
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=40, help="timed runs of each command per case (>= 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed pairs before timing")
    parser.add_argument("--case", action="append", default=[], help="run only cases whose name contains this")
    parser.add_argument("--profile", action="store_true", help="also show what each case imports")
    parser.add_argument(
        "--no-fail", action="store_true", help="report only; exit 0 even if a target is missed"
    )
    args = parser.parse_args(argv)
    if args.runs < 20:
        parser.error("--runs must be at least 20")
    return args


def run_hook_cases(args: argparse.Namespace, workdir: Path, installed: Installed, env_dir: Path,
                   floor: Command) -> list[Comparison]:  # fmt: skip
    """Time each hook case against the floor; print one row each."""
    results: list[Comparison] = []
    timing_config = installed.config.read_text(encoding="utf-8")
    record = workdir / "record.json"
    for index, case in enumerate(CASES):
        if args.case and not any(word in case.name for word in args.case):
            continue
        if case.needs_root and os.geteuid() != 0:
            print(f"{case.name:<46} SKIP (needs root: the env file must be owned by uid 0)")
            continue
        prepared = prepare_case(case, workdir, env_dir, index)
        installed.config.write_text(config_text(cli=str(STANDIN_CLI), env_dir=env_dir, record=record))
        try:
            check_case(case, prepared, installed, record)
        finally:
            installed.config.write_text(timing_config, encoding="utf-8")
        restore: Callable[[], None] | None = prepared.restore if case.env_file is not None else None
        command = Command(
            argv=installed.hook_command("prestart"),
            env=installed.hook_env,
            cwd=str(prepared.bundle),
            stdin_path=str(prepared.state),
            prepare=restore,
        )
        result = compare(case.name, command, floor, runs=args.runs, warmup=args.warmup, target=case.target)
        results.append(result)
        print(format_row(result), flush=True)
        if args.profile:
            flags = ["-config", str(installed.config), "prestart"]
            print("\n".join(module_profile(installed, flags, prepared.bundle, prepared.state)))
    return results


def run_producers(args: argparse.Namespace, installed: Installed, env_dir: Path,
                  floor: Command) -> list[Comparison]:  # fmt: skip
    """Time each producer command against the floor; print one row each."""
    results: list[Comparison] = []
    checked = env_dir / "checked.env"
    # The naming key in the scratch tree, never the node's /var/lib/gpu-env-hook (hook.producer.namekey).
    env = {
        **installed.hook_env,
        "GPU_ENV_HOOK_NAME_KEY": str(installed.root / "var/lib/gpu-env-hook/alloc.key"),
    }
    for producer in PRODUCERS:
        if args.case and not any(word in producer.name for word in args.case):
            continue
        if producer.needs_root and os.geteuid() != 0:
            print(f"{producer.name:<46} SKIP (needs root: env files are root-owned)")
            continue
        if "{file}" in producer.args and not checked.exists():
            subprocess.run(
                installed.hook_command("env-file", "write", str(checked), "NVIDIA_VISIBLE_DEVICES=0,1"),
                env=env, check=True, capture_output=True,
            )  # fmt: skip
        argv = ["env-file", *(a.replace("{dir}", str(env_dir)).replace("{file}", str(checked))
                              for a in producer.args)]  # fmt: skip
        command = Command(argv=installed.hook_command(*argv), env=env)
        result = compare(
            producer.name, command, floor, runs=args.runs, warmup=args.warmup, target=producer.target
        )
        results.append(result)
        print(format_row(result), flush=True)
        if args.profile:
            flags = ["-config", str(installed.config), *argv]
            print("\n".join(module_profile(installed, flags, env_dir, None)))
    return results


def main(argv: list[str] | None = None) -> int:
    """Run every selected case and print one line each; non-zero if a target is missed."""
    args = parse_args(argv)
    enter_namespace()
    with bench_dir() as workdir:
        env_dir = workdir / "nvidia-env"
        env_dir.mkdir(mode=0o755)
        installed = scratch_install(workdir, config_text(cli="/bin/true", env_dir=env_dir))
        floor = floor_command(installed.command)
        shown = " ".join("<code>" if "\n" in arg else arg for arg in installed.hook_command("prestart"))
        print(f"hook:     {shown}   (the oci-hooks.d entry install wrote; cwd = bundle, state on stdin)")
        print(f"floor:    {' '.join(floor.argv)}")
        print(f"python:   a copy of {base_interpreter()} ({BENCH_PYTHON} picks another)")
        print(f"runs: {args.runs} of each, alternating, after {args.warmup} warm-up pairs; cli = /bin/true;"
              " judged: median of per-pair ratios\n")  # fmt: skip
        print(format_header())
        results = [tree_start(args, floor)] if tree_wanted() else []
        results += run_hook_cases(args, workdir, installed, env_dir, floor)
        results += run_producers(args, installed, env_dir, floor)
    failed = [result.name for result in results if not result.passed]
    if not args.case:
        failed += print_parse_table()
    if failed:
        print(f"\nFAIL: over target: {'; '.join(failed)}")
    else:
        print("\nPASS: every case within its target")
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
