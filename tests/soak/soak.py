"""Soak: the reliability trial's shapes, against the installed runtime shim and real runc (``make soak``).

1. **Concurrent creates.** N containers (20 and 100 by default) are created at once through the runtime
   wrapper ``gpu-env-hook install`` wrote into a scratch ``--root``, each naming its own env file (its own
   variable and GPU); the same N bundles without an env file are created at once by plain runc. Each
   container is started and prints its variable and ``NVIDIA_VISIBLE_DEVICES``, which must be its file's,
   and the recording stand-in cli must have been asked for that file's device.
2. **A writer racing readers.** One env file is rewritten without pause between two versions (different
   variable, different device) while containers naming it are created at once: each container's variable
   and the device the cli got must come from one version.
3. **SIGKILL during the rewrite.** Writers of the env file are killed at random moments while containers
   read it, and shims are killed at random moments while they rewrite a large config.json: no reader sees a
   torn file, config.json is always the old or the new one, and the next write leaves no temp file.

Figures: success rate, p50/p95 of one create (shim vs plain runc), mismatches, torn files, temp files left.
Exit status 0 only when every figure is clean. ``tests/soak/test_soak.py`` runs a small version in
``make test``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS / "integration"))

from busybox import base_spec, make_busybox_rootfs  # noqa: E402 - after the path above

STANDIN_CLI = TESTS / "standin" / "nvidia-container-cli"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
PRINT_ENV = ["sh", "-c", 'echo "$MARK $NVIDIA_VISIBLE_DEVICES"']
GPUS = 8
VERSIONS = {"one": "0", "two": "1"}  # a racing writer's two versions: MARK -> NVIDIA_VISIBLE_DEVICES
_RACING_WRITER = """
import os, sys
from hook.util.atomicwrite import write_atomic
path, stop, pad = sys.argv[1], sys.argv[2], int(sys.argv[3])
versions = [f"MARK={m}\\nNVIDIA_VISIBLE_DEVICES={d}\\nPAD={'x' * pad}\\n".encode() for m, d in (("one", "0"), ("two", "1"))]
count = 0
while not os.path.exists(stop):
    write_atomic(path, versions[count % 2], mode=0o644)
    count += 1
print(count)
"""


# --- the node: the installed shim, its config, the stand-in cli -------------------------------------------


@dataclass
class Node:
    """A scratch node: the shim installed under ``root``, runc's state, env files, cli records."""

    work: Path
    wrapper: Path
    state: Path
    env_dir: Path
    records: Path
    rootfs: Path

    @classmethod
    def install(cls, work: Path) -> Node:
        """``gpu-env-hook install --engine containerd --root <scratch>`` and the files it needs."""
        env_dir, records, node = work / "nvidia-env", work / "records", work / "node"
        for directory in (env_dir, records, node):
            directory.mkdir(parents=True)
        config = work / "config.toml"
        config.write_text(
            "[nvidia-container-cli]\n"
            f'path = "{STANDIN_CLI}"\n'
            f'environment = ["STANDIN_RECORD_DIR={records}"]\n'
            "[env-file]\n"
            f'directories = ["{env_dir}"]\n',
            encoding="utf-8",
        )
        # install checks the config exists on the node (beneath --root); the wrapper names the real path.
        (node / config.relative_to("/")).parent.mkdir(parents=True)
        shutil.copy(config, node / config.relative_to("/"))
        subprocess.run(
            [sys.executable, "-m", "hook", "install", "--engine", "containerd", "--root", str(node),
             "--python", sys.executable, "--config", str(config)],
            check=True, capture_output=True,
        )  # fmt: skip
        installed = next(path for path in node.rglob("gpu-env-runtime") if path.is_file())
        # The installed files name the node's runtime tree (/opt/gpu-env-hook): each call runs in a private
        # mount namespace where the scratch node's opt is /opt (unshare execs, so the pid is the shim's).
        wrapper = work / "gpu-env-runtime"
        wrapper.write_text(
            "#!/bin/sh\n"
            'exec unshare --mount --propagation private sh -c \'mount --bind "$0" /opt && exec "$@"\' '
            f'"{node / "opt"}" "{installed}" "$@"\n',
            encoding="utf-8",
        )
        wrapper.chmod(0o755)
        rootfs = make_busybox_rootfs(work / "rootfs")
        return cls(work=work, wrapper=wrapper, state=work / "runc-root", env_dir=env_dir, records=records,
                   rootfs=rootfs)  # fmt: skip

    def bundle(self, name: str, env: list[str], *, padding: int = 0) -> Path:
        """A bundle printing MARK and NVIDIA_VISIBLE_DEVICES, on the shared busybox rootfs."""
        bundle = self.work / "bundles" / name
        bundle.mkdir(parents=True)
        spec = base_spec()
        spec["process"]["args"] = PRINT_ENV
        spec["process"]["env"] = ["PATH=/bin", *env]
        spec["root"]["path"] = str(self.rootfs)
        if padding:
            spec["annotations"] = {"example.com/padding": "x" * padding}
        (bundle / "config.json").write_text(json.dumps(spec), encoding="utf-8")
        return bundle

    def env_file(self, name: str, content: str) -> Path:
        """A root-owned, 0644 env file in the configured directory."""
        path = self.env_dir / name
        path.write_text(content, encoding="utf-8")
        path.chmod(0o644)
        return path

    def cli_devices(self) -> dict[int, str]:
        """The device each container's cli call asked for, by the container's pid (``--pid=``)."""
        devices: dict[int, str] = {}
        for path in self.records.glob("*.json"):
            argv = json.loads(path.read_text(encoding="utf-8"))["argv"]
            pid = next(int(arg[6:]) for arg in argv if arg.startswith("--pid="))
            devices[pid] = ",".join(arg[9:] for arg in argv if arg.startswith("--device="))
        return devices


