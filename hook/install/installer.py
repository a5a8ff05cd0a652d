"""``install`` / ``uninstall``: put the hook on a node for one engine, and take exactly that off again.

``install`` writes, in this order (an engine never sees a config naming a file that is not there yet):
the wrappers the engines execute (``hook.util.paths.HOOK_WRAPPER``, the engine's ``runtime_wrapper`` and, with
``--as-nvidia-hook``, ``NVIDIA_HOOK_ALIAS``), then the engine's config (a containerd or CRI-O drop-in, the
``runtimes`` entry merged into Docker's ``daemon.json``), then the oci-hooks.d JSON (podman, CRI-O) last.
Before any of it, a manifest records each file's digest and the file it replaced, and the directories
install created; ``uninstall`` walks it backwards: a file still as install wrote it is removed or its
predecessor restored byte for byte, ``daemon.json`` loses only our key, a file someone changed since is left
alone and named. A file another engine's manifest also lists stays.

The engine modules (``podman``, ``crio``, ``containerd``, ``docker``) each build their planned files from the
node's current config; this module only orders the steps and records what to undo.
"""

import base64
import contextlib
import os
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hook.install import bundle, containerd, crio, docker, nri, podman, retire, tree, wrappers
from hook.install.common import (
    CONFIG_MODE,
    ENGINES,
    EXECUTABLE_MODE,
    EnginePlan,
    InstallError,
    InstallOptions,
    Plan,
    PlannedFile,
    build_tmpfiles,
    check_line_safe,
    check_trusted,
    dump_json,
    engine_config_kind,
    rooted,
)
from hook.install.guard import guard_spec
from hook.install.inuse import Users, find_runtime_users, node_proc
from hook.install.manifest import (
    RETIRED,
    RETIRED_PATH,
    build_manifest,
    load_manifest,
    load_other_manifests,
    manifest_entry,
    manifest_path,
    missing_directories,
    sha256,
)
from hook.install.rootfs import NodeRoot, check_root, could_not
from hook.launcher import TREE_PYTHON
from hook.util import paths
from hook.util.errors import HookError

if TYPE_CHECKING:
    from hook.pipeline.config import Settings

# Each engine module's planner: the node's current config in, its files and notes out.
PLANNERS: dict[str, Callable[[InstallOptions], EnginePlan]] = {
    "podman": podman.plan,
    "crio": crio.plan,
    "containerd": containerd.plan,
    "docker": docker.plan,
}
# What each engine must do once uninstall is done (restart or nothing), said after the report.
AFTER_UNINSTALL: dict[str, Callable[[], tuple[str, ...]]] = {
    "podman": podman.uninstall_notes,
    "crio": crio.uninstall_notes,
    "containerd": containerd.uninstall_notes,
    "docker": docker.uninstall_notes,
}
# How a line of the report that is a step for the user begins (``next_last`` puts them last).
NEXT = "next: "
# How uninstall takes our part out of a file it merged into (instead of restoring the bytes it replaced).
UNMERGERS: dict[str, Callable[[bytes, bytes | None, str], bytes | None]] = {
    docker.DOCKER_MERGE: docker.unmerge_daemon_json,
    containerd.CONTAINERD_MERGE: containerd.unmerge_config,
}


# ``--engine auto``: the CRI engine whose socket the node has, in this order (a node that runs CRI-O may also
# run containerd for something else; kubelet then talks to CRI-O).
ENGINE_SOCKETS: tuple[tuple[str, str], ...] = (
    ("crio", "/run/crio/crio.sock"),
    ("crio", "/var/run/crio/crio.sock"),
    ("containerd", "/run/containerd/containerd.sock"),
)


def detect_engine(root: str) -> tuple[str, str]:
    """``--engine auto``: return the engine whose CRI socket the node under ``root`` has (``ENGINE_SOCKETS``),
    and the line that says which it chose and why."""
    node = check_root(root)
    for engine, socket_path in ENGINE_SOCKETS:
        found = node.stat(socket_path)
        if found is not None and stat.S_ISSOCK(found.st_mode):
            return engine, f"engine: {engine} (found {rooted(root, socket_path)})"
    raise InstallError(
        f"--engine auto: no CRI-O or containerd socket under {rooted(root, '/run')}; give --engine"
    )


