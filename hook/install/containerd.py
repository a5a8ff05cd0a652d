"""containerd: add the runtime handler to the config file whose CRI table containerd actually uses.

containerd reads its main config, then every file its ``imports`` name (globs sorted, imports of imports
too), each merged over the ones before. containerd 1.x merges a plugin's table *whole*: an imported file
that has a ``plugins."io.containerd.grpc.v1.cri"`` table replaces the main config's CRI table entirely
(containerd/containerd#5837, #7982), so a drop-in holding only our handler would reset the node's CRI
settings to the defaults. containerd 2.x merges per key. And inside one file, the CRI plugin decodes a
``runtimes`` table *over* its built-in one: a file naming any runtime replaces the built-in map, so the
built-in ``runc`` has to be written out too when the file names none.

So on a node whose config merges per key (version 3, and version 4 that containerd >= 2.3 writes) and whose
main config imports a drop-in directory (2.3's default config imports ``/etc/containerd/conf.d/*.toml``),
install writes its own drop-in there — but only after computing the effective config (the main file and its
imports, each merged over the ones before, as containerd merges them) with and without it, and finding the
one with it is the one without plus exactly our tables. Otherwise (containerd 1.x's whole-table merge, or no
drop-in directory) it appends the handler's tables, between two marker comments, to the file that holds the
CRI table containerd uses (the last file in load order that has one; for versions 3 and 4 the main config):
every earlier byte of that file is kept, the result is checked by reading it back (it must equal the file as
it was plus exactly our tables), and the manifest records the file so uninstall restores its bytes. The
handler copies the table of the runtime it is based on — the default runtime (``default_runtime_name``) when
it is a runc-shim runtime, else ``runc``, else containerd's built-in runc — with ``BinaryName`` set to the
runtime wrapper: ``SystemdCgroup`` and every other option follow the node.

The config version is read as containerd reads it: no ``version`` key means 1. Install refuses, writing
nothing, what it cannot edit safely: invalid TOML, an unknown version, an import newer than the main config,
an import that cannot be read, a handler of that name it did not write.

k3s and RKE2 generate ``config.toml`` from ``config.toml.tmpl`` at every start; ``--containerd-config
…/config.toml.tmpl`` appends the handler to the template (created as ``{{ template "base" . }}`` plus the
handler when there is none), reading the generated ``config.toml`` beside it for the base runtime.
"""

import copy
import fnmatch
import glob
import os
import stat
from collections.abc import Mapping
from typing import Any, NamedTuple

from hook import __version__
from hook.install.common import CONFIG_MODE, EnginePlan, InstallError, InstallOptions, PlannedFile, rooted
from hook.install.rootfs import NodeRoot
from hook.util import paths

# The manifest's ``merge`` kind for a containerd config install appended to: uninstall takes the block out.
CONTAINERD_MERGE = "containerd-handler"
# The CRI plugin's table name in each config version (version 3 is containerd 2.x's runtime part of CRI;
# version 4, written by containerd >= 2.3, keeps version 3's table names).
CRI_PLUGIN = {
    1: "cri",
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",
}
# disabled_plugins entries that switch CRI off, per version.
CRI_DISABLED = {
    1: ("cri",),
    2: ("io.containerd.grpc.v1.cri",),
    3: ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"),
    4: ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"),
}
VERSIONS = (1, 2, 3, 4)
# From this version on only containerd 2.x reads the config, and it merges imported files per key.
PER_KEY_MERGE = 3
DEFAULT_VERSION = 2
RUNC_SHIM = "io.containerd.runc.v2"
DEFAULT_RUNTIME = "runc"
# containerd's built-in runc runtime, as ``containerd config dump`` shows it (1.6/1.7 for versions 1 and 2,
# 2.x for version 3): written out when the CRI table names no runtime, so that adding ours keeps it.
_RUNC_OPTIONS_1X = {
    "BinaryName": "",
    "CriuImagePath": "",
    "CriuPath": "",
    "CriuWorkPath": "",
    "IoGid": 0,
    "IoUid": 0,
    "NoNewKeyring": False,
    "NoPivotRoot": False,
    "Root": "",
    "ShimCgroup": "",
    "SystemdCgroup": False,
}
_RUNC_OPTIONS_2X = {
    "BinaryName": "",
    "CriuImagePath": "",
    "CriuWorkPath": "",
    "IoGid": 0,
    "IoUid": 0,
    "NoNewKeyring": False,
    "Root": "",
    "ShimCgroup": "",
}
BUILTIN_RUNC: dict[int, dict[str, Any]] = {
    1: {"runtime_type": RUNC_SHIM, "options": _RUNC_OPTIONS_1X},
    2: {"runtime_type": RUNC_SHIM, "options": _RUNC_OPTIONS_1X},
    3: {"runtime_type": RUNC_SHIM, "sandboxer": "podsandbox", "options": _RUNC_OPTIONS_2X},
    4: {"runtime_type": RUNC_SHIM, "sandboxer": "podsandbox", "options": _RUNC_OPTIONS_2X},
}
BLOCK_BEGIN = "# gpu-env-hook: begin"
BLOCK_END = "# gpu-env-hook: end"
K3S_TEMPLATE_SUFFIX = ".tmpl"
K3S_BASE = '{{ template "base" . }}\n'
# NVIDIA's runtimes add NVIDIA's own hook: the shim must not exec them (the container would get two).
NVIDIA_RUNTIMES = (
    "nvidia-container-runtime",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
)


