"""Diagnostics on stderr in upstream's two shapes: plain Go ``log`` lines and logrus warnings."""

import sys
import time

from hook.util.safetext import LINE_LIMIT, escape


def info(message: str) -> None:
    """Print a plain line, as Go's ``log.Printf`` with no flags does."""
    sys.stderr.write(escape(message, LINE_LIMIT) + "\n")


def warning(message: str) -> None:
    """Print a logrus-style text warning: ``time="…" level=warning msg="…"``."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    escaped = escape(message, LINE_LIMIT).replace("\\", "\\\\").replace('"', '\\"')
    sys.stderr.write(f'time="{stamp}" level=warning msg="{escaped}"\n')