def build_plan(options: InstallOptions) -> Plan:
    """Decide every file install writes for ``options`` (reads the node's current configs, writes nothing)."""
    engine, root = options.engine, options.root
    if engine not in ENGINES:
        raise InstallError(f"--engine {engine}: must be one of {', '.join(ENGINES)}")
    if options.precreate and engine != "podman":
        raise InstallError("--precreate: only podman runs precreate hooks; use it with --engine podman")
    if options.nri and engine not in ("containerd", "crio"):
        raise InstallError("--nri: NRI runs in containerd and CRI-O; use it with --engine containerd or crio")
    for flag, value in (
        ("--python", options.python),
        ("--runtime", options.runtime),
        ("--config", options.config),
        ("--hooks-dir", options.hooks_dir),
        ("--containerd-config", options.containerd_config),
        ("--containerd-binary", options.containerd_binary),
        ("--nri-python", options.nri_python if options.nri else None),
    ):
        if value is not None:
            check_line_safe(flag, value)
    if not os.path.isabs(options.hooks_dir):
        raise InstallError(f"--hooks-dir {options.hooks_dir}: must be an absolute path")
    node = check_root(root)
    if options.config is not None:
        if not os.path.isabs(options.config):
            raise InstallError(f"--config {options.config}: must be an absolute path")
        found = node.stat(options.config)
        if found is None or not stat.S_ISREG(found.st_mode):
            raise InstallError(f"--config {options.config}: no file at {rooted(root, options.config)}")
        check_trusted("--config", options.config, root, why="whoever can change it chooses what runs as root")
        kind = engine_config_kind(node.read(options.config) or b"")
        if kind is not None:
            raise InstallError(
                f"--config {options.config}: is {kind} config, not gpu-env-hook's config.toml (NVIDIA's "
                "format); install finds the engine's config itself (containerd: --containerd-config)"
            )
    settings = configured(node, options.config)
    options = options._replace(hook_timeout=settings.hook_timeout)
    notes = tree.check_interpreter(options.python, root)
    warning = tree.editable_warning()
    notes += [warning] if warning is not None else []
    engine_plan = PLANNERS[engine](options)
    runtime, runtime_notes = resolve_runtime(node, options, engine_plan)
    files, wrapper_notes = wrappers.plan(options, runtime=runtime)
    notes += runtime_notes
    directories = settings.env_file.directories
    for directory in directories:
        check_trusted(
            "[env-file] directories:",
            directory,
            root,
            why="whoever can write there chooses what containers get as root",
            missing_ok=True,
        )
    tmpfiles = PlannedFile(paths.TMPFILES_CONF, build_tmpfiles(directories), CONFIG_MODE)
    # The CRI engines, which run device plugins' containers: the env-file guard (hook.install.guard).
    guarded = engine in ("containerd", "crio")
    guard = (PlannedFile(paths.ENV_FILE_GUARD_SPEC, guard_spec(), CONFIG_MODE),) if guarded else ()
    spec = rooted(root, paths.ENV_FILE_GUARD_SPEC)
    guard_note = (
        f"device plugins: return the CDI device {paths.ENV_FILE_GUARD_DEVICE} next to NVIDIA_ENV_FROM_FILE "
        f"(its spec: {spec}): the container then starts only once its env file was applied (docs/env-file.md)"
    )
    return Plan(
        engine,
        (*files, tmpfiles, *guard, *engine_plan.files),
        (*notes, *wrapper_notes, *engine_plan.notes, *((guard_note,) if guarded else ())),
        runtime,
        directories,
    )


def recorded_options(options: InstallOptions) -> dict[str, Any]:
    """The options the install record keeps, for ``install`` again to reuse (hook.install.reuse)."""
    from hook.install.reuse import RECORDED

    return {name: getattr(options, name) for name in RECORDED}


