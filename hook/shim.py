"""The runtime shim under the name runtime wrappers imported it by before the layout (it is
``hook.stages.shim``): ``install`` switches ``current`` to a new version a few milliseconds before it rewrites
the wrappers, and a ``create`` started through an earlier version's wrapper in between imports ``hook.shim``
from the new tree. Nothing in the package imports this module.
"""

from hook.stages.shim import main

__all__ = ["main"]
