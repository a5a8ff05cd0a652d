"""Env files of the worst shapes for a dotenv reader, and their parse times next to a normal file's.

python-dotenv's regular expressions take quadratic time on some shapes (a long blank run inside an unquoted
value: 7 s for 64 KiB). The hook's reader (hook.pipeline.dotenvreader, used by every stage through
hook.pipeline.envfile.read_env_file) must take linear time on all of them: ``print_parse_table`` shows each shape's
parse time at the default max-bytes (64 KiB) and at 16 times that (1 MiB), next to a normal file of the same
size (python-dotenv's blank run takes 7 s at 64 KiB, and about 30 minutes at 1 MiB), and judges each
shape linear when its time per byte at 1 MiB is at most ``LINEAR_GROWTH`` times its time per byte at 64 KiB.
``tests/test_envfile_linear.py`` holds every shape at 1 MiB to a budget quadratic time cannot meet.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEVICES = "NVIDIA_VISIBLE_DEVICES=0,1\n"
# Linear time: the time per byte stays flat from 64 KiB to 1 MiB (quadratic time would grow 16 times,
# n**1.5 four times; the margin is for the cache and a loaded machine's noise, which on a 2-core machine
# shared with other jobs moves one best-of-3 time by up to half). A shape read in under LINEAR_FLOOR_MS at
# 64 KiB (a few passes in C) is judged as if it took that long: at that speed a 1 MiB string no longer fits
# the cache.
LINEAR_GROWTH = 2.0
LINEAR_FLOOR_MS = 1.0


def _repeat_lines(size: int, line: Callable[[int], str]) -> str:
    """Numbered lines (``line(i)``) up to ``size`` bytes, after the devices line."""
    parts, total, index = [DEVICES], len(DEVICES), 0
    while True:
        text = line(index) + "\n"
        if total + len(text) > size:
            return "".join(parts)
        parts.append(text)
        total += len(text)
        index += 1


def _one_value(size: int, prefix: str, run: str, suffix: str) -> str:
    """The devices line, then one binding ``prefix + run * k + suffix`` filling ``size`` bytes."""
    room = size - len(DEVICES) - len(prefix) - len(suffix) - 1
    return DEVICES + prefix + run * (room // len(run)) + suffix + "\n"


# Each shape is an accepted file (the devices, then the shape), so the whole hook path can run it too.
SHAPES: dict[str, Callable[[int], str]] = {
    "normal (quoted values)": lambda size: _repeat_lines(size, lambda i: f'APP_{i}="value-{i}-{"x" * 30}"'),
    "blank run in a value (python-dotenv: 7 s)": lambda size: _one_value(size, "A=x", " ", "y"),
    "blank run, then '#'": lambda size: _one_value(size, "A=x", " ", "#"),
    "' #' repeated in a value": lambda size: _one_value(size, "A=x", " #", ""),
    "escaped quotes in a value": lambda size: _one_value(size, 'A="', '\\"', '"'),
    "comment lines": lambda size: _repeat_lines(size, lambda _: "#"),
    "blank lines": lambda size: DEVICES + "\n" * (size - len(DEVICES) - 4) + "A=1\n",
    "multi-line quoted values": lambda size: _repeat_lines(size, lambda i: f'A{i}="\n"'),
    "quoted keys": lambda size: _repeat_lines(size, lambda i: f"'A{i}'=1"),
    "lone CR line ends": lambda size: _repeat_lines(size, lambda i: f"A{i}=1\r"),
    # Many short bindings of the other shapes a reader must take apart (the ones above are one each).
    "lone CR line ends and in quoted values": lambda size: _repeat_lines(
        size, lambda i: f"A{i}='\r'\rB{i}=2"
    ),
    "export before every key": lambda size: _repeat_lines(size, lambda i: f"export A{i}=1"),
    "indented bindings": lambda size: _repeat_lines(size, lambda i: f"  A{i}=1"),
    "inline comments": lambda size: _repeat_lines(size, lambda i: f"A{i}=1 # c"),
    "a comment after every quoted value": lambda size: _repeat_lines(size, lambda i: f'A{i}="x" # c'),
    "an escaped quote in every value": lambda size: _repeat_lines(size, lambda i: f'A{i}="\\""'),
    "a blank line after every binding": lambda size: _repeat_lines(size, lambda i: f"A{i}=1\n"),
    "a comment line between multi-line values": lambda size: _repeat_lines(size, lambda i: f'#\nA{i}="\n"'),
    "values holding '='": lambda size: _repeat_lines(size, lambda i: f"A{i}=x=y"),
    "both kinds of quote": lambda size: _repeat_lines(size, lambda i: f"A{i}='x'" if i % 2 else f'A{i}="x"'),
}


def parse_ms(text: bytes, runs: int = 3) -> float:
    """Best time (ms) of ``runs`` reads of ``text`` by the hook's own reader (hook.pipeline.envfile.read_env_file), in
    this process (the best, as the machine's noise only ever adds)."""
    from hook.pipeline.envfile import read_env_file

    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read_env_file(text, "/bench.env")
        times.append(time.perf_counter() - start)
    return min(times) * 1000


def print_parse_table(size: int = 65536, factor: int = 16) -> list[str]:
    """Print each shape's parse time at ``size`` and ``factor * size`` bytes and the growth of its time per
    byte (against at least ``LINEAR_FLOOR_MS`` at ``size``); return the shapes that are not linear (growth
    over ``LINEAR_GROWTH``)."""
    large_size = size * factor
    print(
        f"\nenv-file reader (hook.pipeline.envfile.read_env_file, in-process, best of 5 / 3): each shape at {size} B"
    )
    print(f"and {large_size} B, beside a normal file's (python-dotenv, blank run: 7 s at {size} B);")
    print(
        f"growth: time per byte at {large_size} B / at {size} B (at least {LINEAR_FLOOR_MS} ms there), "
        f"target <= {LINEAR_GROWTH} (linear time)"
    )
    print(f"{'shape':<44} {f'{size} B':>10} {f'{large_size} B':>12} {'growth':>7}")
    failed = []
    for name, build in SHAPES.items():
        small, large = parse_ms(build(size).encode(), runs=5), parse_ms(build(large_size).encode())
        growth = large / factor / max(small, LINEAR_FLOOR_MS)
        verdict = "ok" if growth <= LINEAR_GROWTH else "OVER"
        print(f"{name:<44} {small:8.2f}ms {large:10.2f}ms {growth:6.2f}x {verdict}", flush=True)
        if growth > LINEAR_GROWTH:
            failed.append(f"not linear: {name}")
    return failed