def configured(node: NodeRoot, config: str | None) -> "Settings":
    """Return the settings of the config.toml the hook will read (``--config``, else the node's system
    config when there is one): install takes the hooks' timeout and the shim's runtime from it, uninstall
    where the CDI spec cache is."""
    from hook.pipeline.config import parse_config
    from hook.pipeline.configfile import SYSTEM_CONFIG

    path = config or SYSTEM_CONFIG
    data = node.read(path)
    if data is None:
        return parse_config(None)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InstallError(f"{node.show(path)}: not valid UTF-8; fix it first") from None
    return parse_config(text, source=node.show(path))


def resolve_runtime(
    node: NodeRoot, options: InstallOptions, engine_plan: EnginePlan
) -> tuple[str, list[str]]:
    """Return the real runtime the runtime wrapper execs (a node path, or a name it looks up on the fixed
    PATH) and what to say about it: ``--runtime``, else the engine's own default runtime, else
    ``[gpu-env-runtime] runtime``, else runc or crun found on the node (each engine has its own wrapper, so
    engines on one node may use different runtimes). A runtime that is the shim itself is refused."""
    root = options.root
    chosen = options.runtime or engine_plan.runtime
    chosen = chosen or configured(node, options.config).runtime or retire.resolve_node_runtime(root)
    notes: list[str] = []
    if chosen is None:
        chosen = retire.FALLBACK_RUNTIMES[0]
        notes.append(
            f"warning: no runc or crun on the node's PATH ({paths.FIXED_PATH}) yet: the runtime wrapper "
            "looks runc up there at each call; give --runtime PATH to fix it"
        )
    check_line_safe("--runtime" if options.runtime else "runtime", chosen)
    if not chosen.startswith("/") and "/" in chosen:
        raise InstallError(f"--runtime {chosen}: must be an absolute path")
    if chosen.startswith("/"):
        notes += wrappers.check_runtime(node, chosen, root)
    return chosen, notes


def write_directories(root: str, directories: list[str], private: tuple[str, ...] = ()) -> None:
    """Create the node directories (parents first), 0755 (the state directory and ``private`` 0700)."""
    node = NodeRoot(root)
    for directory in directories:
        if not node.is_dir(directory):
            private_dirs = (paths.STATE_DIR, paths.REFUSAL_LOG_DIR, *private)
            node.mkdir(directory, 0o700 if directory in private_dirs else 0o755)


def check_directories(node: NodeRoot, targets: list[str]) -> None:
    """Refuse, in one line, an existing directory install would write into (or one above it, beneath the
    root, symlinks followed as the kernel would) that is not root-owned or that group or others can write
    to: whoever can write there could change what the engines run as root. A directory not there yet is
    judged by the one it will be created in (``hook.util.beneath.untrusted_on_the_way``)."""
    from hook.util.beneath import untrusted_on_the_way

    owners = (0,) if os.geteuid() == 0 else (0, os.geteuid())  # an unprivileged user's test tree is its own
    for target in targets:
        try:
            found = untrusted_on_the_way(target, root=node.path, owners=owners, missing_ok=True)
        except OSError as err:
            raise could_not("inspect", node.show(target), err) from None
        if found is not None:
            directory, problem = found
            verb = "into" if directory == target else "beneath"
            raise InstallError(
                f"{node.show(directory)} {problem}; install writes {verb} it (whoever can write there "
                "runs code as root): chown root:root and chmod go-w it first"
            )


def write_previous(node: NodeRoot, path: str, previous: dict[str, Any]) -> None:
    """Put a recorded file back, atomically: a symlink as a symlink, a file with its mode and owner."""
    if "symlink" in previous:
        node.symlink_atomic(path, previous["symlink"])
        return
    owner = (previous["uid"], previous["gid"]) if os.geteuid() == 0 else None
    node.write_atomic(path, base64.b64decode(previous["data"]), mode=previous["mode"], owner=owner)