# --- one container: create (timed), start, output, delete ------------------------------------------------


@dataclass
class Outcome:
    """What one container did: created or not (and how long it took), its pid and what it printed."""

    name: str
    ok: bool
    seconds: float
    error: str = ""
    pid: int = 0
    printed: str = ""


def create(node: Node, name: str, bundle: Path, *, shim: bool) -> Outcome:
    """Create ``name`` through the installed shim (or plain runc), timed; its stdio go to files."""
    front = str(node.wrapper) if shim else RUNC
    out, err = bundle / "stdout", bundle / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        started = time.perf_counter()
        proc = subprocess.run(
            [front, "--root", str(node.state), "create", "--bundle", str(bundle), name],
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, timeout=300, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - started
    if proc.returncode != 0:
        return Outcome(name, ok=False, seconds=seconds, error=err.read_text(errors="replace").strip())
    state = runc(node, "state", name)
    pid = int(json.loads(state.stdout)["pid"]) if state.returncode == 0 else 0
    return Outcome(name, ok=True, seconds=seconds, pid=pid)


def runc(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    """Run runc on the node's state root."""
    return subprocess.run([RUNC, "--root", str(node.state), *args], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def start_and_collect(node: Node, outcome: Outcome, bundle: Path) -> None:
    """Start a created container, wait for its one line, then delete it."""
    if outcome.ok:
        runc(node, "start", outcome.name)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (bundle / "stdout").read_text().endswith("\n"):
            time.sleep(0.02)
        outcome.printed = (bundle / "stdout").read_text().strip()
    runc(node, "delete", "--force", outcome.name)


def create_all(node: Node, bundles: dict[str, Path], *, shim: bool) -> list[Outcome]:
    """Create every bundle at once (one thread each), then start, read and delete each container."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(bundles)) as pool:
        outcomes = list(pool.map(lambda item: create(node, item[0], item[1], shim=shim), bundles.items()))
    for outcome in outcomes:
        start_and_collect(node, outcome, bundles[outcome.name])
    return outcomes


# --- figures ----------------------------------------------------------------------------------------------


@dataclass
class Figures:
    """One shape's figures; ``clean`` when nothing failed, mixed, tore or was left behind."""

    shape: str
    outcomes: list[Outcome]
    baseline: list[Outcome] = field(default_factory=list)
    plain_shim: list[Outcome] = field(default_factory=list)
    mismatched: int = 0
    torn: int = 0
    temps_before: int = 0
    temps_after: int = 0
    killed: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        """The creates that were not expected to fail but did."""
        return [outcome for outcome in self.outcomes if not outcome.ok]

    @property
    def clean(self) -> bool:
        """No failure, mismatch, torn file or temp file left after the next write."""
        others_ok = all(outcome.ok for outcome in (*self.plain_shim, *self.baseline))
        return (
            not self.failed
            and others_ok
            and self.mismatched == 0
            and self.torn == 0
            and self.temps_after == 0
        )

    def lines(self) -> list[str]:
        """The printed figures."""
        total = len(self.outcomes)
        rate = 100.0 * (total - len(self.failed)) / total if total else 100.0
        lines = [f"{self.shape}: {total - len(self.failed)}/{total} created ({rate:.1f}%)"]
        lines.append(f"  create through the shim: {timing([o.seconds for o in self.outcomes if o.ok])}")
        if self.plain_shim:
            lines.append(f"  same, no env file/GPU:   {timing([o.seconds for o in self.plain_shim if o.ok])}")
        if self.baseline:
            lines.append(f"  create by plain runc:    {timing([o.seconds for o in self.baseline if o.ok])}")
        lines.append(f"  one-version mismatches: {self.mismatched}   torn files: {self.torn}")
        if self.killed:
            lines.append(
                f"  SIGKILLed: {self.killed}   temp files left by them: {self.temps_before}, "
                f"after the next write: {self.temps_after}"
            )
        lines += [f"  {note}" for note in self.notes]
        lines += [f"  FAILED {o.name}: {o.error[:200]}" for o in self.failed[:5]]
        return lines


def timing(seconds: list[float]) -> str:
    """p50 and p95 in milliseconds."""
    if not seconds:
        return "-"
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   (n={len(ordered)})"


# --- the shapes -------------------------------------------------------------------------------------------


def concurrent_creates(node: Node, count: int) -> Figures:
    """N containers at once, each with its own env file, through the shim; the same by plain runc."""
    tag = f"c{count}-{os.urandom(3).hex()}"
    shimmed: dict[str, Path] = {}
    plain: dict[str, Path] = {}
    expected: dict[str, tuple[str, str]] = {}
    for index in range(count):
        name = f"{tag}-{index}"
        device = str(index % GPUS)
        env_file = node.env_file(f"{name}.env", f"MARK={name}\nNVIDIA_VISIBLE_DEVICES={device}\n")
        shimmed[name] = node.bundle(name, [f"NVIDIA_ENV_FROM_FILE={env_file}"])
        plain[f"{name}-runc"] = node.bundle(f"{name}-runc", [f"MARK={name}"])
        expected[name] = (name, device)
    figures = Figures(f"concurrent creates, {count} at once", create_all(node, shimmed, shim=True))
    figures.baseline = create_all(node, plain, shim=False)
    # The shim's own cost: the same bundles without env file or GPU through the shim (no hook, no cli).
    figures.plain_shim = create_all(
        node, {f"{name}-shim": bundle for name, bundle in plain.items()}, shim=True
    )
    devices = node.cli_devices()
    for outcome in figures.outcomes:
        mark, device = expected[outcome.name]
        if outcome.ok and (outcome.printed != f"{mark} {device}" or devices.get(outcome.pid) != device):
            figures.mismatched += 1
    return figures


@contextmanager
def racing_writer(node: Node, name: str, pad: int = 0) -> Iterator[Path]:
    """An env file rewritten without pause between the two ``VERSIONS`` while the block runs."""
    path = node.env_dir / name
    stop = node.work / f"{name}.stop"
    with subprocess.Popen([sys.executable, "-I", "-c", _RACING_WRITER, str(path), str(stop), str(pad)],
                          stdout=subprocess.PIPE, text=True) as writer:  # fmt: skip
        try:
            while not path.exists():
                if writer.poll() is not None:
                    raise RuntimeError("the racing writer died")
                time.sleep(0.001)
            yield path
        finally:
            stop.touch()
            writer.communicate(timeout=60)


def one_version_check(node: Node, figures: Figures) -> None:
    """Count containers whose printed version and cli device are not of one version (and torn reads)."""
    devices = node.cli_devices()
    for outcome in figures.outcomes:
        if not outcome.ok:
            if "not a valid dotenv line" in outcome.error or "duplicate key" in outcome.error:
                figures.torn += 1
            continue
        mark, _, printed_device = outcome.printed.partition(" ")
        if (
            VERSIONS.get(mark) is None
            or printed_device != VERSIONS[mark]
            or devices.get(outcome.pid) != VERSIONS[mark]
        ):
            figures.mismatched += 1


def writer_racing_readers(node: Node, count: int) -> Figures:
    """``count`` containers at once naming one env file that a writer rewrites without pause."""
    tag = f"race{count}-{os.urandom(3).hex()}"
    with racing_writer(node, f"{tag}.env") as env_file:
        bundles = {
            f"{tag}-{i}": node.bundle(f"{tag}-{i}", [f"NVIDIA_ENV_FROM_FILE={env_file}"])
            for i in range(count)
        }
        figures = Figures(f"writer racing readers, {count} at once", create_all(node, bundles, shim=True))
    one_version_check(node, figures)
    return figures


def killed_writers(node: Node, kills: int) -> Figures:
    """Writers SIGKILLed mid-rewrite (a 48 KiB file) while containers read it; then one clean write."""
    tag = f"kill{kills}-{os.urandom(3).hex()}"
    path = node.env_file(f"{tag}.env", "MARK=one\nNVIDIA_VISIBLE_DEVICES=0\n")
    bundles = {
        f"{tag}-{i}": node.bundle(f"{tag}-{i}", [f"NVIDIA_ENV_FROM_FILE={path}"]) for i in range(kills)
    }
    outcomes: list[Outcome] = []
    figures_left: list[int] = []  # temp files present right after each kill
    stop_reading = threading.Event()

    def read_while_killing() -> None:
        for name, bundle in bundles.items():
            outcome = create(node, name, bundle, shim=True)
            start_and_collect(node, outcome, bundle)
            outcomes.append(outcome)
        stop_reading.set()

    reader = threading.Thread(target=read_while_killing)
    reader.start()
    killed = 0
    while not stop_reading.is_set() or killed < kills:
        stop = node.work / f"{tag}.stop-{killed}"
        with subprocess.Popen([sys.executable, "-I", "-c", _RACING_WRITER, str(path), str(stop), str(48 * 1024)],
                              stdout=subprocess.DEVNULL) as writer:  # fmt: skip
            time.sleep(random.uniform(0.0, 0.2))  # noqa: S311 - a random moment, not a secret
            kill_mid_write(writer, node.env_dir, path.name)
        killed += 1
        figures_left.append(count_temps(node.env_dir, path.name))
    reader.join()
    figures = Figures(f"writers SIGKILLed during the rewrite, {kills} readers", outcomes, killed=killed)
    one_version_check(node, figures)
    figures.temps_before = max(figures_left)
    figures.notes.append(f"kills that left a temp file: {sum(n > 0 for n in figures_left)} of {killed}")
    from hook.util.atomicwrite import write_atomic

    write_atomic(str(path), b"MARK=one\nNVIDIA_VISIBLE_DEVICES=0\n", mode=0o644)
    figures.temps_after = count_temps(node.env_dir, path.name)
    return figures


def killed_shims(node: Node, kills: int) -> Figures:
    """Shims SIGKILLed while they rewrite a 16 MB config.json: it stays whole; the next create cleans up."""
    tag = f"shimkill{kills}-{os.urandom(3).hex()}"
    env_file = node.env_file(f"{tag}.env", "MARK=merged\nNVIDIA_VISIBLE_DEVICES=2\n")
    bundle = node.bundle(tag, [f"NVIDIA_ENV_FROM_FILE={env_file}"], padding=16_000_000)
    pristine = (bundle / "config.json").read_bytes()
    figures = Figures(f"shims SIGKILLed during the config.json rewrite, {kills} kills", [], killed=kills)
    mid_write = 0
    for index in range(kills):
        (bundle / "config.json").write_bytes(pristine)
        name = f"{tag}-{index}"
        with subprocess.Popen([str(node.wrapper), "--root", str(node.state), "create", "--bundle", str(bundle), name],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) as shim:  # fmt: skip
            mid_write += kill_mid_write(shim, bundle, "config.json")
        runc(node, "delete", "--force", name)
        try:
            document = json.loads((bundle / "config.json").read_bytes())
        except ValueError:
            figures.torn += 1
            continue
        env = document["process"]["env"]
        if (bundle / "config.json").read_bytes() != pristine and "MARK=merged" not in env:
            figures.torn += 1
    figures.temps_before = count_temps(bundle, "config.json")
    figures.notes.append(f"killed while their temp file was there: {mid_write} of {kills}")
    (bundle / "config.json").write_bytes(pristine)
    outcome = create(node, f"{tag}-after", bundle, shim=True)
    start_and_collect(node, outcome, bundle)
    figures.outcomes.append(outcome)
    figures.temps_after = count_temps(bundle, "config.json")
    if outcome.ok and outcome.printed != "merged 2":
        figures.mismatched += 1
    return figures


def kill_mid_write(proc: subprocess.Popen[Any], directory: Path, name: str, timeout: float = 30) -> bool:
    """SIGKILL ``proc`` the moment a temp file of its own for ``name`` is in ``directory`` (or when it exits,
    or at the timeout); return whether it was caught mid-write."""
    from hook.util.atomicwrite import parse_temp_name

    deadline = time.monotonic() + timeout
    caught = False
    while proc.poll() is None and time.monotonic() < deadline:
        if any(parse_temp_name(entry.name, name) == proc.pid for entry in directory.iterdir()):
            caught = True
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return caught


def count_temps(directory: Path, name: str) -> int:
    """Temp files of our naming for ``name`` in ``directory``."""
    from hook.util.atomicwrite import parse_temp_name

    return sum(parse_temp_name(entry.name, name) is not None for entry in directory.iterdir())


# --- entry point ------------------------------------------------------------------------------------------


def run_soak(concurrency: list[int], racing: int, writer_kills: int, shim_kills: int,
             report: Callable[[str], None] = print) -> list[Figures]:  # fmt: skip
    """Run every shape on a fresh scratch node; report each one's figures as they come."""
    if os.geteuid() != 0:
        raise SystemExit("soak: needs root (runc, root-owned env files)")
    results: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="gpu-env-soak-") as tmp:
        node = Node.install(Path(tmp))
        report(f"installed shim: {node.wrapper}")
        shapes: list[Callable[[], Figures]] = [
            *(lambda count=count: concurrent_creates(node, count) for count in concurrency),
            lambda: writer_racing_readers(node, racing),
            lambda: killed_writers(node, writer_kills),
            lambda: killed_shims(node, shim_kills),
        ]
        try:
            for shape in shapes:
                figures = shape()
                results.append(figures)
                for line in figures.lines():
                    report(line)
        finally:
            for cid in runc(node, "list", "-q").stdout.split():
                runc(node, "delete", "--force", cid)
    return results


def main(argv: list[str] | None = None) -> int:
    """Parse the shape sizes, run the soak, print the figures; 0 only when all is clean."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,20,100", help="containers created at once (comma list)")
    parser.add_argument("--racing", type=int, default=50, help="containers racing a writer")
    parser.add_argument("--writer-kills", type=int, default=30, help="writers SIGKILLed mid-rewrite")
    parser.add_argument("--shim-kills", type=int, default=30, help="shims SIGKILLed mid-rewrite")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run_soak([int(n) for n in args.concurrency.split(",") if n], args.racing, args.writer_kills,
                       args.shim_kills)  # fmt: skip
    clean = all(figures.clean for figures in results)
    print(f"soak: {'CLEAN' if clean else 'NOT CLEAN'} in {time.monotonic() - started:.0f} s")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
