"""Benchmark: the hook's prestart as a whole process against the bare interpreter (``make bench``).

Times the hook exactly as an engine starts it after ``gpu-env-hook install``: the shell wrapper install
writes (``sh`` -> ``env -i`` -> ``<python> -I -c "from hook.__main__ import main; ..."``) with
``-config CFG prestart`` (``--command module|inline|script`` times ``python -I -m hook``, the bare
``-c`` launcher or pip's console script instead), against ``<python> -I -c pass``
on the same interpreter, alternating the two, and prints the median times and the median per-pair ratio
for each case. The hook runs as a runtime runs it: cwd = the bundle, the OCI state on stdin, only a small
environment. config.toml points ``[nvidia-container-cli] path`` at /bin/true, so the exec at the end is
cheap, and leaves ldconfig at its default.

By default both run in a throwaway clean install (``--install clean``): a venv without pip made from the
base interpreter, with copies of ``hook/`` and ``dotenv/`` in its site-packages, as ``pip install .`` would
leave them. The project's own .venv holds an *editable* install whose ``.pth`` finder imports pathlib, re
and urllib at every start (about 20 ms here): that inflates the baseline and hides the hook's own cost, so
``--install dev`` (time the running interpreter as it is) is for comparison only. Before timing, each case is run once against the recording
stand-in cli to prove the hook takes the path the case claims (no cli, or ``--device=0,1``).

Exit status: 0 when every case meets its target, 1 otherwise (``--no-fail``: always 0 unless the hook
itself failed). Add a case by appending to ``CASES``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from timing import Command, Comparison, compare, format_header, format_row, python_baseline

TESTS = Path(__file__).resolve().parent.parent
STANDIN_CLI = TESTS / "standin" / "nvidia-container-cli"
HOOK_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
# What a typical image carries before any GPU variable: enough entries that the env scan is not trivial.
IMAGE_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOSTNAME=bench",
    "TERM=xterm",
    "LANG=C.UTF-8",
    *(f"APP_SETTING_{n}=value-{n}" for n in range(16)),
]


@dataclass(frozen=True)
class Case:
    """One container to run the hook for: its extra env, an optional env file, the ratio target."""

    name: str
    env: list[str]
    target: float
    env_file: str | None = None  # content; the container's NVIDIA_ENV_FROM_FILE is set to point at it
    expect_devices: str | None = None  # the --device=... the stand-in must receive; None: cli not run
    needs_root: bool = False
    notes: list[str] = field(default_factory=list)


CASES = [
    Case(name="(a) non-GPU container", env=[], target=2.0),
    Case(
        name="(b) GPU container, NVIDIA_VISIBLE_DEVICES",
        env=["NVIDIA_VISIBLE_DEVICES=0,1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
        target=2.5,
        expect_devices="0,1",
    ),
    Case(
        name="(c) GPU container, devices from env file",
        env=["NVIDIA_VISIBLE_DEVICES=fake0,fake1"],
        env_file=(
            "# written by the device plugin\n"
            "NVIDIA_VISIBLE_DEVICES=0,1\n"
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility\n"
            "USER_CUSTOM_ENV=hello\n"
        ),
        target=3.5,
        expect_devices="0,1",
        needs_root=True,  # the env file must be owned by uid 0
    ),
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


def write_config(path: Path, *, cli: str, env_dir: Path, record: Path | None = None) -> Path:
    """Write a config.toml with the cli path, the env-file directory and (for checks) the stand-in's record."""
    lines = ["[nvidia-container-cli]", f'path = "{cli}"']
    if record is not None:
        lines.append(f'environment = ["STANDIN_RECORD={record}"]')
    lines += ["", "[env-file]", f'directories = ["{env_dir}"]', ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


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


# pip's console-script template (what ``pip install .`` writes to bin/gpu-env-hook).
SCRIPT_TEMPLATE = """\
#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from hook.__main__ import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


# Runs main() without runpy (which -m imports: importlib.util, contextlib, ...) and without pip's `import re`.
INLINE_LAUNCHER = "import sys; from hook.__main__ import main; sys.exit(main())"


def make_clean_install(workdir: Path) -> str:
    """Build a pip-less venv holding copies of hook/ and dotenv/ plus a console script; return its python."""
    import subprocess

    import dotenv

    import hook

    base_python = getattr(sys, "_base_executable", sys.executable)
    venv = workdir / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ignore = shutil.ignore_patterns("__pycache__")
    for package in (hook, dotenv):
        source = Path(package.__file__ or "").parent
        shutil.copytree(source, Path(site) / source.name, ignore=ignore)
    script = venv / "bin" / "gpu-env-hook"
    script.write_text(SCRIPT_TEMPLATE.format(python=python), encoding="utf-8")
    script.chmod(0o755)
    return str(python)


def write_wrapper(python: str) -> Path:
    """Write the shell wrapper ``gpu-env-hook install`` writes (``sh`` -> ``env -i`` -> ``python -I -c``)."""
    from hook.install import HOOK_KEEP_ENV, build_wrapper

    path = Path(python).parent / "gpu-env-hook-wrapper"
    path.write_bytes(
        build_wrapper(path.name, "hook.__main__", python=python, keep=HOOK_KEEP_ENV, config=None)
    )
    path.chmod(0o755)
    return path


def hook_argv(kind: str, python: str) -> list[str]:
    """The hook command without flags, for each way of starting it (see ``--command``)."""
    if kind == "wrapper":
        return [str(write_wrapper(python))]
    if kind == "script":
        return [str(Path(python).parent / "gpu-env-hook")]
    if kind == "inline":
        return [python, "-I", "-c", INLINE_LAUNCHER]
    return [python, "-I", "-m", "hook"]


def check_case(case: Case, prepared: Prepared, base: list[str], config: Path, record: Path) -> None:
    """Run the case once against the stand-in cli and fail loudly if the hook took another path."""
    import subprocess

    prepared.restore()
    record.unlink(missing_ok=True)
    with prepared.state.open("rb") as stdin:
        proc = subprocess.run(
            [*base, "-config", str(config), "prestart"],
            stdin=stdin,
            capture_output=True,
            cwd=prepared.bundle,
            env=HOOK_ENV,
            check=False,
        )
    if proc.returncode != 0:
        sys.exit(f"{case.name}: the hook failed: {proc.stderr.decode(errors='replace').strip()}")
    argv = json.loads(record.read_text())["argv"] if record.exists() else None
    if case.expect_devices is None:
        if argv is not None:
            sys.exit(f"{case.name}: expected no cli call, got {argv}")
        return
    if argv is None or f"--device={case.expect_devices}" not in argv:
        sys.exit(f"{case.name}: expected --device={case.expect_devices} in the cli argv, got {argv}")
    prepared.restore()


def import_profile(base: list[str], config: Path, prepared: Prepared, top: int) -> list[str]:
    """Run the hook once with ``-X importtime`` and return its ``top`` costliest imports (cumulative us)."""
    import subprocess

    prepared.restore()
    python, rest = base[0], base[1:]
    if len(base) == 1:  # a script or wrapper: profile the inline launcher on the same interpreter
        python, rest = str(Path(base[0]).parent / "python"), ["-I", "-c", INLINE_LAUNCHER]
    with prepared.state.open("rb") as stdin:
        proc = subprocess.run(
            [python, "-X", "importtime", *rest, "-config", str(config), "prestart"],
            stdin=stdin,
            capture_output=True,
            cwd=prepared.bundle,
            env=HOOK_ENV,
            check=False,
        )
    prepared.restore()
    rows: list[tuple[int, int, str]] = []
    for line in proc.stderr.decode(errors="replace").splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative_us, name = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative_us), int(self_us), name.rstrip()))
    total = sum(self_us for _, self_us, _ in rows)
    top_rows = [f"    {cum:7d} us cumulative {own:6d} us self  {name}" for cum, own, name in rows
                if name.strip().startswith(("hook", "dotenv", "tomllib", "typing", "dataclasses",
                                            "pathlib", "json", "re", "encodings"))]  # fmt: skip
    top_rows = sorted(top_rows, key=lambda text: -int(text.split()[0]))[:top]
    return [f"  imports: {len(rows)} modules, {total / 1000:.1f} ms self time in total", *top_rows]


@contextmanager
def bench_dir() -> Iterator[Path]:
    """A temporary directory for bundles, configs and the env-file directory (0755, owned by the runner)."""
    path = Path(tempfile.mkdtemp(prefix="gpu-env-hook-bench-"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# Modules on (or kept off) the hot path, for --imports: each costs what it adds to a bare start.
IMPORT_PROBES = (
    "json",
    "re",
    "typing",
    "tomllib",
    "dotenv.parser",
    "dotenv",
    "dataclasses",
    "pathlib",
    "hook.prestart",
    "hook.config",
    "hook.envfile",
    "hook.request",
    "hook.nvcli",
)


def time_imports(python: str, runs: int, warmup: int) -> None:
    """Print what importing each probe module adds to a bare interpreter start (alternating medians)."""
    baseline = python_baseline(python)
    print(format_header())
    for module in IMPORT_PROBES:
        command = Command(argv=[python, "-I", "-c", f"import {module}"])
        print(
            format_row(compare(f"import {module}", command, baseline, runs=runs, warmup=warmup)), flush=True
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=40, help="timed runs of each command per case (>= 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed pairs before timing")
    parser.add_argument("--command", choices=("wrapper", "module", "inline", "script"), default="wrapper",
                        help="how the hook is started: the wrapper 'gpu-env-hook install' writes (default), "
                             "'python -I -m hook', 'python -I -c <run main>', or pip's console script")  # fmt: skip
    parser.add_argument("--install", choices=("clean", "dev"), default="clean",
                        help="time a throwaway clean install (default) or the running interpreter as it is")  # fmt: skip
    parser.add_argument("--case", action="append", default=[], help="run only cases whose name contains this")
    parser.add_argument("--imports", action="store_true",
                        help="instead of the cases, time 'python -I -c \"import M\"' for the modules the hook uses")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="also show what each case imports")
    parser.add_argument(
        "--no-fail", action="store_true", help="report only; exit 0 even if a target is missed"
    )
    args = parser.parse_args(argv)
    if args.runs < 20:
        parser.error("--runs must be at least 20")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every selected case and print one line each; non-zero if a target is missed."""
    args = parse_args(argv)
    is_root = os.geteuid() == 0
    results: list[Comparison] = []
    with bench_dir() as workdir:
        python = make_clean_install(workdir) if args.install == "clean" else sys.executable
        base = hook_argv(args.command, python)
        baseline = python_baseline(python)
        print(f"install:  {args.install} ({python})")
        if args.imports:
            time_imports(python, args.runs, args.warmup)
            return 0
        print(f"hook:     {' '.join(base)} -config CFG prestart   (cwd = bundle, state on stdin)")
        print(f"baseline: {' '.join(baseline.argv)}")
        print(f"runs: {args.runs} of each, alternating, after {args.warmup} warm-up pairs; cli = /bin/true\n")
        print(format_header())
        env_dir = workdir / "nvidia-env"
        env_dir.mkdir(mode=0o755)
        config = write_config(workdir / "config.toml", cli="/bin/true", env_dir=env_dir)
        record = workdir / "record.json"
        check_config = write_config(
            workdir / "check.toml", cli=str(STANDIN_CLI), env_dir=env_dir, record=record
        )
        for index, case in enumerate(CASES):
            if args.case and not any(word in case.name for word in args.case):
                continue
            if case.needs_root and not is_root:
                print(f"{case.name:<44} SKIP (needs root: the env file must be owned by uid 0)")
                continue
            prepared = prepare_case(case, workdir, env_dir, index)
            check_case(case, prepared, base, check_config, record)
            restore: Callable[[], None] | None = prepared.restore if case.env_file is not None else None
            command = Command(
                argv=[*base, "-config", str(config), "prestart"],
                env=HOOK_ENV,
                cwd=str(prepared.bundle),
                stdin_path=str(prepared.state),
                prepare=restore,
            )
            result = compare(
                case.name, command, baseline, runs=args.runs, warmup=args.warmup, target=case.target
            )
            results.append(result)
            print(format_row(result), flush=True)
            if args.profile:
                print("\n".join(import_profile(base, config, prepared, top=12)))
    failed = [result.name for result in results if not result.passed]
    if failed:
        print(f"\nFAIL: over target: {'; '.join(failed)}")
    else:
        print("\nPASS: every case within its target")
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