def kept_owner(node: NodeRoot, path: str) -> tuple[int, int] | None:
    """Return the owner a replaced file keeps (only root can give a file to someone else)."""
    if os.geteuid() != 0:
        return None
    st = node.lstat(path)
    return (st.st_uid, st.st_gid) if st is not None and stat.S_ISREG(st.st_mode) else None


def write_install(options: InstallOptions, *, dry_run: bool = False, proc: str | None = None) -> list[str]:
    """Install for ``options.engine`` (or, with ``dry_run``, say what would be written); return the report.

    A runtime wrapper an earlier version installed at a path this one no longer writes (before per-engine
    wrappers: ``<libexec>/gpu-env-runtime``) is retired, not removed, while a container still uses it
    (``proc``: the node's /proc as seen from here, default ``<root>/proc``)."""
    plan = build_plan(options)
    root = options.root
    own = load_manifest(root, plan.engine)
    others = load_other_manifests(root, plan.engine)
    retired = load_manifest(root, RETIRED)
    manifest_at = manifest_path(plan.engine)
    tree_link = f"{paths.RUNTIME_TREE}/current"
    written = [tree_link, *(planned.path for planned in plan.files), manifest_at]
    check_directories(NodeRoot(root), sorted({os.path.dirname(path) for path in written}))
    env_dirs = [directory + "/" for directory in plan.env_directories]
    created = missing_directories(root, [*written, *env_dirs, paths.REFUSAL_LOG])
    sources = {**others, **({RETIRED: retired} if retired is not None else {})}
    manifest = build_manifest(plan, root, own, sources, created, options=recorded_options(options))
    manifest_data = dump_json(manifest, "install-manifest", rooted(root, manifest_at))
    stale = [
        entry for entry in (own or {}).get("files", []) if manifest_entry(manifest, entry["path"]) is None
    ]
    bundled = options.python == TREE_PYTHON
    content = tree.collect_tree(bundle=bundled)
    if dry_run:
        lines = [f"would create directory {rooted(root, directory)}" for directory in created]
        lines.append(
            f"would write {rooted(root, paths.RUNTIME_TREE)}/{content.name} ({len(content.files)} files: the "
            f"package the engines run{interpreter_note(content)}) and point "
            f"{rooted(root, paths.RUNTIME_TREE)}/current at it"
        )
        for planned in plan.files:
            lines.append(f"would write {rooted(root, planned.path)} (mode {planned.mode:04o}):")
            lines += ["    " + line for line in planned.data.decode().splitlines()]
        lines.append(f"would write {rooted(root, manifest_at)} (what uninstall undoes)")
        lines += [f"would undo {rooted(root, entry['path'])} (no longer installed)" for entry in stale]
        return lines + coexistence_warnings(options)
    write_directories(root, created, plan.env_directories)
    node = NodeRoot(root)
    node.write_atomic(manifest_at, manifest_data, mode=0o600)
    lines = [f"created directory {rooted(root, directory)}" for directory in created]
    # The tree before the wrappers that start it: an engine never runs a wrapper whose package is missing.
    # Byte-compiled by the interpreter the engines run (its cache tag), found beneath the root: under
    # --root (a DaemonSet) too when it is already there; otherwise every start compiles in memory.
    # The tree's own interpreter is the one running here (a copy): it compiles, from here.
    there = None if bundled else node.stat(options.python)
    compile_with = node.show(options.python) if there is not None and there.st_mode & 0o111 else None
    compile_with = bundle.interpreter() if bundled else compile_with
    lines += tree.write_tree(node, content, compile_with=compile_with)
    for planned in plan.files:
        node.write_atomic(planned.path, planned.data, mode=planned.mode, owner=kept_owner(node, planned.path))
        lines.append(f"wrote {rooted(root, planned.path)}")
    retired_now: list[dict[str, Any]] = []
    for entry in reversed(stale):
        users = stale_runtime_users(entry, others, root, proc)
        if users is None:
            lines += undo_file(entry, root, others)
            continue
        kept, entry_lines = retire_file(
            entry, root, plan.engine, (own or {}).get("runtime"), users, dry_run=False
        )
        lines += entry_lines
        retired_now += [kept] if kept is not None else []
    lines.append(f"wrote {rooted(root, manifest_at)} (what uninstall undoes)")
    if retired is not None:
        lines += take_back_retired(root, retired, [planned.path for planned in plan.files])
    if retired_now:
        record_retired(root, retired_now, [])
    return next_last([*lines, *plan.notes, *coexistence_warnings(options)])


