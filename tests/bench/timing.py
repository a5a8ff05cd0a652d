"""Alternating-median timer for whole processes, shared by the benchmarks in this directory.

A benchmark compares a command with a baseline (the bare interpreter, ``python -I -c pass``) by running the
two in turn, A B A B ..., so that drift in the machine (frequency scaling, page cache, a neighbour's load)
hits both alike. Each run is one ``posix_spawn`` + ``waitpid`` timed with ``perf_counter_ns``: no shell, no
pipes, stdout and stderr go to /dev/null, so the harness adds as little as possible to either side. A
``prepare`` callback (for example: restore a config.json the command rewrites) runs before each run,
outside the timed part.

The judged figure is the median of the per-pair ratios (command / baseline, each pair run back to back);
the ratio of the two medians is printed beside it.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Command:
    """One process to time: argv, environment, working directory, a file for stdin, a pre-run callback."""

    argv: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    stdin_path: str | None = None
    prepare: Callable[[], None] | None = None


@dataclass(frozen=True)
class Comparison:
    """The timings (seconds) of a command and its baseline, run alternately."""

    name: str
    command: list[float]
    baseline: list[float]
    target: float | None = None
    command_cpu: list[float] = field(default_factory=list)  # user + system CPU seconds, per run
    baseline_cpu: list[float] = field(default_factory=list)

    @property
    def command_ms(self) -> float:
        """Median wall time of the command in milliseconds."""
        return statistics.median(self.command) * 1000

    @property
    def baseline_ms(self) -> float:
        """Median wall time of the baseline in milliseconds."""
        return statistics.median(self.baseline) * 1000

    @property
    def ratio(self) -> float:
        """Median of the per-pair ratios command / baseline (the judged figure)."""
        return statistics.median(c / b for c, b in zip(self.command, self.baseline, strict=True))

    @property
    def cpu_ratio(self) -> float:
        """Median of the per-pair CPU-time ratios: the cross-check that a busy machine moves least."""
        pairs = zip(self.command_cpu, self.baseline_cpu, strict=True)
        return statistics.median(c / b for c, b in pairs if b > 0) if self.command_cpu else float("nan")

    @property
    def ratio_of_medians(self) -> float:
        """Median command time over median baseline time (shown for comparison)."""
        return self.command_ms / self.baseline_ms

    @property
    def passed(self) -> bool:
        """Whether the judged ratio meets the target (always True without a target)."""
        return self.target is None or self.ratio <= self.target


class CommandFailedError(RuntimeError):
    """A timed process exited with a non-zero status: the benchmark would measure a failure path."""


# One process, or several run one after the other and timed as one (a container's create, kill, delete).
Steps = Command | Sequence[Command]


def run_once(command: Steps) -> float:
    """Spawn ``command`` once and return its wall time in seconds; raise if it exits non-zero."""
    return run_measured(command)[0]


def run_measured(command: Steps) -> tuple[float, float]:
    """Spawn ``command`` once (each of its steps in turn); return its wall time and its CPU time (user +
    system, the process and what it exec'd) in seconds, summed over the steps; raise if one exits non-zero."""
    if not isinstance(command, Command):
        times = [run_measured(step) for step in command]
        return sum(wall for wall, _ in times), sum(cpu for _, cpu in times)
    if command.prepare is not None:
        command.prepare()
    stdin_fd = os.open(command.stdin_path or os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    null_fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    old_cwd = Path.cwd() if command.cwd else None
    try:
        if command.cwd:
            os.chdir(command.cwd)  # posix_spawn has no chdir action in 3.11; the parent is single-threaded
        actions = [
            (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
            (os.POSIX_SPAWN_DUP2, null_fd, 1),
            (os.POSIX_SPAWN_DUP2, null_fd, 2),
        ]
        start = time.perf_counter_ns()
        pid = os.posix_spawn(command.argv[0], list(command.argv), command.env, file_actions=actions)
        _, status, usage = os.wait4(pid, 0)
        elapsed = (time.perf_counter_ns() - start) / 1e9
    finally:
        if old_cwd is not None:
            os.chdir(old_cwd)
        os.close(stdin_fd)
        os.close(null_fd)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise CommandFailedError(f"{' '.join(command.argv)} exited with status {code}")
    return elapsed, usage.ru_utime + usage.ru_stime


def compare(
    name: str,
    command: Steps,
    baseline: Steps,
    *,
    runs: int,
    warmup: int = 3,
    target: float | None = None,
) -> Comparison:
    """Time ``command`` and ``baseline`` alternately ``runs`` times each (after ``warmup`` untimed pairs)."""
    for _ in range(warmup):
        run_once(command)
        run_once(baseline)
    times: dict[str, list[float]] = {"command": [], "baseline": [], "command_cpu": [], "baseline_cpu": []}

    def run(which: str, what: Steps) -> None:
        wall, cpu = run_measured(what)
        times[which].append(wall)
        times[which + "_cpu"].append(cpu)

    for index in range(runs):
        # Swap which goes first on every pair so neither always runs right after the other's exit.
        if index % 2:
            run("baseline", baseline)
            run("command", command)
        else:
            run("command", command)
            run("baseline", baseline)
    return Comparison(name=name, target=target, **times)


def format_header() -> str:
    """The column header matching ``format_row``."""
    return (
        f"{'case':<46} {'cmd ms':>8} {'base ms':>8} {'ratio':>6} {'(med/med)':>9} {'target':>7}  result"
        f"  {'cpu ratio':>9}"
    )


def format_row(result: Comparison) -> str:
    """One line per comparison: medians, both ratios, target and PASS/FAIL."""
    target = f"<={result.target:.2f}x" if result.target is not None else "-"
    verdict = "PASS" if result.passed else "FAIL"
    if result.target is None:
        verdict = "info"
    return (
        f"{result.name:<46} {result.command_ms:8.2f} {result.baseline_ms:8.2f} "
        f"{result.ratio:5.2f}x {result.ratio_of_medians:8.2f}x {target:>7}  {verdict:<6}  {result.cpu_ratio:8.2f}x"
    )


def python_baseline(python: str = sys.executable) -> Command:
    """The bare interpreter on the same executable: ``python -I -c pass``."""
    return Command(argv=[python, "-I", "-c", "pass"])