class ConfigFile(NamedTuple):
    """One file containerd loads: its node path, bytes, parsed document and config version."""

    path: str
    data: bytes
    document: dict[str, Any]
    version: int


class Handler(NamedTuple):
    """What install adds: the file it writes (a drop-in, or the file it appends to), the tables (path →
    table), the base runtime and notes."""

    target: str
    tables: tuple[tuple[tuple[str, ...], dict[str, Any]], ...]
    base: str
    binary: str | None
    notes: tuple[str, ...]


# --- reading configs as containerd does ------------------------------------------------------------------


def parse_config(data: bytes, where: str) -> dict[str, Any]:
    """Parse one containerd config file (UTF-8 TOML), refusing what containerd could not read either."""
    import tomllib

    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InstallError(f"{where}: not UTF-8 text; fix it first") from None
    except tomllib.TOMLDecodeError as err:
        raise InstallError(f"{where}: not valid TOML ({err}); fix it first") from None
    return document


def resolve_version(document: dict[str, Any], where: str) -> int:
    """Return a config's version as containerd reads it: no ``version`` key means 1."""
    version = document.get("version", 1)
    if isinstance(version, bool) or version not in VERSIONS:
        raise InstallError(
            f"{where}: config version {version!r} is not one install knows (1, 2, 3 or 4); fix it first"
        )
    result: int = version
    return result


def resolve_imports(
    root: str, parent: str, document: dict[str, Any], extra: Mapping[str, bytes] | None = None
) -> list[str]:
    """Return the node paths a file's ``imports`` name, as containerd resolves them: a pattern with ``*`` is
    globbed (matches sorted; ``extra`` paths it matches count as present), any other relative path is
    relative to the importing file's directory."""
    imports = document.get("imports", [])
    where = rooted(root, parent)
    if not isinstance(imports, list) or not all(isinstance(item, str) for item in imports):
        raise InstallError(f"{where}: imports must be an array of strings; fix it first")
    found: list[str] = []
    for item in imports:
        if "*" in item:
            pattern = item if os.path.isabs(item) else os.path.join("/", item)
            matches = glob.glob(rooted(root, pattern), include_hidden=True)
            prefix = "" if root in ("", "/") else root.rstrip("/")
            names = {match[len(prefix) :] or "/" for match in matches}
            names |= {path for path in extra or {} if fnmatch.fnmatchcase(path, pattern)}
            found += sorted(names)
        else:
            path = os.path.normpath(item)
            found.append(path if os.path.isabs(path) else os.path.join(os.path.dirname(parent), path))
    return found


