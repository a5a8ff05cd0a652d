"""The install manifest: what each file install wrote replaced, so uninstall can put exactly that back.

A manifest (``<STATE_DIR>/install-<engine>.json``) records each file's digest and the file it replaced, and
the directories install created. A file another engine's manifest also lists keeps the predecessor recorded
first, so whichever uninstall comes last restores it.
"""

import base64
import hashlib
import json
import os
import stat
from typing import Any

from hook import __version__
from hook.install.common import ENGINES, InstallError, Plan, rooted
from hook.install.rootfs import NodeRoot
from hook.util import paths

MANIFEST_VERSION = 1
# The record of what uninstall retired instead of removing (hook.install.retire): a manifest of its own.
RETIRED = "retired"
RETIRED_PATH = os.path.join(paths.STATE_DIR, "retired.json")


def manifest_path(engine: str) -> str:
    """Return the node path of an engine's install manifest (or of the retired record)."""
    if engine == RETIRED:
        return RETIRED_PATH
    return paths.install_record(engine)


def load_manifest(root: str, engine: str) -> dict[str, Any] | None:
    """Return an engine's manifest, or None when that engine is not installed under ``root``."""
    where = rooted(root, manifest_path(engine))
    data = NodeRoot(root).read(manifest_path(engine), follow=False)
    if data is None:
        return None
    from hook.install.schema import parse_document, validate_document

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


def capture_previous(root: str, path: str) -> dict[str, Any] | None:
    """Record the entry at the node path ``path`` so uninstall can put it back (None: there is none)."""
    node = NodeRoot(root)
    st = node.lstat(path)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"symlink": node.readlink(path)}
    if not stat.S_ISREG(st.st_mode):
        raise InstallError(f"{node.show(path)}: exists and is not a regular file; move it away first")
    data = node.read(path, follow=False) or b""
    return {
        "data": base64.b64encode(data).decode("ascii"),
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
    }


def missing_directories(root: str, node_paths: list[str]) -> list[str]:
    """Return the node directories (parents first) that must be created to hold ``node_paths``."""
    node = NodeRoot(root)
    missing: list[str] = []
    for path in node_paths:
        chain = []
        directory = os.path.dirname(path)
        while directory not in ("", "/") and not node.is_dir(directory):
            found = node.lstat(directory)
            if found is not None:
                what = f"a symlink to {node.readlink(directory)}" if stat.S_ISLNK(found.st_mode) else "a file"
                raise InstallError(
                    f"{node.show(directory)}: is {what}, not a directory beneath {root}; move it away first"
                )
            chain.append(directory)
            directory = os.path.dirname(directory)
        missing += [found for found in reversed(chain) if found not in missing]
    return missing


def build_manifest(
    plan: Plan,
    root: str,
    own: dict[str, Any] | None,
    others: dict[str, dict[str, Any]],
    created: list[str],
    *,
    options: dict[str, Any] | None = None,
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
            foreign = engine not in (plan.engine, RETIRED)
            if foreign and planned.merge is None and entry["sha256"] != sha256(planned.data):
                if planned.path.endswith(".json") and {engine, plan.engine} == {"podman", "crio"}:
                    raise InstallError(
                        f"{planned.path}: `install --engine {engine}` wrote it for {engine}; podman and "
                        "CRI-O each need their own (it names the engine whose annotations pin env files): "
                        f"install podman with --hooks-dir {paths.OCI_HOOKS_DIRS[1]} (podman reads it "
                        f"after, and over, {paths.OCI_HOOKS_DIRS[0]}, CRI-O's)"
                    )
                raise InstallError(
                    f"{planned.path}: `install --engine {engine}` wrote it with other options; "
                    f"install with the same options, or uninstall --engine {engine} first"
                )
            previous, recorded = entry["previous"], True
            break
        if not recorded:
            previous = capture_previous(root, planned.path)
        entries.append(
            {
                "path": planned.path,
                "sha256": sha256(planned.data),
                "mode": planned.mode,
                "merge": planned.merge,
                "previous": previous,
            }
        )
    ours = [planned.path for planned in plan.files] + [
        manifest_path(plan.engine),
        paths.RUNTIME_TREE + "/current",
        paths.REFUSAL_LOG,
        *(directory + "/" for directory in plan.env_directories),
    ]
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
        "runtime": plan.runtime,
        "tree": paths.RUNTIME_TREE,
        **({"options": options} if options is not None else {}),
    }
