"""Env files of the worst shapes for a dotenv reader, and their parse times next to a normal file's.

python-dotenv's regular expressions take quadratic time on some shapes (a long blank run inside an unquoted
value: 7 s for 64 KiB). The hook's reader (hook.pipeline.dotenvreader, used by every stage through
hook.pipeline.envfile.read_env_file) must take linear time on all of them: ``print_parse_table`` shows each shape's
parse time at the default max-bytes (64 KiB) and at 16 times that (1 MiB), next to a normal file of the same
size (python-dotenv's blank run takes 7 s at 64 KiB, and about 30 minutes at 1 MiB).
``tests/test_envfile_linear.py`` holds every shape at 1 MiB to a budget quadratic time cannot meet.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEVICES = "NVIDIA_VISIBLE_DEVICES=0,1\n"


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


def print_parse_table(size: int = 65536, factor: int = 16) -> None:
    """Print each shape's parse time at ``size`` and ``factor * size`` bytes, and the growth."""
    large_size = size * factor
    print(
        f"\nenv-file reader (hook.pipeline.envfile.read_env_file, in-process, best of 3): each shape at {size} B"
    )
    print(f"and {large_size} B, beside a normal file's (python-dotenv, blank run: 7 s at {size} B)")
    print(f"{'shape':<44} {f'{size} B':>10} {f'{large_size} B':>12}")
    for name, build in SHAPES.items():
        small, large = parse_ms(build(size).encode()), parse_ms(build(large_size).encode())
        print(f"{name:<44} {small:8.2f}ms {large:10.2f}ms", flush=True)