def load_chain(
    root: str,
    main: str,
    main_data: bytes,
    extra: Mapping[str, bytes] | None = None,
    *,
    keep_blocks: bool = False,
) -> list[ConfigFile]:
    """Return the main config and every file it imports, in the order containerd merges them (each file
    once); refuse an import that cannot be read or is newer than the main config.

    Install's own blocks are left out (install replaces them) unless ``keep_blocks``; ``extra`` (node path
    to bytes) are files as install would write them, read in place of what is there now.
    """
    where = rooted(root, main)
    main_data = main_data if keep_blocks else strip_block(main_data)
    document = parse_config(main_data, where)
    chain = [ConfigFile(main, main_data, document, resolve_version(document, where))]
    seen = {main}
    pending = resolve_imports(root, main, document, extra)
    while pending:
        path, pending = pending[0], pending[1:]
        if path in seen:
            continue
        seen.add(path)
        where = rooted(root, path)
        data = extra.get(path) if extra is not None else None
        if data is None:
            if os.path.isdir(where):
                raise InstallError(
                    f"{where}: imported by the containerd config, but is a directory; fix it first"
                )
            data = NodeRoot(root).read(path)
            if data is None:
                raise InstallError(f"{where}: imported by the containerd config, but missing; fix it first")
            data = data if keep_blocks else strip_block(data)
        document = parse_config(data, where)
        version = resolve_version(document, where)
        if version > chain[0].version:
            raise InstallError(
                f"{where}: config version {version} is newer than the main config's "
                f"({chain[0].version}); containerd refuses that; fix it first"
            )
        chain.append(ConfigFile(path, data, document, version))
        pending += resolve_imports(root, path, document, extra)
    return chain


def cri_table(document: dict[str, Any], version: int) -> dict[str, Any] | None:
    """Return a file's CRI plugin table for ``version``, or None when it has none."""
    plugins = document.get("plugins")
    table = plugins.get(CRI_PLUGIN[version]) if isinstance(plugins, dict) else None
    return table if isinstance(table, dict) else None


