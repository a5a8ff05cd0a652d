"""The hook as a node runs it, for the benchmarks: ``gpu-env-hook install`` into a scratch ``--root``.

``scratch_install`` builds a throwaway interpreter without pip (a venv from the base interpreter holding
copies of ``hook/`` and ``dotenv/``, as a wheel install leaves them) beneath the scratch root, at
``/opt/gpu-env-hook-bench-python`` on the node, so that install byte-compiles the tree with it
as on a node; runs ``install --engine podman --root SCRATCH --python THAT --config CFG`` and returns what
the engine would run: the oci-hooks.d JSON's
``hook`` entry (path, args, env) and the runtime wrapper. Paths in what install wrote are the node's; each
is found under the scratch root. When install lays files out beneath node directories that this machine
does not have (``/opt/...``), the benchmark runs in its own mount namespace with the scratch copies bound
there (``enter_namespace`` + ``bind_node_dirs``), so that the installed files run unchanged.

The project's own .venv holds an *editable* install whose ``.pth`` finder would run at every start without
``-S``; a clean interpreter is what a node has.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hook.util.paths import HOOK_JSON_NAME, LIBEXEC_DIR, OCI_HOOKS_DIRS, runtime_wrapper

NAMESPACE_MARK = "GPU_ENV_HOOK_BENCH_NAMESPACE"
# The base interpreter to install for, when not the one running the benchmark (``base_interpreter``); ``tree``:
# the tree's own interpreter (``install --python tree``), a copy of ``TREE_BASE`` with its loader and libraries.
BENCH_PYTHON = "GPU_ENV_HOOK_BENCH_PYTHON"
TREE = "tree"
# What install copies for ``tree`` here: the node interpreter the DaemonSet's image carries (Debian 12's
# python3.11), as this machine has it.
TREE_BASE = "/usr/bin/python3"
# Node directories install may write below, that a scratch root can stand in for inside the namespace.
BINDABLE = ("opt",)
# The clean interpreter's directory below /opt on the scratch node.
NODE_PYTHON = "gpu-env-hook-bench-python"


@dataclass(frozen=True)
class Installed:
    """What a scratch install gives a benchmark to run."""

    root: Path
    python: str  # the interpreter the installed files run (its binary)
    command: list[str]  # how the installed files start it (the tree's: through its loader)
    hook_argv: list[str]  # oci-hooks.d "args" without the stage (argv[0] as the engine passes it)
    hook_path: str  # the executable the engine starts (found under the root when it is there)
    hook_env: dict[str, str]  # oci-hooks.d "env"
    runtime_wrapper: str  # the runtime shim as engines start it
    config: Path  # the config.toml baked into the installed files (the same path on this machine)

    def hook_command(self, *args: str) -> list[str]:
        """The argv for posix_spawn: the installed executable with the hooks.d args and ``args``."""
        return [*self.hook_argv, *args]


def enter_namespace() -> None:
    """Re-execute this benchmark in a private mount namespace (root only), once."""
    if os.geteuid() != 0 or os.environ.get(NAMESPACE_MARK) or not shutil.which("unshare"):
        return
    env = {**os.environ, NAMESPACE_MARK: "1"}
    argv = ["unshare", "--mount", "--propagation", "private", sys.executable, *sys.argv]
    os.execvpe("unshare", argv, env)


def tree_wanted() -> bool:
    """Tell whether the benchmarks install the tree's own interpreter (``GPU_ENV_HOOK_BENCH_PYTHON=tree``)."""
    return os.environ.get(BENCH_PYTHON) == TREE


def base_interpreter() -> str:
    """The interpreter the benchmarks install for: ``GPU_ENV_HOOK_BENCH_PYTHON`` (e.g. a node's
    ``/usr/bin/python3``; ``tree``: ``TREE_BASE``, copied into the tree), else the base interpreter of the one
    running the benchmark."""
    if tree_wanted():
        return TREE_BASE
    return os.environ.get(BENCH_PYTHON) or str(getattr(sys, "_base_executable", sys.executable))


