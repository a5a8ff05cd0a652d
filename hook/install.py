"""``install`` / ``uninstall``: placeholder; the install helper replaces this module (issue 6).

``register(app)`` adds the two commands to the typer app built by ``hook.cli``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import typer


def register(app: typer.Typer) -> None:
    """Add the ``install`` and ``uninstall`` commands to ``app`` (none yet)."""