def next_last(lines: list[str]) -> list[str]:
    """Return the report with its ``next:`` lines (what the user does afterwards, in the order they do it)
    last: every warning and every change is read before the steps that follow them."""
    return [line for line in lines if not line.startswith(NEXT)] + [
        line for line in lines if line.startswith(NEXT)
    ]


def interpreter_note(content: tree.TreeContent) -> str:
    """What ``--dry-run`` says of the interpreter copied into the tree (``--python tree``); '' without one."""
    if not content.bundled:
        return ""
    return f"; {len(content.bundled)} more: the interpreter they run, its loader and libraries"


def coexistence_warnings(options: InstallOptions) -> list[str]:
    """What else on the node acts against what was installed (hook.install.coexist), as warning lines."""
    from hook.install.coexist import install_warnings

    return install_warnings(
        options.root, options.engine, as_nvidia_hook=options.as_nvidia_hook, hooks_dir=options.hooks_dir
    )


def take_back_retired(root: str, retired: dict[str, Any], written: list[str]) -> list[str]:
    """Drop from the retired record the files install has just written again (the new manifest now holds
    what they replaced); remove the record when nothing is left in it."""
    node = NodeRoot(root)
    left = [entry for entry in retired["files"] if entry["path"] not in written]
    if len(left) == len(retired["files"]):
        return []
    if left:
        record = {**retired, "files": left}
        node.write_atomic(
            RETIRED_PATH, dump_json(record, "install-manifest", node.show(RETIRED_PATH)), mode=0o600
        )
        return []
    node.unlink(RETIRED_PATH)
    return [f"removed {node.show(RETIRED_PATH)} (the retired runtime wrapper is installed again)"]


def undo_file(
    entry: dict[str, Any], root: str, others: dict[str, dict[str, Any]], *, dry_run: bool = False
) -> list[str]:
    """Take one installed file off again: restore its predecessor, remove it, or leave a changed one."""
    path, previous = entry["path"], entry["previous"]
    node = NodeRoot(root)
    where = node.show(path)
    sharing = [engine for engine, manifest in others.items() if manifest_entry(manifest, path) is not None]
    if sharing:
        return [f"kept {where}: also installed for --engine {', '.join(sharing)}"]
    st = node.lstat(path)
    current = node.read(path, follow=False) if st is not None and stat.S_ISREG(st.st_mode) else None
    verb = "would " if dry_run else ""
    if st is None:
        if previous is None:
            return [f"{where}: already gone"]
        if not dry_run:
            write_previous(node, path, previous)
        return [f"{verb}restore {where} (it was gone)"]
    unmerge = UNMERGERS.get(entry["merge"] or "")
    if current is not None and unmerge is not None:
        link = previous.get("symlink") if previous is not None else None
        if link is not None:
            # install replaced a link with the merged file: the link comes back when what it leads to
            # is what the file holds once our part is out.
            before = node.read(os.path.join(os.path.dirname(path), link))
            if before is not None and unmerge(current, before, where) == before:
                if not dry_run:
                    write_previous(node, path, previous)
                return [f"{verb}restore {where}"]
        before = base64.b64decode(previous["data"]) if previous is not None and "data" in previous else None
        data = unmerge(current, before, where)
        if data is None:
            if not dry_run:
                node.unlink(path)
            return [f"{verb}remove {where}"]
        if not dry_run:
            node.write_atomic(path, data, mode=stat.S_IMODE(st.st_mode), owner=kept_owner(node, path))
        return [f"{verb}{'restore' if data == before else 'take our runtime out of'} {where}"]
    if current is None or sha256(current) != entry["sha256"]:
        return [f"left {where}: changed since install; remove it by hand if nothing needs it"]
    if previous is None:
        if not dry_run:
            node.unlink(path)
        return [f"{verb}remove {where}"]
    if not dry_run:
        write_previous(node, path, previous)
    return [f"{verb}restore {where}"]