def make_tree_installer(venv: Path) -> str:
    """For ``tree``: a pip-less venv of ``TREE_BASE`` that sees this venv's packages (the package and what
    install needs); install run with it copies ``TREE_BASE`` into the tree. Return its python."""
    subprocess.run([TREE_BASE, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    ours = subprocess.run(
        [sys.executable, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "bench-parent.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return str(python)


def make_clean_python(venv: Path) -> str:
    """Build a pip-less venv of ``base_interpreter()`` holding copies of hook/ and dotenv/ at ``venv``;
    return its python. The interpreter is a copy (``--copies``), not a link out of the
    directory: placed beneath a scratch root, it is there for ``install`` as a node's interpreter is
    (install byte-compiles the tree with it)."""
    import dotenv

    import hook

    base_python = base_interpreter()
    subprocess.run([base_python, "-m", "venv", "--without-pip", "--copies", str(venv)], check=True)
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
    subprocess.run([str(python), "-I", "-m", "compileall", "-q", site], check=True)
    return str(python)


def under(root: Path, node_path: str) -> str:
    """Where a node path is: beneath the scratch root when install put it there, else the path itself."""
    scratch = root / node_path.lstrip("/")
    return str(scratch) if scratch.exists() else node_path


def bind_node_dirs(root: Path) -> list[str]:
    """Inside the namespace, put the scratch root's copies of ``BINDABLE`` directories at the node paths."""
    bound: list[str] = []
    if not os.environ.get(NAMESPACE_MARK):
        return bound
    for name in BINDABLE:
        scratch = root / name
        if scratch.is_dir() and Path("/" + name).is_dir():
            subprocess.run(["mount", "--bind", str(scratch), "/" + name], check=True)
            bound.append("/" + name)
    return bound


def unbind_node_dirs() -> None:
    """Inside the namespace, take every scratch copy ``bind_node_dirs`` put at a node path off it again (a
    second install binds over the first): a bound scratch directory cannot be removed while it is bound."""
    if not os.environ.get(NAMESPACE_MARK):
        return
    for name in BINDABLE:
        while subprocess.run(["mountpoint", "-q", "/" + name], check=False).returncode == 0:
            if subprocess.run(["umount", "/" + name], check=False).returncode != 0:
                break


def scratch_install(workdir: Path, config_text: str, *, runtime: str | None = None) -> Installed:
    """Install for podman into ``workdir/root`` with a clean interpreter (a venv of ``base_interpreter()``)
    at ``/opt/<NODE_PYTHON>`` on the node (beneath the root); return what engines would run."""
    root = workdir / "root"
    if tree_wanted():
        installer = make_tree_installer(workdir / "installer")
        node_python = TREE
    else:
        installer = sys.executable
        node_python = f"/opt/{NODE_PYTHON}/bin/python"
        python = make_clean_python(root / "opt" / NODE_PYTHON)
    config = workdir / "config.toml"
    config.write_text(config_text, encoding="utf-8")
    (root / str(config.parent).lstrip("/")).mkdir(parents=True, exist_ok=True)
    shutil.copy(config, root / str(config).lstrip("/"))
    argv = [installer, "-m", "hook", "install", "--engine", "podman", "--root", str(root)]
    argv += ["--python", node_python, "--config", str(config)]
    help_text = subprocess.run(
        [sys.executable, "-m", "hook", "install", "--help"], capture_output=True, text=True, check=True
    ).stdout
    if runtime is not None and "--runtime" in help_text:
        argv += ["--runtime", runtime]
    subprocess.run(argv, check=True, capture_output=True)
    bind_node_dirs(root)
    hooks_json = root / OCI_HOOKS_DIRS[0].lstrip("/") / HOOK_JSON_NAME
    entry = json.loads(hooks_json.read_text())["hook"]
    args = list(entry.get("args") or [entry["path"]])
    if args[-1] == "prestart":
        args = args[:-1]
    # The launch script install writes beside the wrappers (the hooks JSON names its node path): its copy.
    args = [under(root, arg) if arg.startswith(LIBEXEC_DIR + "/") else arg for arg in args]
    env = dict(item.split("=", 1) for item in entry.get("env", []))
    hook_path = under(root, entry["path"])
    command = [python] if not tree_wanted() else []
    if tree_wanted():  # the interpreter's part of the entry's args (the tree is bound at its node path)
        command = args[: args.index("-I")]
        python = command[-1]
    return Installed(
        root=root,
        python=python,
        command=command,
        hook_argv=[hook_path, *args[1:]] if args else [hook_path],
        hook_path=hook_path,
        hook_env=env,
        runtime_wrapper=under(root, runtime_wrapper("podman")),
        config=config,
    )
