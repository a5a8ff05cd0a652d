"""Import guard: what each hot-path case imports, pinned module by module.

Every case runs in a fresh ``python -I -S`` with the package's directory put on ``sys.path`` explicitly, as
the installed wrappers start it, and records the modules it loaded beyond the bare interpreter (at the
exec that ends it, or at exit). A module added to a case fails ``test_module_set_is_pinned``: keep it off
the hot path (import it inside the function, on the branch that needs it), or, when a case really needs
it, add it to that case's set here and say what it costs in docs/performance.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dotenv
import pytest
from cdi_helpers import make_fake_node, nvidia_like_spec, write_spec
from conftest import REPO, MakeBundle, MakeConfig, MakeEnvFile

from hook.cdi import speccache
from hook.producer.namekey import load_key

# sys.path of the installed hook: the package's directory and python-dotenv's, nothing from the caller.
PACKAGE_PATH = [str(REPO), str(Path(dotenv.__file__).resolve().parent.parent)]
# Run an entry point's main() as the wrappers do, but record sys.modules at the exec (or at exit) instead.
SNIPPET = """\
import sys
before = set(sys.modules)
sys.path[:0] = {path!r}
import posix
out = sys.argv[1]
def dump():
    with open(out, "w") as fh:
        fh.write("\\n".join(sorted(set(sys.modules) - before)))
def fake_exec(path, argv, env=None):
    dump()
    with open(out + ".exec", "w") as fh:
        fh.write(path)
    posix._exit(0)
posix.execve = posix.execv = fake_exec
if "os" in sys.modules:
    sys.modules["os"].execve = sys.modules["os"].execv = fake_exec
