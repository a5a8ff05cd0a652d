"""``install`` / ``uninstall``: put the hook on a node for one engine, and take exactly that off again.

``install`` writes, in this order (an engine never sees a config naming a file that is not there yet):
the wrappers the engines execute (``hook.paths.HOOK_WRAPPER``, ``RUNTIME_WRAPPER`` and, with
``--as-nvidia-hook``, ``NVIDIA_HOOK_ALIAS``), then the engine's config (a containerd or CRI-O drop-in, the
``runtimes`` entry merged into Docker's ``daemon.json``), then the oci-hooks.d JSON (podman, CRI-O) last.
Before any of it, a manifest (``<STATE_DIR>/install-<engine>.json``) records each file's digest and the file
it replaced, and the directories install created; ``uninstall`` walks it backwards: a file still as
install wrote it is removed or its predecessor restored byte for byte, ``daemon.json`` loses only our key,
a file someone changed since is left alone and named. A file another engine's manifest also lists stays.

Every path is the node's (``/usr/local/...``); ``--root DIR`` only prefixes where files are read and
written, so a DaemonSet with the host's ``/`` at ``/host`` runs ``install --root /host`` and the engines see
the node's own paths. Templates are package data (``hook/templates``); every JSON written is validated with
``hook.schema`` before it is written.
"""

from __future__ import annotations

import base64
import enum
import fnmatch
import hashlib
import json
import os
import re
import shlex
import stat
import subprocess
import sys
from importlib import resources
from typing import Annotated, Any, NamedTuple

import typer

from hook import __version__, envvars, paths
from hook.bundle import write_atomic
from hook.errors import HookError

ENGINES = ("podman", "crio", "containerd", "docker")
# Console-script targets the wrappers run (pyproject's [project.scripts]).
HOOK_ENTRY = "hook.__main__"
RUNTIME_ENTRY = "hook.shim"
# Variables a wrapper lets through from its caller (when non-empty); all others are dropped.
# The hook keeps only the variables upstream reads to find its config.
HOOK_KEEP_ENV = (envvars.NVIDIA_CTK_CONFIG_FILE_PATH, envvars.XDG_CONFIG_HOME)
# The runtime shim must hand runc the engine's environment (NOTIFY_SOCKET, XDG_RUNTIME_DIR, proxies for
# hooks that inherit runc's environment, ...): None keeps it, less the dynamic loader's variables.
RUNTIME_KEEP_ENV: tuple[str, ...] | None = None
LOADER_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")
MANIFEST_VERSION = 1
DOCKER_MERGE = "docker-runtime"
CONTAINERD_IMPORT = paths.CONTAINERD_DROPIN_DIR + "/*.toml"
EXECUTABLE_MODE = 0o755
CONFIG_MODE = 0o644
_BARE_TOML_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")


class InstallError(HookError):
    """install or uninstall cannot proceed; nothing was changed by the step that refused."""


class InstallOptions(NamedTuple):
    """What to install: every path is the node's; ``root`` only prefixes reads and writes."""

    engine: str
    python: str
    root: str = "/"
    config: str | None = None
    as_nvidia_hook: bool = False
    precreate: bool = False
    hooks_dir: str = paths.OCI_HOOKS_DIRS[0]
    containerd_config_version: int | None = None


class PlannedFile(NamedTuple):
    """One file install writes: where (node path), what, its mode, and how uninstall undoes it."""

    path: str
    data: bytes
    mode: int
    merge: str | None = None


class Plan(NamedTuple):
    """Everything install will write for one engine, in write order, and what to tell the user after."""

    engine: str
    files: tuple[PlannedFile, ...]
    notes: tuple[str, ...]


# --- pure builders ---------------------------------------------------------------------------------------


def rooted(root: str, path: str) -> str:
    """Return where the node path ``path`` is, seen from this process when the node's ``/`` is ``root``."""
    if root in ("", "/"):
        return path
    return os.path.join(root, path.lstrip("/"))


