"""The package's parts import one way only, and no module imports itself back through others.

Parts, from the top down: the entry points (``hook.__main__``, ``hook.deviceplugin``), ``commands``
(for people), ``install``, ``nri`` (the NRI plugin, which reuses the shim's decisions), ``stages`` and
``producer`` (side by side, neither imports the other), ``pipeline`` (one container start's steps),
``cdi`` (the CDI engine) and ``util``. A module imports only
from its own part or a part below it. ``hook`` (the version) and ``hook.launcher`` import nothing of the
package, so every part may use them: the launcher finds the entry it runs by name, at run time.

Every import counts, wherever it is written: at the top, inside a function, under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "hook"
# Each part's level: a module may import from its own part and from parts of a lower level.
LEVELS = {
    "hook": 0,
    "hook.launcher": 0,
    "hook.util": 0,
    "hook.cdi": 1,
    "hook.pipeline": 2,
    "hook.stages": 3,
    "hook.producer": 3,
    "hook.nri": 4,
    "hook.install": 5,
    "hook.commands": 6,
    "hook.__main__": 7,
    "hook.deviceplugin": 7,
    "hook.shim": 7,  # the shim's pre-layout entry name, for runtime wrappers of earlier versions
}
LEAVES = ("hook", "hook.launcher")  # import nothing of the package


def module_name(path: Path) -> str:
    """``hook/pipeline/bundle.py`` -> ``hook.pipeline.bundle``; a package's ``__init__`` is the package."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The package's modules ``name`` imports anywhere in its file (packages' ``__init__`` left out:
    they import nothing)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module in MODULES and module != name and not is_package(module)}


def is_package(name: str) -> bool:
    """Tell whether ``name`` is a package (its ``__init__``): importing one of its modules imports it."""
    return MODULES[name].name == "__init__.py" and name != "hook"


def part(name: str) -> str:
    """The part ``name`` belongs to: the longest key of ``LEVELS`` that is it or a package above it."""
    return max((key for key in LEVELS if name == key or name.startswith(key + ".")), key=len)


GRAPH = {name: imports_of(name) for name in MODULES}


def test_every_module_has_a_part() -> None:
    """A new top-level module or subpackage gets a level here before it lands."""
    assert [name for name in MODULES if name != "hook" and part(name) == "hook"] == []


@pytest.mark.parametrize("leaf", [pytest.param(leaf, id=leaf) for leaf in LEAVES])
def test_leaves_import_nothing_of_the_package(leaf: str) -> None:
    """``hook`` and ``hook.launcher`` stand below every part: they import none of the package's modules."""
    assert sorted(GRAPH[leaf]) == []


def test_imports_go_down_the_layers() -> None:
    """Every import stays in its part or goes to a lower level (stages and producer never import each
    other)."""
    upward = [
        f"{name} -> {target}"
        for name, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if part(target) != part(name) and LEVELS[part(target)] >= LEVELS[part(name)] and target not in LEAVES
    ]
    assert upward == []


def test_no_import_cycle() -> None:
    """No module reaches itself through the modules it imports (a cycle hides which one is the base)."""
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in sorted(GRAPH[name]):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                cycles.append(" <-> ".join(sorted(component)))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    assert cycles == []