from {entry} import main
code = main(sys.argv[2:])
dump()
sys.exit(code)
"""
# The interpreter each case runs with (``guard_python``): this one, and the one install copies into the tree
# (``install --python tree``), whose pruned standard library must hold every module a case loads.
GUARD_COMMAND: list[str] = [sys.executable]
COLD = frozenset({"typer", "click", "rich", "jsonschema", "re2"})
NOT_BEFORE_CONFIG = COLD | {"tomllib", "dotenv", "typing", "dataclasses", "json"}
# A plain config.toml is read by hook.util.tomlsubset and JSON by hook.util.jsontext: neither tomllib, typing nor json.
NOT_WITHOUT_ENV_FILE = COLD | {"dotenv", "tomllib", "typing", "dataclasses", "json"}


@pytest.fixture(autouse=True, scope="module", params=["python", "tree-python"])
def guard_python(request: pytest.FixtureRequest, tree_python: list[str]) -> Iterator[None]:
    """Run every case of this module with each interpreter."""
    GUARD_COMMAND[:] = tree_python if request.param == "tree-python" else [sys.executable]
    yield
    GUARD_COMMAND[:] = [sys.executable]


def run_entry(
    argv: list[str],
    tmp_path: Path,
    *,
    cwd: Path,
    stdin: bytes = b"",
    entry: str = "hook.__main__",
    env: dict[str, str] | None = None,
) -> tuple[set[str], bool]:
    """Run ``entry``'s ``main(argv)`` in a fresh ``python -I -S``; return the modules it added and whether it
    exec'd."""
    out = tmp_path / "modules.txt"
    out.unlink(missing_ok=True)
    Path(f"{out}.exec").unlink(missing_ok=True)
    proc = subprocess.run(
        [*GUARD_COMMAND, "-I", "-S", "-c", SNIPPET.format(path=PACKAGE_PATH, entry=entry), str(out), *argv],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env={
            "PATH": "/usr/bin:/bin",
            "XDG_CONFIG_HOME": str(tmp_path / "no-xdg"),
            "GPU_ENV_HOOK_NAME_KEY": os.environ["GPU_ENV_HOOK_NAME_KEY"],
            **(env or {}),
        },
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return set(out.read_text().split("\n")) - {""}, Path(f"{out}.exec").exists()


def stage_modules(bundle: Path, argv: list[str], tmp_path: Path) -> tuple[set[str], bool]:
    """Run the hook with ``argv`` in the bundle, its state on stdin; return top-level modules and the exec."""
    state = json.dumps({"pid": 1, "bundle": str(bundle)}).encode()
    modules, execed = run_entry(argv, tmp_path, cwd=bundle, stdin=state)
    return {name.split(".")[0] for name in modules}, execed


def test_snippet_interpreter_is_isolated(tmp_path: Path) -> None:
    """The guard's interpreter is isolated and without site: nothing but the package's path is added."""
    out = tmp_path / "path.txt"
    code = f"import sys; sys.path[:0] = {PACKAGE_PATH!r}; open({str(out)!r}, 'w').write(repr(sys.flags.isolated) + repr(sys.flags.no_site) + repr('site' in sys.modules))"
    subprocess.run([sys.executable, "-I", "-S", "-c", code], check=True, env={"PYTHONPATH": "/nowhere"})  # fmt: skip
    assert out.read_text() == "11False"


@pytest.mark.parametrize(
    ("env", "with_config"),
    [
        pytest.param(["PATH=/bin"], False, id="no-config-file"),
        pytest.param(["PATH=/bin", "NVIDIA_DRIVER_CAPABILITIES=all"], True, id="with-config-file"),
        pytest.param(None, True, id="no-process-env"),
    ],
)
def test_non_gpu_container_stays_lean(
    env: list[str] | None, with_config: bool, tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig
) -> None:
    """A container that asks for no GPU imports neither TOML, dotenv, typing, dataclasses nor cold libraries."""
    bundle = make_bundle(env)
    flags = ["-config", str(make_config())] if with_config else []
    modules, execed = stage_modules(bundle, [*flags, "prestart"], tmp_path)
    assert not execed
    assert "hook" in modules
    assert modules.isdisjoint(NOT_BEFORE_CONFIG), sorted(modules & NOT_BEFORE_CONFIG)


def test_non_gpu_container_with_the_generated_default_config(tmp_path: Path, make_bundle: MakeBundle) -> None:
    """A node whose config.toml is `gpu-env-hook config default` (every key spelled out) still skips parsing
    it for a container that asks for no GPU."""
    config = tmp_path / "config.toml"
    config.write_text(
        subprocess.run(
            [sys.executable, "-I", "-m", "hook", "config", "default"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    modules, execed = stage_modules(
        make_bundle(["PATH=/bin"]), ["-config", str(config), "prestart"], tmp_path
    )
    assert not execed
    assert modules.isdisjoint(NOT_BEFORE_CONFIG), sorted(modules & NOT_BEFORE_CONFIG)
    full_names = set((tmp_path / "modules.txt").read_text().split("\n"))
    assert "hook.stages.prestart" in full_names
    assert "hook.pipeline.config" not in full_names


@pytest.mark.parametrize(
    "stage", [pytest.param("prestart", id="prestart"), pytest.param("createRuntime", id="cri")]
)
def test_gpu_container_without_env_file(
    stage: str, tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig
) -> None:
    """A GPU container with a plain config reaches the exec without tomllib, typing, json, dotenv or cold libraries."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    modules, execed = stage_modules(bundle, ["-config", str(make_config()), stage], tmp_path)
    assert execed
    assert modules.isdisjoint(NOT_WITHOUT_ENV_FILE), sorted(modules & NOT_WITHOUT_ENV_FILE)


def test_config_beyond_the_subset_uses_tomllib(
    tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig
) -> None:
    """A config.toml beyond the plain subset (here a string escape) is parsed by tomllib, still without cold ones."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    config = make_config('[nvidia-container-runtime]\nmode = "\\u0061uto"\n')
    modules, execed = stage_modules(bundle, ["-config", str(config), "prestart"], tmp_path)
    assert execed
    assert "tomllib" in modules
    assert modules.isdisjoint(COLD | {"dotenv"}), sorted(modules & (COLD | {"dotenv"}))


@pytest.mark.parametrize(
    "stage", [pytest.param("poststart", id="poststart"), pytest.param("poststop", id="poststop")]
)
def test_noop_stages_stay_lean(stage: str, tmp_path: Path, make_bundle: MakeBundle) -> None:
    """poststart and poststop import nothing beyond the entry point's needs."""
    modules, execed = stage_modules(make_bundle(["NVIDIA_VISIBLE_DEVICES=0"]), [stage], tmp_path)
    assert not execed
    assert modules.isdisjoint(NOT_BEFORE_CONFIG), sorted(modules & NOT_BEFORE_CONFIG)


# --- the exact module set of each case ---------------------------------------------------------------------

# What os brings (it is not loaded by `python -I -S -c pass`): about a sixth of the interpreter's start. The
# hook's stages use the builtin posix module and hook.util.paths instead; the shim and the commands may use os.
OS = frozenset({"os", "os.path", "posixpath", "genericpath", "stat", "_stat", "_collections_abc"})
# Any entry point: message text (hook.util.safetext), the error classes (hook.util.errors: imported at the top of
# every module that raises one, ~0.2-0.4 ms, accepted for an import graph one can read), the config file's location
# and text, variable names and node paths. No ``__future__``: the package does not use ``from __future__ import
# annotations`` (that statement imports the module at run time, ~0.2 ms a start); an annotation naming a type
# imported only for the type checker is written as a string.
ENTRY = frozenset(
    {
        "hook",
        "hook.pipeline",
        "hook.pipeline.configfile",
        "hook.util",
        "hook.util.envvars",
        "hook.util.errors",
        "hook.util.paths",
        "hook.util.safetext",
    }
)
# Reading config.json and the state: the C JSON scanner, no json package.
SPEC = frozenset({"_json", "hook.pipeline.bundle", "hook.util.jsontext"})
STAGE = frozenset(
    {
        "hook.__main__",
        "hook.launcher",
        "hook.stages",
        "hook.stages.prestart",
    }
)
# Parsed settings (plain slotted classes, the TOML subset reader) and the env-file rules.
SETTINGS = frozenset({"hook.pipeline.config", "hook.util.tomlsubset"})
# The request: devices, capabilities, MIG (hook.cdi.names only for a CDI name or mount request).
REQUEST = frozenset({"hook.pipeline.request"})
# NVIDIA_REQUIRE_* (or a legacy CUDA_VERSION image): the requirement parser, only for an image that has one.
REQUIREMENTS = frozenset({"hook.pipeline.requirements"})
EXEC_CLI = frozenset({"hook.pipeline.nvcli"})
# Rewriting config.json (or writing an env file): the atomic writer, only for a file that is written.
WRITE = frozenset({"hook.util.atomicwrite"})
# The env-file code (opening beneath the directory, the linear reader hook.pipeline.dotenvreader: no re, no typing),
# loaded only when a container names a file; hook.pipeline.pod too for a file with a pin key, or when
# [env-file] require-pod-binding is set.
DOTENV_PARSER = frozenset(
    {
        "hook.pipeline.envfile",
        "hook.util.beneath",
        "stat",
        "_stat",
        "hook.pipeline.dotenvreader",
    }
)
# Naming an allocation (``env-file path``, the CDI allocation commands): HMAC-SHA256 from the standard library,
# which loads OpenSSL (~5 ms); no other producer command loads it.
HASHLIB = frozenset({"hmac", "hashlib", "_hashlib", "_blake2", "warnings"})
# The tree's interpreter has no OpenSSL (hook.install.bundle): hashlib takes its built-in hashes instead.
TREE_HASHLIB = frozenset({"_md5", "_sha1", "_sha256", "_sha3", "_sha512", "_operator"})
# The env-file commands a device plugin runs per container: no typer, no hashlib (OpenSSL), no typing.
PRODUCER = (
    ENTRY
    | OS
    | SETTINGS
    | {
        "hook.__main__",
        "hook.launcher",
        "hook.commands",
        "hook.commands.envfile",
        "hook.producer",
        "hook.producer.namekey",
    }
)
# The rules the writer and the checker hold a file to (``env-file path`` names a file and loads none of them).
PRODUCER_RULES = frozenset(
    {"hook.producer.envfile", "hook.pipeline.envfile", "hook.util.beneath", "hook.pipeline.pod"}
)
SHIM_CREATE = (
    ENTRY
    | OS
    | SPEC
    | STAGE - {"hook.__main__"}
    | SETTINGS
    | REQUEST
    | DOTENV_PARSER
    | WRITE
    | {
        "hook.stages.shim",
        "hook.pipeline.specenv",
        "hook.pipeline.handoff",
        "hook.launcher",
    }
)
# CDI mode in the shim: the engine (names, versions, spec files, the registry, the edits) and the spec cache.
CDI = frozenset(
    {
        "hook.cdi",
        "hook.cdi.edits",
        "hook.cdi.names",
        "hook.cdi.registry",
        "hook.cdi.spec",
        "hook.cdi.speccache",
        "hook.cdi.version",
        "hook.pipeline.cdidevices",
    }
)
# The NRI backstop of earlier releases' base specs (kept so they keep working): config.json read, not decoded
# unless it names the env-file variable; a handled container (the variable set empty) passes, having read the
# settings.
BACKSTOP = frozenset(
    {"hook.__main__", "hook.launcher", "hook.pipeline.specenv", "hook.nri", "hook.nri.backstop"}
)
PINNED = {
    "non-gpu": ENTRY | SPEC | STAGE,
    "nvidia-visible-devices": ENTRY | SPEC | STAGE | SETTINGS | REQUEST | EXEC_CLI,
    "cuda-requirement": ENTRY | SPEC | STAGE | SETTINGS | REQUEST | REQUIREMENTS | EXEC_CLI,
    "env-file": ENTRY | SPEC | STAGE | SETTINGS | REQUEST | EXEC_CLI | DOTENV_PARSER | WRITE,
    "precreate": ENTRY
    | SPEC
    | STAGE
    | SETTINGS
    | DOTENV_PARSER
    | {"hook.stages.precreate", "hook.pipeline.specenv", "hook.pipeline.handoff"},
    "shim-create": SHIM_CREATE,
    # The hook the shim injected: the decision in its args, the env file never read (no dotenv parser).
    "handed-off": ENTRY
    | SPEC
    | STAGE
    | SETTINGS
    | REQUEST
    | EXEC_CLI
    | WRITE
    | {
        "hook.pipeline.handoff",
        "hook.pipeline.envfile",
        "hook.util.beneath",
        "stat",
        "_stat",
    },
    # CDI mode, the device's edits from a YAML spec (``nvidia-ctk cdi generate``'s default) whose decoded
    # document is in the spec cache: no YAML parser, the entry read by the C JSON scanner.
    "shim-cdi-yaml-cached": SHIM_CREATE | CDI,
    # The same device named by the container itself: no env file, so none of the env-file code (the spec
    # files' trust check still opens them with hook.util.beneath's rules).
    "shim-cdi-yaml-cached-no-env-file": SHIM_CREATE - DOTENV_PARSER
    | CDI
    | {"hook.util.beneath", "stat", "_stat"},
    # The config names the runtime: read with the TOML subset reader.
    "shim-state": ENTRY | OS | {"hook.stages", "hook.stages.shim", "hook.util.tomlsubset"},
    # The key's place is judged with hook.util.beneath's trust walk (root's alone, all the way up) before
    # the key is read: one module more than naming needs, the rule stated once (issue 27).
    "producer-path": PRODUCER - OS | HASHLIB | {"stat", "_stat", "hook.util.beneath"},
    "producer-write": PRODUCER | PRODUCER_RULES | WRITE,
    "producer-check": PRODUCER | PRODUCER_RULES | DOTENV_PARSER,
    "backstop-plain": ENTRY | SPEC | BACKSTOP,
    "backstop-handled": ENTRY | SPEC | SETTINGS | BACKSTOP,
}
ENV_FILE_CASES = (
    "env-file",
    "precreate",
    "shim-create",
    "shim-cdi-yaml-cached",
    "producer-write",
    "producer-check",
)
NO_EXEC_CASES = (
    "non-gpu",
    "precreate",
    "producer-path",
    "producer-write",
    "producer-check",
    "backstop-plain",
    "backstop-handled",
)


def pinned_case(name: str, tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig,
                make_env_file: MakeEnvFile) -> tuple[set[str], bool]:  # fmt: skip
    """Run one case of ``PINNED``; return the modules it added and whether it exec'd."""
    env_dir = tmp_path / "nvidia-env"
    config = make_config(
        f'[env-file]\ndirectories = ["{env_dir}"]\n\n[nvidia-container-runtime]\nruntimes = ["/bin/true"]\n'
    )
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=0\nOTHER=1\n")
    env = {
        "non-gpu": ["PATH=/bin", "HOSTNAME=x"],
        "nvidia-visible-devices": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"],
        "cuda-requirement": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=11.0"],
        "shim-cdi-yaml-cached-no-env-file": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"],
    }.get(name, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void", f"NVIDIA_ENV_FROM_FILE={env_file}"])
    bundle = make_bundle(env)
    state = json.dumps({"pid": 1, "bundle": str(bundle)}).encode()
    shim_env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
    if name == "precreate":
        spec = (bundle / "config.json").read_bytes()
        return run_entry(["-config", str(config), "precreate"], tmp_path, cwd=tmp_path, stdin=spec)
    if name == "shim-create":
        argv = ["--root", str(tmp_path / "state"), "create", "--bundle", str(bundle), "c1"]
        return run_entry(argv, tmp_path, cwd=tmp_path, entry="hook.stages.shim", env=shim_env)
    if name.startswith("shim-cdi-"):
        spec_file, cache = cdi_node(tmp_path, config, cached="-cached" in name)
        argv = ["--root", str(tmp_path / "state"), "create", "--bundle", str(bundle), "c1"]
        modules, execed = run_entry(argv, tmp_path, cwd=tmp_path, entry="hook.stages.shim", env=shim_env)
        edited = json.loads((bundle / "config.json").read_text())
        assert "/dev/nvidia0" in [device["path"] for device in edited["linux"]["devices"]]
        assert (cache / str(speccache.entry_name(str(spec_file)))).is_file()
        return modules, execed
    if name.startswith("producer-"):
        load_key()  # the node's naming key exists after the first name: the steady state is pinned
        command = {
            "producer-path": ["path", "gpu-1", "gpu-0"],
            "producer-write": ["write", str(env_dir / "w.env"), "NVIDIA_VISIBLE_DEVICES=0", "--pod-uid", "p"],
            "producer-check": ["check", str(env_file)],
        }[name]
        return run_entry(["-config", str(config), "env-file", *command], tmp_path, cwd=tmp_path)
    if name == "handed-off":
        merged = make_bundle([*env, "NVIDIA_VISIBLE_DEVICES=0", "OTHER=1"], name="merged")
        handoff = "-env-file-merged=unpinned:NVIDIA_VISIBLE_DEVICES,OTHER"
        state = json.dumps({"pid": 1, "bundle": str(merged)}).encode()
        return run_entry(["-config", str(config), handoff, "prestart"], tmp_path, cwd=merged, stdin=state)
    if name.startswith("backstop-"):
        handled = make_bundle(
            ["PATH=/bin", "NVIDIA_ENV_FROM_FILE=", "NVIDIA_VISIBLE_DEVICES=0"], name="handled"
        )
        target = handled if name == "backstop-handled" else make_bundle(["PATH=/bin"], name="plain")
        state = json.dumps({"pid": 1, "bundle": str(target)}).encode()
        return run_entry(["-config", str(config), "nri-backstop"], tmp_path, cwd=target, stdin=state)
    if name == "shim-state":
        argv = ["--root", str(tmp_path / "state"), "state", "c1"]
        return run_entry(argv, tmp_path, cwd=tmp_path, entry="hook.stages.shim", env=shim_env)
    return run_entry(["-config", str(config), "prestart"], tmp_path, cwd=bundle, stdin=state)


def cdi_node(tmp_path: Path, config: Path, *, cached: bool) -> tuple[Path, Path]:
    """Put ``config`` in CDI mode with an NVIDIA-shaped YAML spec and a scratch spec cache; ``cached``:
    store the spec's entry first (as an earlier create would have). Return the spec and the cache."""
    spec = write_spec(tmp_path / "cdi", "nvidia.yaml", nvidia_like_spec(make_fake_node(tmp_path / "node")))
    cache = tmp_path / "spec-cache"
    with config.open("a") as fh:
        fh.write(f'\n[gpu-env]\ndevice-mode = "cdi"\n[gpu-env.cdi]\nspec-dirs = ["{spec.parent}"]\n')
        fh.write(f'spec-cache = "{cache}"\n')
    if cached:
        from hook.cdi.spec import parse_spec_bytes

        document = parse_spec_bytes(spec.read_bytes(), path=str(spec)).document
        info = spec.stat()
        read_at = info.st_ctime_ns + speccache.SETTLE_NS  # as if read a while after it was written
        speccache.store(str(cache), str(spec), speccache.identity(info), document, read_at_ns=read_at)
    else:
        time.sleep(speccache.SETTLE_NS / 1e9)  # the create stores the entry only for a settled spec
    return spec, cache


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in PINNED])
def test_module_set_is_pinned(
    name: str, tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig, make_env_file: MakeEnvFile
) -> None:
    """Each case imports exactly its pinned modules: one more (or one fewer) fails here."""
    if name in ENV_FILE_CASES and os.geteuid() != 0:
        pytest.skip("the env file must be owned by root")
    modules, execed = pinned_case(name, tmp_path, make_bundle, make_config, make_env_file)
    pinned = PINNED[name]
    if GUARD_COMMAND[0] != sys.executable and "_hashlib" in pinned:
        pinned = pinned - {"_hashlib"} | TREE_HASHLIB
    assert {"added": sorted(modules - pinned), "gone": sorted(pinned - modules)} == {
        "added": [],
        "gone": [],
    }
    assert execed == (name not in NO_EXEC_CASES)


def test_uncached_yaml_spec_is_decoded_and_cached(
    tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig, make_env_file: MakeEnvFile
) -> None:
    """The YAML spec not cached yet: PyYAML decodes it (its own modules, not pinned here), the entry is
    written, and our modules are those of the cached case."""
    if os.geteuid() != 0:
        pytest.skip("the env file and the cache must be root's")
    modules, execed = pinned_case("shim-cdi-yaml", tmp_path, make_bundle, make_config, make_env_file)
    assert execed
    assert "yaml" in modules
    ours = {name for name in modules if name.split(".")[0] == "hook"}
    assert ours == {name for name in PINNED["shim-cdi-yaml-cached"] if name.split(".")[0] == "hook"}