def fill_template(name: str, values: dict[str, str]) -> str:
    """Return the package template ``name`` with each ``@KEY@`` replaced; every placeholder must be given."""
    text = resources.files("hook").joinpath("templates", name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    left = _PLACEHOLDER.search(text)
    if left:
        raise InstallError(f"template {name}: no value for {left.group(0)}")
    return text


def build_wrapper(
    name: str, entry: str, *, python: str, keep: tuple[str, ...] | None, config: str | None
) -> bytes:
    """Build the shell wrapper that runs ``entry``'s ``main`` under ``python -I``.

    ``keep``: the environment is built from scratch (``env -i``, a fixed PATH, then only these variables when
    the caller set them); None: the caller's environment is kept, less LD_PRELOAD, LD_LIBRARY_PATH and
    LD_AUDIT. ``config`` (a config.toml path) is baked in as NVIDIA_CTK_CONFIG_FILE_PATH, winning over the
    caller's.
    """
    if keep is None:
        parts = [f"-u {variable}" for variable in LOADER_ENV]
        doc = (
            "# The caller's environment is kept (runc, and the hooks that inherit it, need it), less the\n"
            f"# dynamic loader's variables: {', '.join(LOADER_ENV)}."
        )
    else:
        parts = ["-i", f"PATH={shlex.quote(paths.FIXED_PATH)}"]
        doc = (
            "# The environment is built from scratch by `env -i`: a fixed PATH, then only the variables\n"
            "# named below, and those only when the caller set them. LD_PRELOAD, LD_LIBRARY_PATH,\n"
            "# PYTHONPATH and every other inherited variable are dropped."
        )
    if config is not None:
        parts.append(shlex.quote(f"{envvars.NVIDIA_CTK_CONFIG_FILE_PATH}={config}"))
    for variable in keep or ():
        if config is not None and variable == envvars.NVIDIA_CTK_CONFIG_FILE_PATH:
            continue
        parts.append(f'${{{variable}:+"{variable}=${variable}"}}')
    text = fill_template(
        "wrapper.sh.in",
        {
            "NAME": name,
            "VERSION": __version__,
            "ENVDOC": doc,
            "ENV": "".join(f"    {part} \\\n" for part in parts),
            "PYTHON": shlex.quote(python),
            "CODE": shlex.quote(f"from {entry} import main; raise SystemExit(main())"),
        },
    )
    return text.encode()


def build_hook_json(stage: str) -> dict[str, Any]:
    """Build the oci-hooks.d 1.0.0 document that runs the hook wrapper at ``stage`` for every container
    (the same document as ``packaging/oci-hooks.d``, which a test keeps equal)."""
    return {
        "version": "1.0.0",
        "hook": {
            "path": paths.HOOK_WRAPPER,
            "args": [paths.HOOK_WRAPPER, stage],
            "env": [f"PATH={paths.FIXED_PATH}"],
        },
        "when": {"always": True, "commands": [".*"]},
        "stages": [stage],
    }


def dump_json(document: object, kind: str, where: str, *, indent: int = 2) -> bytes:
    """Validate ``document`` against the schema of ``kind`` and return it as JSON text."""
    from hook.schema import validate_document

    problems = validate_document(document, kind)
    if problems:
        raise InstallError(f"{where}: would not be valid: {problems[0]}")
    return (json.dumps(document, indent=indent) + "\n").encode()


def toml_string(value: str) -> str:
    """Quote ``value`` as a TOML basic string."""
    return json.dumps(value, ensure_ascii=False)


def toml_key(value: str) -> str:
    """Write ``value`` as a TOML key: bare when it can be, else quoted."""
    return value if _BARE_TOML_KEY.match(value) else toml_string(value)


def build_containerd_dropin(version: int) -> bytes:
    """Build the containerd drop-in registering the runtime wrapper as handler RUNTIME_HANDLER."""
    values = {
        "VERSION": __version__,
        "HANDLER": toml_key(paths.RUNTIME_HANDLER),
        "RUNTIME": toml_string(paths.RUNTIME_WRAPPER),
    }
    return fill_template(f"containerd-v{version}.toml.in", values).encode()


def build_crio_dropin() -> bytes:
    """Build the crio.conf.d drop-in registering the runtime wrapper as handler RUNTIME_HANDLER."""
    values = {
        "VERSION": __version__,
        "HANDLER": toml_key(paths.RUNTIME_HANDLER),
        "RUNTIME": toml_string(paths.RUNTIME_WRAPPER),
    }
    return fill_template("crio.conf.in", values).encode()


def parse_daemon_json(data: bytes, where: str) -> dict[str, Any]:
    """Decode Docker's daemon.json: an object whose ``runtimes``, if any, is an object."""
    try:
        document = json.loads(data.decode("utf-8"))
    except ValueError as err:
        from hook.errors import decode_error_reason

        raise InstallError(f"{where}: not valid JSON ({decode_error_reason(err)}); fix it first") from None
    if not isinstance(document, dict):
        raise InstallError(f"{where}: must hold a JSON object; fix it first")
    if not isinstance(document.get("runtimes", {}), dict):
        raise InstallError(f"{where}: runtimes must be an object; fix it first")
    return document


def build_docker_entry() -> dict[str, Any]:
    """Return our value for ``runtimes.<RUNTIME_HANDLER>`` in daemon.json."""
    return {"path": paths.RUNTIME_WRAPPER}


def merge_daemon_json(current: bytes | None, where: str) -> bytes:
    """Return daemon.json with our runtime added; every other key kept as it was."""
    document = parse_daemon_json(current, where) if current is not None else {}
    runtimes = dict(document.get("runtimes", {}))
    runtimes[paths.RUNTIME_HANDLER] = build_docker_entry()
    return dump_json({**document, "runtimes": runtimes}, "docker-daemon", where, indent=4)


def unmerge_daemon_json(current: bytes, previous: bytes | None, where: str) -> bytes | None:
    """Return daemon.json with our runtime taken out again (None: remove the file; install created it).

    What install replaced comes back as it was: the earlier value of our key, no ``runtimes`` if there was
    none, and ``previous`` byte for byte when nothing else changed since.
    """
    document = parse_daemon_json(current, where)
    before = parse_daemon_json(previous, where) if previous is not None else None
    runtimes = dict(document.get("runtimes", {}))
    earlier = (before or {}).get("runtimes", {})
    if paths.RUNTIME_HANDLER in earlier:
        runtimes[paths.RUNTIME_HANDLER] = earlier[paths.RUNTIME_HANDLER]
    else:
        runtimes.pop(paths.RUNTIME_HANDLER, None)
    document.pop("runtimes", None)
    if runtimes or "runtimes" in (before or {}):
        document["runtimes"] = runtimes
    if before is None:
        return None if not document else dump_json(document, "docker-daemon", where, indent=4)
    if document == before:
        return previous
    return dump_json(document, "docker-daemon", where, indent=4)


def resolve_containerd_version(main_config: str | None, where: str) -> int:
    """Return the config version the drop-in should use: 3 when the main config is version 3, else 2."""
    if main_config is None:
        return 2
    import tomllib

    try:
        version = tomllib.loads(main_config).get("version", 2)
    except tomllib.TOMLDecodeError as err:
        raise InstallError(f"{where}: not valid TOML ({err}); fix it first") from None
    return 3 if version == 3 else 2


def containerd_imports_dropin(main_config: str | None) -> bool:
    """Tell whether the main containerd config's ``imports`` already reads our drop-in."""
    if main_config is None:
        return False
    import tomllib

    try:
        imports = tomllib.loads(main_config).get("imports", [])
    except tomllib.TOMLDecodeError:
        return False
    dropin = paths.CONTAINERD_DROPIN_DIR + "/" + paths.CONTAINERD_DROPIN_NAME
    return isinstance(imports, list) and any(
        isinstance(pattern, str) and fnmatch.fnmatchcase(dropin, pattern) for pattern in imports
    )


# --- planning (reads the node) ---------------------------------------------------------------------------


def read_file(path: str) -> bytes | None:
    """Return a file's bytes, or None when there is none."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InstallError(f"{path}: cannot read: {err.strerror}") from None


def check_python(options: InstallOptions) -> list[str]:
    """Refuse an interpreter that is not there or that imports another copy of ``hook`` (root ``/``); under
    another root, warn when it is not there yet (an image build or a DaemonSet may put it there later)."""
    if not os.path.isabs(options.python):
        raise InstallError(f"--python {options.python}: must be an absolute path")
    found = rooted(options.root, options.python)
    there = os.path.isfile(found) and os.access(found, os.X_OK)
    if options.root not in ("", "/"):
        return [] if there else [f"warning: no executable at {found} yet; the wrappers run {options.python}"]
    if not there:
        raise InstallError(f"--python {options.python}: no executable file there")
    ours = os.path.dirname(os.path.realpath(__file__))
    probe = "import hook, os, sys; sys.stdout.write(os.path.dirname(os.path.realpath(hook.__file__)))"
    proc = subprocess.run(
        [options.python, "-I", "-c", probe],
        env={"PATH": paths.FIXED_PATH},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0 or proc.stdout != ours:
        got = proc.stdout or "no hook package"
        raise InstallError(f"--python {options.python}: imports {got} under -I, not {ours}")
    return []


def build_plan(options: InstallOptions) -> Plan:
    """Decide every file install writes for ``options`` (reads the node's current configs, writes nothing)."""
    engine, root = options.engine, options.root
    if engine not in ENGINES:
        raise InstallError(f"--engine {engine}: must be one of {', '.join(ENGINES)}")
    if options.precreate and engine != "podman":
        raise InstallError("--precreate: only podman runs precreate hooks; use it with --engine podman")
    if not os.path.isabs(options.hooks_dir):
        raise InstallError(f"--hooks-dir {options.hooks_dir}: must be an absolute path")
    if options.config is not None:
        if not os.path.isabs(options.config):
            raise InstallError(f"--config {options.config}: must be an absolute path")
        if not os.path.isfile(rooted(root, options.config)):
            raise InstallError(f"--config {options.config}: no file at {rooted(root, options.config)}")
    notes = check_python(options)

    def wrapper(path: str, entry: str, keep: tuple[str, ...] | None) -> PlannedFile:
        data = build_wrapper(
            os.path.basename(path), entry, python=options.python, keep=keep, config=options.config
        )
        return PlannedFile(path, data, EXECUTABLE_MODE)

    files = [
        wrapper(paths.HOOK_WRAPPER, HOOK_ENTRY, HOOK_KEEP_ENV),
        wrapper(paths.RUNTIME_WRAPPER, RUNTIME_ENTRY, RUNTIME_KEEP_ENV),
    ]
    if options.as_nvidia_hook:
        files.append(wrapper(paths.NVIDIA_HOOK_ALIAS, HOOK_ENTRY, HOOK_KEEP_ENV))
        notes.append(
            f"next: {paths.NVIDIA_HOOK_ALIAS} runs gpu-env-hook: `docker run --gpus` (and whatever else "
            "looks nvidia-container-runtime-hook up on a PATH with /usr/local/bin first) now uses it"
        )
    hook_jsons = []
    if engine in ("podman", "crio"):
        stages = ["prestart", *(["precreate"] if options.precreate else [])]
        for stage in stages:
            name = paths.HOOK_JSON_NAME if stage == "prestart" else paths.PRECREATE_JSON_NAME
            path = os.path.join(options.hooks_dir, name)
            data = dump_json(build_hook_json(stage), "hooks-json", path)
            hook_jsons.append(PlannedFile(path, data, CONFIG_MODE))
        notes.append(
            f"next: {engine} reads {options.hooks_dir} when it creates a container: no restart needed"
        )
    if engine == "crio":
        path = os.path.join(paths.CRIO_DROPIN_DIR, paths.CRIO_DROPIN_NAME)
        files.append(PlannedFile(path, build_crio_dropin(), CONFIG_MODE))
        notes.append(
            "next: restart CRI-O (systemctl restart crio) to load the runtime handler "
            f"{paths.RUNTIME_HANDLER!r}"
        )
    if engine == "containerd":
        main_config_bytes = read_file(rooted(root, paths.CONTAINERD_CONFIG))
        main_config = main_config_bytes.decode("utf-8", "replace") if main_config_bytes is not None else None
        version = options.containerd_config_version or resolve_containerd_version(
            main_config, rooted(root, paths.CONTAINERD_CONFIG)
        )
        path = os.path.join(paths.CONTAINERD_DROPIN_DIR, paths.CONTAINERD_DROPIN_NAME)
        files.append(PlannedFile(path, build_containerd_dropin(version), CONFIG_MODE))
        if not containerd_imports_dropin(main_config):
            notes.append(
                f"next: add this line at the top of {paths.CONTAINERD_CONFIG} (containerd reads drop-ins "
                f"only through it): imports = [{toml_string(CONTAINERD_IMPORT)}]"
            )
        notes.append(
            f"next: restart containerd (systemctl restart containerd) to load the runtime handler "
            f"{paths.RUNTIME_HANDLER!r} (config version {version}); pods select it with a RuntimeClass "
            f"whose handler is {paths.RUNTIME_HANDLER!r}"
        )
    if engine == "docker":
        where = rooted(root, paths.DOCKER_DAEMON_JSON)
        data = merge_daemon_json(read_file(where), where)
        mode = stat.S_IMODE(os.stat(where).st_mode) if os.path.isfile(where) else CONFIG_MODE
        files.append(PlannedFile(paths.DOCKER_DAEMON_JSON, data, mode, DOCKER_MERGE))
        notes.append(
            f"next: reload dockerd (systemctl reload docker, or SIGHUP) to load the runtime; then "
            f"`docker run --runtime={paths.RUNTIME_HANDLER} ...`"
        )
    return Plan(engine, (*files, *hook_jsons), tuple(notes))


# --- manifests -------------------------------------------------------------------------------------------


def manifest_path(engine: str) -> str:
    """Return the node path of an engine's install manifest."""
    return os.path.join(paths.STATE_DIR, f"install-{engine}.json")


def load_manifest(root: str, engine: str) -> dict[str, Any] | None:
    """Return an engine's manifest, or None when that engine is not installed under ``root``."""
    where = rooted(root, manifest_path(engine))
    data = read_file(where)
    if data is None:
        return None
    from hook.schema import parse_document, validate_document

    document = parse_document(data, "install-manifest", where)
    problems = validate_document(document, "install-manifest")
    if problems or not isinstance(document, dict) or document.get("engine") != engine:
        reason = str(problems[0]) if problems else f"$.engine: must be {json.dumps(engine)}"
        raise InstallError(f"{where}: not a manifest install wrote ({reason}); remove it by hand")
    return document


def load_other_manifests(root: str, engine: str) -> dict[str, dict[str, Any]]:
    """Return the manifests of the other engines installed under ``root``."""
    found = {}
    for other in ENGINES:
        if other != engine:
            document = load_manifest(root, other)
            if document is not None:
                found[other] = document
    return found


def manifest_entry(manifest: dict[str, Any], path: str) -> dict[str, Any] | None:
    """Return the manifest's entry for ``path``."""
    for entry in manifest["files"]:
        if entry["path"] == path:
            found: dict[str, Any] = entry
            return found
    return None


def sha256(data: bytes) -> str:
    """Return the hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def capture_previous(where: str) -> dict[str, Any] | None:
    """Record the file at ``where`` so uninstall can put it back (None: there is none)."""
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"symlink": os.readlink(where)}
    if not stat.S_ISREG(st.st_mode):
        raise InstallError(f"{where}: exists and is not a regular file; move it away first")
    data = read_file(where) or b""
    return {
        "data": base64.b64encode(data).decode("ascii"),
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
    }


def missing_directories(root: str, node_paths: list[str]) -> list[str]:
    """Return the node directories (parents first) that must be created to hold ``node_paths``."""
    missing: list[str] = []
    for path in node_paths:
        chain = []
        directory = os.path.dirname(path)
        while directory not in ("", "/") and not os.path.isdir(rooted(root, directory)):
            chain.append(directory)
            directory = os.path.dirname(directory)
        missing += [found for found in reversed(chain) if found not in missing]
    return missing


def build_manifest(
    plan: Plan, root: str, own: dict[str, Any] | None, others: dict[str, dict[str, Any]], created: list[str]
) -> dict[str, Any]:
    """Record what ``plan`` writes and what each file replaces.

    A file this engine or another installed engine already wrote keeps the predecessor recorded then, so
    whichever uninstall comes last restores it; a directory they created is listed again for the same reason.
    """
    entries = []
    for planned in plan.files:
        previous: dict[str, Any] | None = None
        recorded = False
        for engine, manifest in [(plan.engine, own), *others.items()]:
            entry = manifest_entry(manifest, planned.path) if manifest is not None else None
            if entry is None:
                continue
            if engine != plan.engine and planned.merge is None and entry["sha256"] != sha256(planned.data):
                raise InstallError(
                    f"{planned.path}: `install --engine {engine}` wrote it with other options; "
                    f"install with the same options, or uninstall --engine {engine} first"
                )
            previous, recorded = entry["previous"], True
            break
        if not recorded:
            previous = capture_previous(rooted(root, planned.path))
        entries.append(
            {
                "path": planned.path,
                "sha256": sha256(planned.data),
                "mode": planned.mode,
                "merge": planned.merge,
                "previous": previous,
            }
        )
    ours = [planned.path for planned in plan.files] + [manifest_path(plan.engine)]
    directories = list(created)
    for manifest in [own, *others.values()]:
        listed: list[str] = (manifest or {}).get("directories", [])
        for directory in listed:
            inside = any(path.startswith(directory + "/") for path in ours)
            if directory not in directories and inside:
                directories.append(directory)
    directories.sort(key=lambda directory: (directory.count("/"), directory))
    return {
        "version": MANIFEST_VERSION,
        "engine": plan.engine,
        "package-version": __version__,
        "files": entries,
        "directories": directories,
    }


# --- side effects ----------------------------------------------------------------------------------------


def write_directories(root: str, directories: list[str]) -> None:
    """Create the node directories (parents first), 0755 (the state directory 0700)."""
    for directory in directories:
        where = rooted(root, directory)
        if os.path.isdir(where):
            continue
        mode = 0o700 if directory == paths.STATE_DIR else 0o755
        os.mkdir(where, mode)
        os.chmod(where, mode)


def write_previous(where: str, previous: dict[str, Any]) -> None:
    """Put a recorded file back, atomically: a symlink as a symlink, a file with its mode and owner."""
    if "symlink" in previous:
        tmp = f"{where}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        os.symlink(previous["symlink"], tmp)
        try:
            os.replace(tmp, where)
        except BaseException:
            os.unlink(tmp)
            raise
        return
    owner = (previous["uid"], previous["gid"]) if os.geteuid() == 0 else None
    write_atomic(where, base64.b64decode(previous["data"]), mode=previous["mode"], owner=owner)


def kept_owner(where: str) -> tuple[int, int] | None:
    """Return the owner a replaced file keeps (only root can give a file to someone else)."""
    if os.geteuid() != 0:
        return None
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        return None
    return (st.st_uid, st.st_gid) if stat.S_ISREG(st.st_mode) else None


def remove_file(where: str) -> None:
    """Remove a file; one that is already gone is fine."""
    try:
        os.unlink(where)
    except FileNotFoundError:
        return


def write_install(options: InstallOptions, *, dry_run: bool = False) -> list[str]:
    """Install for ``options.engine`` (or, with ``dry_run``, say what would be written); return the report."""
    plan = build_plan(options)
    root = options.root
    own = load_manifest(root, plan.engine)
    others = load_other_manifests(root, plan.engine)
    manifest_at = manifest_path(plan.engine)
    created = missing_directories(root, [*(planned.path for planned in plan.files), manifest_at])
    manifest = build_manifest(plan, root, own, others, created)
    manifest_data = dump_json(manifest, "install-manifest", rooted(root, manifest_at))
    stale = [
        entry for entry in (own or {}).get("files", []) if manifest_entry(manifest, entry["path"]) is None
    ]
    if dry_run:
        lines = [f"would create directory {rooted(root, directory)}" for directory in created]
        for planned in plan.files:
            lines.append(f"would write {rooted(root, planned.path)} (mode {planned.mode:04o}):")
            lines += ["    " + line for line in planned.data.decode().splitlines()]
        lines.append(f"would write {rooted(root, manifest_at)} (what uninstall undoes)")
        lines += [f"would undo {rooted(root, entry['path'])} (no longer installed)" for entry in stale]
        return lines
    write_directories(root, created)
    write_atomic(rooted(root, manifest_at), manifest_data, mode=0o600)
    lines = [f"created directory {rooted(root, directory)}" for directory in created]
    for planned in plan.files:
        where = rooted(root, planned.path)
        write_atomic(where, planned.data, mode=planned.mode, owner=kept_owner(where))
        lines.append(f"wrote {rooted(root, planned.path)}")
    for entry in reversed(stale):
        lines += undo_file(entry, root, others)
    lines.append(f"wrote {rooted(root, manifest_at)} (what uninstall undoes)")
    return lines + list(plan.notes)


def undo_file(
    entry: dict[str, Any], root: str, others: dict[str, dict[str, Any]], *, dry_run: bool = False
) -> list[str]:
    """Take one installed file off again: restore its predecessor, remove it, or leave a changed one."""
    path, previous = entry["path"], entry["previous"]
    where = rooted(root, path)
    sharing = [engine for engine, manifest in others.items() if manifest_entry(manifest, path) is not None]
    if sharing:
        return [f"kept {where}: also installed for --engine {', '.join(sharing)}"]
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        st = None
    current = read_file(where) if st is not None and stat.S_ISREG(st.st_mode) else None
    verb = "would " if dry_run else ""
    if st is None:
        if previous is None:
            return [f"{where}: already gone"]
        if not dry_run:
            write_previous(where, previous)
        return [f"{verb}restore {where} (it was gone)"]
    if current is not None and entry["merge"] == DOCKER_MERGE:
        before = base64.b64decode(previous["data"]) if previous is not None and "data" in previous else None
        data = unmerge_daemon_json(current, before, where)
        if data is None:
            if not dry_run:
                remove_file(where)
            return [f"{verb}remove {where}"]
        if not dry_run:
            write_atomic(where, data, owner=kept_owner(where))
        return [f"{verb}{'restore' if data == before else 'take our runtime out of'} {where}"]
    if current is None or sha256(current) != entry["sha256"]:
        return [f"left {where}: changed since install; remove it by hand if nothing needs it"]
    if previous is None:
        if not dry_run:
            remove_file(where)
        return [f"{verb}remove {where}"]
    if not dry_run:
        write_previous(where, previous)
    return [f"{verb}restore {where}"]


def write_uninstall(engine: str, root: str = "/", *, dry_run: bool = False) -> list[str]:
    """Undo what ``install --engine engine`` wrote under ``root``; return the report."""
    if engine not in ENGINES:
        raise InstallError(f"--engine {engine}: must be one of {', '.join(ENGINES)}")
    manifest = load_manifest(root, engine)
    manifest_at = rooted(root, manifest_path(engine))
    if manifest is None:
        raise InstallError(f"--engine {engine}: not installed under {root} (no {manifest_at})")
    others = load_other_manifests(root, engine)
    lines = []
    for entry in reversed(manifest["files"]):
        lines += undo_file(entry, root, others, dry_run=dry_run)
    if dry_run:
        lines.append(f"would remove {manifest_at}")
        lines += [
            f"would remove directory {rooted(root, directory)} if empty"
            for directory in reversed(manifest["directories"])
        ]
        return lines
    remove_file(manifest_at)
    lines.append(f"removed {manifest_at}")
    for directory in reversed(manifest["directories"]):
        where = rooted(root, directory)
        try:
            os.rmdir(where)
        except FileNotFoundError:
            continue
        except OSError:
            if not others:
                lines.append(f"kept directory {where}: it holds files install did not write")
            continue
        lines.append(f"removed directory {where}")
    return lines


# --- commands --------------------------------------------------------------------------------------------


class Engine(enum.StrEnum):
    """The engines install knows."""

    podman = "podman"
    crio = "crio"
    containerd = "containerd"
    docker = "docker"


def default_python() -> str:
    """Return this interpreter's absolute path, symlinks kept (a venv's python finds the venv by its path)."""
    return os.path.abspath(sys.executable)


def install_command(
    *,
    engine: Annotated[Engine, typer.Option(help="The engine to install for.")],
    root: Annotated[
        str, typer.Option(help="The node's / as seen from here (e.g. /host in a DaemonSet).")
    ] = "/",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print each file it would write; write nothing.")
    ] = False,
    as_nvidia_hook: Annotated[
        bool, typer.Option("--as-nvidia-hook", help=f"Also install as {paths.NVIDIA_HOOK_ALIAS}.")
    ] = False,
    precreate: Annotated[
        bool,
        typer.Option(
            "--precreate", help="podman: also install the precreate hook (env reaches the process)."
        ),
    ] = False,
    config: Annotated[
        str | None,
        typer.Option(help="config.toml the wrappers use (baked in as NVIDIA_CTK_CONFIG_FILE_PATH)."),
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="Interpreter the wrappers run, as a node path (default: this one).")
    ] = None,
    hooks_dir: Annotated[
        str, typer.Option(help="oci-hooks.d directory (podman, CRI-O).")
    ] = paths.OCI_HOOKS_DIRS[0],
    containerd_config_version: Annotated[
        int | None,
        typer.Option(min=2, max=3, help="containerd drop-in version (default: the main config's)."),
    ] = None,
) -> None:
    """Install the hook and the runtime shim for one engine (undo with uninstall)."""
    options = InstallOptions(
        engine=engine.value,
        python=python or default_python(),
        root=os.path.abspath(root),
        config=config,
        as_nvidia_hook=as_nvidia_hook,
        precreate=precreate,
        hooks_dir=hooks_dir,
        containerd_config_version=containerd_config_version,
    )
    for line in write_install(options, dry_run=dry_run):
        typer.echo(line)


def uninstall_command(
    *,
    engine: Annotated[Engine, typer.Option(help="The engine to uninstall for.")],
    root: Annotated[str, typer.Option(help="The node's / as seen from here (as given to install).")] = "/",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what it would do; change nothing.")
    ] = False,
) -> None:
    """Remove what install wrote for one engine and restore what it replaced."""
    for line in write_uninstall(engine.value, os.path.abspath(root), dry_run=dry_run):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add the ``install`` and ``uninstall`` commands to ``app``."""
    app.command("install")(install_command)
    app.command("uninstall")(uninstall_command)