def write_uninstall(
    engine: str | None,
    root: str = "/",
    *,
    dry_run: bool = False,
    proc: str | None = None,
    purge: bool = False,
) -> list[str]:
    """Undo what ``install --engine engine`` wrote under ``root``, retiring a runtime wrapper containers still
    use; then remove what earlier uninstalls retired, where no container uses it any more (``engine`` None:
    only that), and with ``purge``, once no install is left, the refusal log and the naming key
    (``purge_files``). ``proc``: the node's /proc as seen from here (default ``<root>/proc``). Return the
    report."""
    if engine is not None and engine not in ENGINES:
        raise InstallError(f"--engine {engine}: must be one of {', '.join(ENGINES)}")
    check_root(root)
    if engine is None:
        return write_purge(root, proc=proc, dry_run=dry_run, files=purge)
    manifest = load_manifest(root, engine)
    manifest_at = rooted(root, manifest_path(engine))
    if manifest is None:
        raise InstallError(f"--engine {engine}: not installed under {root} (no {manifest_at})")
    if manifest_entry(manifest, nri.UNIT_PATH) is not None:
        nri.check_unit_disabled(NodeRoot(root))
    others = load_other_manifests(root, engine)
    users = runtime_users(engine, manifest, others, root, proc)
    lines: list[str] = []
    retired: list[dict[str, Any]] = []
    for entry in reversed(manifest["files"]):
        if users is not None and entry["path"] == paths.runtime_wrapper(engine):
            kept, entry_lines = retire_file(
                entry, root, engine, manifest.get("runtime"), users, dry_run=dry_run
            )
            lines += entry_lines
            retired += [kept] if kept is not None else []
        else:
            lines += undo_file(entry, root, others, dry_run=dry_run)
    kept_paths = [entry["path"] for entry in retired]
    keep_dirs = retire.directories_for(manifest, [*kept_paths, RETIRED_PATH]) if retired else []
    if dry_run:
        lines.append(f"would remove {manifest_at}")
        lines += [
            f"would remove directory {rooted(root, directory)} if empty"
            for directory in reversed(manifest["directories"])
            if directory not in keep_dirs
        ]
        if not others and manifest.get("tree"):
            lines.append(f"would remove {rooted(root, manifest['tree'])}'s versions and current")
            lines += remove_spec_caches(NodeRoot(root), manifest, dry_run=True)
        return next_last(
            lines
            + purge_retired(root, proc=proc, dry_run=True)
            + (purge_files(NodeRoot(root), engine, dry_run=True) if purge else [])
            + nri_note(manifest)
            + list(AFTER_UNINSTALL[engine]())
        )
    node = NodeRoot(root)
    if retired:
        record_retired(root, retired, keep_dirs)
    node.unlink(manifest_path(engine))
    lines.append(f"removed {manifest_at}")
    if not others and manifest.get("tree"):
        # The last engine: nothing starts the package any more (a retired wrapper runs no Python).
        lines += tree.remove_tree(node, manifest["tree"])
        lines += remove_spec_caches(node, manifest, dry_run=False)
    if purge:  # before the directories: those install created then go too
        lines += purge_files(node, engine, dry_run=False)
    for directory in reversed(manifest["directories"]):
        where = rooted(root, directory)
        # Another engine's install lists it too (an env-file directory, empty but still needed): it stays.
        shared = any(directory in other.get("directories", []) for other in others.values())
        if directory in keep_dirs or shared or not node.is_dir(directory):
            continue
        if not node.rmdir(directory):
            if not others:
                lines.append(f"kept directory {where}: it holds files install did not write")
            continue
        lines.append(f"removed directory {where}")
    if not retired:
        lines += purge_retired(root, proc=proc, dry_run=False)
    return next_last(lines + nri_note(manifest) + list(AFTER_UNINSTALL[engine]()))


