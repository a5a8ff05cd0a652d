"""Hook entries for runc bundles: our hook, a probe hook that records what a prestart hook sees, a config.

runc runs each prestart hook with cwd = the bundle, the OCI state JSON on stdin and only the entry's own
``env``; hooks run in order, and a failing one makes ``runc run`` fail with the hook's output in its error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

STANDIN_CLI = Path(__file__).resolve().parent.parent / "standin" / "nvidia-container-cli"
HOOK_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]

# Records the state on stdin, the NSpid line of the state's pid (host pid, then its pid inside the
# container's pid namespace: 1 for the container's init) and config.json's process.env as seen now.
_PROBE = """\
import json, os, sys
state = json.load(sys.stdin)
with open(f"/proc/{state['pid']}/status") as fh:
    nspid = [int(n) for n in next(l for l in fh if l.startswith("NSpid:")).split()[1:]]
with open("config.json", "rb") as fh:
    env = json.load(fh)["process"]["env"]
with open(sys.argv[1], "w") as out:
    json.dump({"state": state, "nspid": nspid, "cwd": os.getcwd(), "env": env}, out)
"""


def hook_entry(config: Path, *flags: str) -> dict[str, Any]:
    """The prestart entry an engine would write for our hook: ``python -I -m hook -config CFG [flags] prestart``."""
    args = [sys.executable, "-I", "-m", "hook", "-config", str(config), *flags, "prestart"]
    return {"path": sys.executable, "args": args, "env": list(HOOK_ENV)}


def probe_entry(record: Path) -> dict[str, Any]:
    """A prestart entry that records what a hook at its place in the list sees (see ``_PROBE``)."""
    args = [sys.executable, "-I", "-c", _PROBE, str(record)]
    return {"path": sys.executable, "args": args, "env": list(HOOK_ENV)}


def write_config(path: Path, *, record: Path, env_dirs: list[Path] | None = None) -> Path:
    """Write a config.toml that points the cli at the recording stand-in (and lists env-file directories)."""
    lines = [
        "[nvidia-container-cli]",
        f'path = "{STANDIN_CLI}"',
        f'environment = ["STANDIN_RECORD={record}"]',
    ]
    if env_dirs is not None:
        lines += ["", "[env-file]", f"directories = {json.dumps([str(d) for d in env_dirs])}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load_record(path: Path) -> dict[str, Any] | None:
    """Read a JSON record written by the stand-in or the probe; None if it was never written."""
    if not path.exists():
        return None
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record