def merge_tables(into: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Merge ``over`` into a copy of ``into`` per key (tables recursively), as containerd 2.x does."""
    merged = copy.deepcopy(into)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_tables(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def merged_cri(chain: list[ConfigFile]) -> dict[str, Any]:
    """Return every file's CRI table merged per key, as containerd 2.x merges them."""
    merged: dict[str, Any] = {}
    for config in chain:
        merged = merge_tables(merged, cri_table(config.document, chain[0].version) or {})
    return merged


def effective_config(chain: list[ConfigFile]) -> dict[str, Any]:
    """Return the config containerd runs with (``imports`` and ``version`` left out): each file merged over
    the ones before it — per key from version 3 on (containerd 2.x), a plugin's table replaced whole
    before (containerd 1.x)."""
    merged: dict[str, Any] = {}
    for config in chain:
        document = {key: value for key, value in config.document.items() if key not in ("imports", "version")}
        plugins = document.get("plugins")
        if chain[0].version < PER_KEY_MERGE and isinstance(plugins, dict):
            earlier = merged.get("plugins")
            document["plugins"] = {**(earlier if isinstance(earlier, dict) else {}), **plugins}
            merged.pop("plugins", None)
        merged = merge_tables(merged, document)
    return merged


def resolve_cri(chain: list[ConfigFile], root: str = "/") -> tuple[ConfigFile, dict[str, Any]]:
    """Return the file install appends to and the CRI table containerd ends up with.

    Versions 1 and 2 (containerd 1.x merges plugin tables whole): the last file in load order with a CRI
    table, and that table. Versions 3 and 4 (containerd 2.x merges per key): the main config, and every
    file's table merged. A version-2 config is also read by containerd 2.x, per key: when the two readings
    give different runtimes, install cannot tell which containerd runs and refuses.
    """
    version = chain[0].version
    if version >= PER_KEY_MERGE:
        return chain[0], merged_cri(chain)
    target, table = chain[0], {}
    for config in reversed(chain):
        found = cri_table(config.document, version)
        if found is not None:
            target, table = config, found
            break

    def runtime_view(cri: dict[str, Any]) -> Any:
        section = cri.get("containerd")
        return (
            {key: section.get(key) for key in ("default_runtime_name", "runtimes")}
            if isinstance(section, dict)
            else {}
        )

    if runtime_view(table) != runtime_view(merged_cri(chain)):
        raise InstallError(
            f"{rooted(root, target.path)}: its CRI table and an earlier file's set the runtimes "
            "differently (containerd 1.x uses only the last table, 2.x merges them); make them agree first"
        )
    return target, table


class HandlerSources(NamedTuple):
    """Where the runtime handler is defined: the file whose definition containerd runs with (None: none
    takes effect), every file that defines it (load order), and the ``BinaryName`` containerd runs."""

    in_effect: str | None
    defined_in: tuple[str, ...]
    binary: str | None


def find_handler(chain: list[ConfigFile]) -> HandlerSources:
    """Return where the handler is defined and which definition takes effect: from version 3 on (per-key
    merge) the last file that sets it; before, the last file with a CRI table, when it sets it."""
    version = chain[0].version

    def handler_in(document: dict[str, Any]) -> Any:
        section = (cri_table(document, version) or {}).get("containerd")
        runtimes = section.get("runtimes") if isinstance(section, dict) else None
        return runtimes.get(paths.RUNTIME_HANDLER) if isinstance(runtimes, dict) else None

    defined = tuple(config.path for config in chain if handler_in(config.document) is not None)
    if version >= PER_KEY_MERGE:
        in_effect = defined[-1] if defined else None
    else:
        with_cri = [config.path for config in chain if cri_table(config.document, version) is not None]
        in_effect = with_cri[-1] if with_cri and with_cri[-1] in defined else None
    table = handler_in(effective_config(chain)) if in_effect is not None else None
    options = table.get("options") if isinstance(table, dict) else None
    binary = options.get("BinaryName") if isinstance(options, dict) else None
    return HandlerSources(in_effect, defined, binary if isinstance(binary, str) else None)


def runtimes_of(cri: dict[str, Any], where: str) -> dict[str, Any]:
    """Return the CRI table's ``containerd.runtimes`` (empty when it names none)."""
    section = cri.get("containerd", {})
    runtimes = section.get("runtimes", {}) if isinstance(section, dict) else {}
    if not isinstance(runtimes, dict) or not all(isinstance(value, dict) for value in runtimes.values()):
        raise InstallError(f"{where}: containerd.runtimes must be a table of tables; fix it first")
    return runtimes


def resolve_base_runtime(cri: dict[str, Any], version: int, where: str) -> tuple[str, dict[str, Any]]:
    """Return the runtime the handler is based on, and its table: the default runtime when it runs the runc
    shim, else ``runc``, else containerd's built-in runc."""
    runtimes = runtimes_of(cri, where) or {DEFAULT_RUNTIME: BUILTIN_RUNC[version]}
    section = cri.get("containerd", {})
    default = section.get("default_runtime_name") if isinstance(section, dict) else None
    for name in (default or DEFAULT_RUNTIME, DEFAULT_RUNTIME):
        table = runtimes.get(name)
        if table is not None and table.get("runtime_type", RUNC_SHIM) in (RUNC_SHIM, ""):
            return name, table
    return DEFAULT_RUNTIME, BUILTIN_RUNC[version]


def build_handler_table(base: dict[str, Any], wrapper: str) -> dict[str, Any]:
    """Return the handler's table: the base runtime's, runc shim, ``BinaryName`` = the runtime wrapper."""
    table = copy.deepcopy(base)
    table["runtime_type"] = RUNC_SHIM
    options = table.get("options")
    table["options"] = {**(options if isinstance(options, dict) else {}), "BinaryName": wrapper}
    return table


def real_runtime(base: dict[str, Any], root: str = "/") -> str | None:
    """Return the runtime binary the shim should exec for this node: the base runtime's ``BinaryName`` when
    it names one that is not NVIDIA's runtime — a bare name looked up on the node's PATH, as the runc shim
    does (None: the shim's default, runc)."""
    options = base.get("options")
    binary = options.get("BinaryName") if isinstance(options, dict) else None
    if not isinstance(binary, str) or not binary or os.path.basename(binary) in NVIDIA_RUNTIMES:
        return None
    if os.path.isabs(binary):
        return binary
    for directory in paths.FIXED_PATH.split(":"):
        candidate = os.path.join(directory, binary)
        if "/" not in binary and os.access(rooted(root, candidate), os.X_OK):
            return candidate
    return None


def disabled_cri(chain: list[ConfigFile]) -> str | None:
    """Return the file whose ``disabled_plugins`` switches the CRI plugin off, or None."""
    names = CRI_DISABLED[chain[0].version]
    for config in chain:
        disabled = config.document.get("disabled_plugins", [])
        if isinstance(disabled, list) and any(name in disabled for name in names):
            return config.path
    return None


# --- the block install appends ---------------------------------------------------------------------------


def strip_block(data: bytes) -> bytes:
    """Return ``data`` without the block an earlier install appended (unchanged when there is none)."""
    text = data.decode("utf-8", "surrogateescape")
    begin = text.find(BLOCK_BEGIN)
    end = text.find(BLOCK_END, begin)
    if begin < 0 or end < 0 or (begin > 0 and text[begin - 1] != "\n"):
        return data
    end = text.find("\n", end)
    end = len(text) if end < 0 else end + 1
    head = text[:begin]
    if head.endswith("\n\n"):
        head = head[:-1]
    return (head + text[end:]).encode("utf-8", "surrogateescape")


Tables = tuple[tuple[tuple[str, ...], dict[str, Any]], ...]


def build_block(tables: Tables, base: str, preamble: str) -> str:
    """Return the block install appends: markers, what it is, ``preamble`` (top-level keys), the tables."""
    from hook.install.tomlwrite import render_tables

    text = (
        f"{BLOCK_BEGIN} (gpu-env-hook {__version__}; `gpu-env-hook uninstall --engine containerd` "
        "removes this block)\n"
        f"# Runtime handler {paths.RUNTIME_HANDLER}: the options of runtime {base}, with BinaryName = "
        "the gpu-env-runtime wrapper.\n"
    )
    if any(path[-1] == DEFAULT_RUNTIME for path, _ in tables):
        text += (
            f"# {DEFAULT_RUNTIME}: containerd's built-in runtime, written out because a config that names "
            "a runtime replaces the built-in list.\n"
        )
    if any(path[-1] == "io.containerd.nri.v1.nri" for path, _ in tables):
        text += "# NRI switched on for the gpu-env-hook NRI plugin (install --nri).\n"
    text += preamble
    for path, table in tables:
        text += "\n" + render_tables(path, table)
    return text + BLOCK_END + "\n"


def append_block(data: bytes, block: str) -> bytes:
    """Return ``data`` with ``block`` appended after a blank line; every byte of ``data`` kept."""
    if not data:
        return block.encode()
    separator = b"\n" if data.endswith(b"\n") else b"\n\n"
    return data + separator + block.encode()


def expected_document(
    document: dict[str, Any], tables: tuple[tuple[tuple[str, ...], dict[str, Any]], ...]
) -> dict[str, Any]:
    """Return ``document`` with each table added at its path (what the edited file must read back as)."""
    result = copy.deepcopy(document)
    for path, table in tables:
        node = result
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = copy.deepcopy(table)
    return result


def unmerge_config(current: bytes, previous: bytes | None, where: str) -> bytes | None:
    """Return the config with install's block taken out (None: remove the file; install created it).

    ``previous`` comes back byte for byte when nothing else changed; otherwise only the block goes.
    """
    del where
    stripped = strip_block(current)
    if previous is None:
        # Install created the file: nothing else in it (a k3s template it made holds only the base).
        return None if stripped.strip() in (b"", K3S_BASE.strip().encode()) else stripped
    if stripped in (previous, previous + b"\n"):
        return previous
    return stripped


# --- planning --------------------------------------------------------------------------------------------


class Source(NamedTuple):
    """What install edits: the file (node path) and the text it appends to, the files containerd loads
    (``chain``, main config first) and what containerd reads in place of the edited text (a k3s template
    renders as the generated config followed by what the template adds)."""

    path: str
    text: bytes
    chain: list[ConfigFile]
    template: bool
    preamble: str


def load_source(root: str, config_path: str, data: bytes | None, version_option: int | None) -> Source:
    """Read the config at ``config_path`` (``data``: its bytes, None when missing) and what it imports."""
    where = rooted(root, config_path)
    if config_path.endswith(K3S_TEMPLATE_SUFFIX) and (data is None or b"{{" in data):
        generated_path = os.path.join(os.path.dirname(config_path), "config.toml")
        generated = NodeRoot(root).read(generated_path)
        if generated is None:
            raise InstallError(
                f"{rooted(root, generated_path)}: missing; start k3s/RKE2 once so that it writes the "
                f"config {where} extends, then install"
            )
        chain = load_chain(root, generated_path, generated)
        text = strip_block(data) if data is not None else K3S_BASE.encode()
        return Source(config_path, text, chain, template=True, preamble="")
    if data is None:
        version = version_option or DEFAULT_VERSION
        chain = [ConfigFile(config_path, b"", {"version": version}, version)]
        return Source(config_path, b"", chain, template=False, preamble=f"version = {version}\n")
    chain = load_chain(root, config_path, data)
    if version_option is not None and version_option != chain[0].version:
        raise InstallError(
            f"--containerd-config-version {version_option}: {where} is config version {chain[0].version}"
        )
    return Source(config_path, chain[0].data, chain, template=False, preamble="")


def plan_handler(root: str, source: Source, extra: Tables = ()) -> tuple[bytes, Handler]:
    """Decide the handler's tables (and ``extra`` tables, e.g. NRI's) and the edited bytes of the file they
    are appended to."""
    version = source.chain[0].version
    target, cri = resolve_cri(source.chain, root)
    if source.template:
        target = ConfigFile(source.path, source.text, source.chain[0].document, version)
    where = rooted(root, target.path)
    runtimes = runtimes_of(cri, where)
    if paths.RUNTIME_HANDLER in runtimes:
        raise InstallError(
            f"{where}: already defines runtime {paths.RUNTIME_HANDLER!r}, not written by install; "
            "remove it first"
        )
    base_name, base = resolve_base_runtime(cri, version, where)
    prefix = ("plugins", CRI_PLUGIN[version], "containerd", "runtimes")
    tables: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    if not runtimes:
        tables.append(((*prefix, DEFAULT_RUNTIME), copy.deepcopy(BUILTIN_RUNC[version])))
    tables.append(
        ((*prefix, paths.RUNTIME_HANDLER), build_handler_table(base, paths.runtime_wrapper("containerd")))
    )
    tables += extra
    dropin = None if source.template else plan_dropin(root, source.chain, tuple(tables), base_name)
    if dropin is not None:
        target, edited = dropin
        check_edit(rooted(root, target.path), edited, target.document, tuple(tables))
        return edited, Handler(
            target.path, tuple(tables), base_name, real_runtime(base, root), disabled_note(root, source)
        )
    block = build_block(tuple(tables), base_name, source.preamble)
    edited = append_block(target.data, block)
    if source.template:
        # What k3s renders: the generated config in place of {{ template "base" . }}, then our block.
        check_edit(where, append_block(source.chain[0].data, block), source.chain[0].document, tuple(tables))
    else:
        check_edit(where, edited, target.document, tuple(tables))
    return edited, Handler(
        target.path, tuple(tables), base_name, real_runtime(base, root), disabled_note(root, source)
    )


def disabled_note(root: str, source: Source) -> tuple[str, ...]:
    """A warning when a file containerd loads switches the CRI plugin off (the handler serves only CRI)."""
    disabled = disabled_cri(source.chain)
    if disabled is None:
        return ()
    warning = (
        f"warning: {rooted(root, disabled)} lists the CRI plugin in disabled_plugins: Kubernetes cannot "
        f"use this containerd, and handler {paths.RUNTIME_HANDLER!r} serves only CRI "
        "(ctr run --runc-binary still works)"
    )
    return (warning,)


def dropin_directory(main: ConfigFile) -> str | None:
    """Return the drop-in directory the main config imports (the last ``imports`` pattern ``DIR/*.toml``,
    as containerd 2.3's default config has ``/etc/containerd/conf.d/*.toml``), or None."""
    imports = main.document.get("imports", [])
    found = None
    for item in imports if isinstance(imports, list) else []:
        if isinstance(item, str) and os.path.basename(item) == "*.toml" and "*" not in os.path.dirname(item):
            found = os.path.normpath(os.path.join("/", os.path.dirname(item)))
    return found


def plan_dropin(
    root: str, chain: list[ConfigFile], tables: Tables, base: str
) -> tuple[ConfigFile, bytes] | None:
    """Return the drop-in install writes instead of appending to a file (its node path, parsed form and
    bytes), or None to keep the marked block: only when the main config imports a drop-in directory and
    containerd merges files per key (version 3 on), and only when the config containerd would run with
    after install is the one it runs with now plus exactly our tables (every other setting kept)."""
    version = chain[0].version
    directory = dropin_directory(chain[0])
    if version < PER_KEY_MERGE or directory is None:
        return None
    path = os.path.join(directory, paths.CONTAINERD_DROPIN_NAME)
    data = build_block(tables, base, f"version = {version}\n").encode()
    after = load_chain(root, chain[0].path, chain[0].data, {path: data})
    loaded = [config for config in after if config.path == path]
    if not loaded or effective_config(after) != expected_document(effective_config(chain), tables):
        return None
    return ConfigFile(path, data, {"version": version}, version), data


def check_edit(where: str, edited: bytes, before: dict[str, Any], tables: Tables) -> None:
    """Read the edited text back: it must be the file as it was plus exactly our tables."""
    import tomllib

    try:
        after = tomllib.loads(edited.decode("utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise InstallError(
            f"{where}: cannot add runtime {paths.RUNTIME_HANDLER!r} by appending tables ({err}); "
            "add it by hand"
        ) from None
    if after != expected_document(before, tables):
        raise InstallError(
            f"{where}: appending runtime {paths.RUNTIME_HANDLER!r} would change other settings; "
            "add it by hand"
        )


def config_mode(where: str) -> int:
    """The mode the edited config keeps (0644 for a new one)."""
    try:
        return stat.S_IMODE(os.stat(where).st_mode)
    except FileNotFoundError:
        return CONFIG_MODE


def plan(options: InstallOptions) -> EnginePlan:
    """Return the containerd config with the handler appended, and what the user must do next."""
    config_path = options.containerd_config
    if not os.path.isabs(config_path):
        raise InstallError(f"--containerd-config {config_path}: must be an absolute path")
    data = NodeRoot(options.root).read(config_path)
    source = load_source(options.root, config_path, data, options.containerd_config_version)
    extra: Tables = ()
    unit: tuple[PlannedFile, ...] = ()
    nri_notes: tuple[str, ...] = ()
    if options.nri:
        from hook.install import nri

        version = nri.containerd_version(options)
        with_table = [
            rooted(options.root, config.path)
            for config in source.chain
            if isinstance(config.document.get("plugins"), dict)
            and nri.NRI_PLUGIN in config.document["plugins"]
        ]
        main = source.chain[0]
        dropin = not source.template and main.version >= PER_KEY_MERGE and dropin_directory(main) is not None
        extra = nri.nri_tables(
            version, main.version, effective_config(source.chain), with_table, dropin=dropin
        )
        if options.nri_unit:
            planned_unit, note = nri.plan_unit(options)
            unit, nri_notes = (planned_unit,), (note,)
    edited, handler = plan_handler(options.root, source, extra)
    where = rooted(options.root, handler.target)
    file = PlannedFile(handler.target, edited, config_mode(where), CONTAINERD_MERGE)
    if config_path.endswith(K3S_TEMPLATE_SUFFIX):
        restart = "k3s/RKE2 (it renders the template into config.toml and restarts containerd)"
    else:
        restart = "containerd (systemctl restart containerd)"
    restart_note = (
        f"next: restart {restart} to load the runtime handler {paths.RUNTIME_HANDLER} (added to {where}, "
        f"with the options of runtime {handler.base}); pods select it with a RuntimeClass whose handler "
        f"is {paths.RUNTIME_HANDLER}"
    )
    return EnginePlan((file, *unit), (*handler.notes, restart_note, *nri_notes), handler.binary)


def uninstall_notes() -> tuple[str, ...]:
    """What the user must do after uninstall: containerd keeps the handler it loaded until it restarts."""
    return (
        (
            f"next: restart containerd (systemctl restart containerd) when no container uses runtime handler "
            f"{paths.RUNTIME_HANDLER}: it keeps the config it loaded until then"
        ),
    )