def remove_spec_caches(node: NodeRoot, manifest: dict[str, Any], *, dry_run: bool) -> list[str]:
    """Remove the decoded-spec caches the stages made (``hook.cdi.speccache``): the default one and the one
    the node's config names, with their parent under /run when that is left empty."""
    from hook.cdi import speccache

    directories = [paths.CDI_SPEC_CACHE_DIR]
    with contextlib.suppress(HookError):  # a config that no longer parses: the default place only
        directories.append(configured(node, (manifest.get("options") or {}).get("config")).cdi.spec_cache)
    lines = []
    for directory in dict.fromkeys(directory for directory in directories if directory):
        if not node.is_dir(directory):
            continue
        where = node.show(directory)
        if dry_run:
            lines.append(f"would remove the CDI spec cache {where}")
            continue
        with node.parent(directory) as (parent, name):
            gone = speccache.remove_cache(name, dir_fd=parent)
        lines.append(
            f"removed the CDI spec cache {where}"
            if gone
            else f"kept directory {where}: it holds files the CDI spec cache did not write"
        )
    if not dry_run and node.is_dir(paths.RUN_DIR) and node.rmdir(paths.RUN_DIR):
        lines.append(f"removed directory {node.show(paths.RUN_DIR)}")
    return lines


def nri_note(manifest: dict[str, Any]) -> list[str]:
    """What to run once the NRI plugin's unit is gone (when install --nri wrote it): first of the next steps,
    since the plugin would keep adding hooks that start the removed tree."""
    return [nri.uninstall_note()] if manifest_entry(manifest, nri.UNIT_PATH) is not None else []


def stale_runtime_users(
    entry: dict[str, Any], others: dict[str, dict[str, Any]], root: str, proc: str | None
) -> Users | None:
    """Return who still uses a runtime wrapper an upgrade no longer installs (None: it is not one, another
    engine's install keeps it, or no container uses it as far as the node's processes show)."""
    if paths.basename(entry["path"]) != paths.RUNTIME_WRAPPER_NAME:
        return None
    if any(manifest_entry(other, entry["path"]) is not None for other in others.values()):
        return None
    where = node_proc(root, proc)
    users = find_runtime_users(where, entry["path"]) if where is not None else None
    return None if users is None or users.idle else users


def runtime_users(
    engine: str, manifest: dict[str, Any], others: dict[str, dict[str, Any]], root: str, proc: str | None
) -> Users | None:
    """Return who still uses ``engine``'s runtime wrapper, which this uninstall would remove (None: it
    removes none, or no container uses it, as far as the node's processes show)."""
    wrapper = paths.runtime_wrapper(engine)
    if manifest_entry(manifest, wrapper) is None:
        return None
    if any(manifest_entry(other, wrapper) is not None for other in others.values()):
        return None  # another engine's install keeps it
    users = find_runtime_users(node_proc(root, proc), wrapper)
    return None if users.idle else users


def retire_file(
    entry: dict[str, Any], root: str, engine: str, runtime: str | None, users: Users, *, dry_run: bool
) -> tuple[dict[str, Any] | None, list[str]]:
    """Replace the runtime wrapper with the retired one (no Python, exec the real runtime, refuse creates);
    return its entry for the retired record and the report. A wrapper changed since install is left."""
    node = NodeRoot(root)
    path = entry["path"]
    found = node.lstat(path)
    current = node.read(path, follow=False) if found is not None and stat.S_ISREG(found.st_mode) else None
    if current is None or sha256(current) != entry["sha256"]:
        return None, undo_file(entry, root, {}, dry_run=dry_run)
    real = runtime or retire.resolve_node_runtime(root) or retire.FALLBACK_RUNTIMES[0]
    data = retire.build_retired_wrapper(real, engine)
    if not dry_run:
        node.write_atomic(path, data, mode=EXECUTABLE_MODE, owner=kept_owner(node, path))
    verb = "would keep" if dry_run else "kept"
    line = (
        f"{verb} {node.show(path)} as a passthrough to {real} (no Python; it refuses new containers): "
        f"{retire.users_text(users)}; `gpu-env-hook uninstall --purge` removes it once none does"
    )
    kept = {"path": path, "sha256": sha256(data), "mode": EXECUTABLE_MODE, "merge": None}
    return {**kept, "previous": entry["previous"]}, [line]


def record_retired(root: str, entries: list[dict[str, Any]], directories: list[str]) -> None:
    """Add retired files (and the directories that hold them) to the retired record."""
    node = NodeRoot(root)
    record = load_manifest(root, RETIRED) or retire.new_record()
    paths_now = {entry["path"] for entry in entries}
    record["files"] = [entry for entry in record["files"] if entry["path"] not in paths_now] + entries
    merged = sorted(set(record["directories"]) | set(directories), key=lambda d: (d.count("/"), d))
    record["directories"] = merged
    data = dump_json(record, "install-manifest", node.show(RETIRED_PATH))
    node.write_atomic(RETIRED_PATH, data, mode=0o600)


def write_purge(root: str, *, proc: str | None, dry_run: bool, files: bool) -> list[str]:
    """``uninstall --purge`` alone: what earlier uninstalls retired, and (``files``) ``purge_files`` with
    their directories when that leaves them empty."""
    lines = purge_retired(root, proc=proc, dry_run=dry_run)
    lines = lines or [f"nothing retired under {root} (no {rooted(root, RETIRED_PATH)})"]
    if not files:
        return lines
    node = NodeRoot(root)
    lines += purge_files(node, None, dry_run=dry_run)
    for directory in () if dry_run else (paths.REFUSAL_LOG_DIR, paths.STATE_DIR):
        if node.is_dir(directory) and node.rmdir(directory):
            lines.append(f"removed directory {node.show(directory)}")
    return lines


def purge_files(node: NodeRoot, engine: str | None, *, dry_run: bool) -> list[str]:
    """``uninstall --purge``: once no install but ``engine``'s (which this uninstall removes) is left, remove
    what the stages and the producer leave on the node's persistent storage: the refusal log (and its previous
    part) and the naming key. Nothing else: config.toml is the administrator's (and NVIDIA's); env files and
    allocation specs are the device plugin's, on ``/run``."""
    from hook.producer.namekey import DEFAULT_PATH

    present = [
        path
        for path in (paths.REFUSAL_LOG, paths.REFUSAL_LOG + ".1", DEFAULT_PATH)
        if node.lstat(path) is not None
    ]
    installed = [other for other in ENGINES if other != engine and load_manifest(node.path, other)]
    if installed:
        shown = ", ".join(node.show(path) for path in present)
        return [f"kept {shown}: still installed for {', '.join(installed)}"] if present else []
    if not dry_run:
        for path in present:
            node.unlink(path)
    return [f"{'would remove' if dry_run else 'removed'} {node.show(path)}" for path in present]


def purge_retired(root: str, *, proc: str | None, dry_run: bool) -> list[str]:
    """Remove what earlier uninstalls retired, file by file, once no container uses it; then the record and
    the directories that held only that."""
    record = load_manifest(root, RETIRED)
    if record is None:
        return []
    node = NodeRoot(root)
    others = load_other_manifests(root, RETIRED)
    lines, left = [], []
    for entry in record["files"]:
        users = find_runtime_users(node_proc(root, proc), entry["path"])
        if not users.idle:
            left.append(entry)
            lines.append(f"kept {node.show(entry['path'])} (retired): {retire.users_text(users)}")
            continue
        lines += undo_file(entry, root, others, dry_run=dry_run)
    if dry_run:
        return lines
    if left:
        data = dump_json({**record, "files": left}, "install-manifest", node.show(RETIRED_PATH))
        node.write_atomic(RETIRED_PATH, data, mode=0o600)
        return lines
    node.unlink(RETIRED_PATH)
    lines.append(f"removed {node.show(RETIRED_PATH)}")
    for directory in reversed(record["directories"]):
        if node.is_dir(directory) and node.rmdir(directory):
            lines.append(f"removed directory {node.show(directory)}")
    return lines
