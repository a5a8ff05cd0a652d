"""oci-hooks.d files judged the way podman 4.3.1 judges them (containers/common ``pkg/hooks``, v0.50).

Podman re-reads every hooks directory on each container start; one file it refuses makes *every* container
start fail (``setting up OCI Hooks: ...``). So this module reproduces its reading exactly:

- JSON is decoded as Go's ``encoding/json`` decodes it into the hook structs: object keys match field names
  exactly, else case-insensitively; a repeated key overwrites (a repeated object merges); ``null`` leaves a
  value unset; unknown keys are ignored; a value of the wrong type is an error.
- ``version`` picks the reader: ``1.0.0``, or the legacy ``0.1.0`` (also when ``version`` is absent).
- Validation: ``hook.path`` set; ``stat(hook.path)`` succeeds (*does not exist* makes podman skip the hook
  silently, any other failure refuses the file); every regular expression in ``when.annotations`` (keys and
  values) and ``when.commands`` compiles with Go's RE2 syntax; ``stages`` present, each one an OCI stage or
  one of podman's extension stages (``precreate``, ``poststop``).

Regular expressions are compiled with RE2 itself (``google-re2``), plus the two places where Go's
``regexp`` (Go 1.19, which built Debian's podman) is stricter than the C++ library: ``\\C`` and
``(?<name>``. Python's ``re`` would accept lookarounds, backreferences and possessive
quantifiers that podman refuses.

What podman accepts but that does nothing or surprises is a *warning*: a hook that can never run (no
condition in ``when``, ``always: false``, ``hasBindMounts: false``, no stage), a missing or relative
executable, keys podman ignores or reads under another spelling, the legacy format.
"""

import json
import os
import stat
from typing import Any, Literal, NamedTuple

from hook.util.safetext import decode_error_reason, json_kind, os_reason

CURRENT = "1.0.0"
LEGACY = "0.1.0"
OCI_STAGES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
PODMAN_EXTENSION_STAGES = ("precreate", "poststop")
MAX_HOOKS_FILE_BYTES = 16 * 1024 * 1024
_INT64 = 2**63
# runc turns the timeout into nanoseconds in an int64: beyond this it wraps and the hook times out at once.
MAX_TIMEOUT = (2**63 - 1) // 1_000_000_000
_QUOTE_LIMIT = 120
MAX_GO_NESTING = 1000

Severity = Literal["error", "warning"]


class Finding(NamedTuple):
    """One thing to say about a hooks file: where (a JSON path), what, and whether podman refuses it."""

    path: str
    message: str
    severity: Severity

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class HooksReport(NamedTuple):
    """Every finding about one file, and the format version podman read it as (None: unreadable)."""

    version: str | None
    findings: list[Finding]

    @property
    def errors(self) -> list[Finding]:
        """The findings that make podman refuse the file (and every container start with it)."""
        return [finding for finding in self.findings if finding.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        """The findings podman accepts but that do nothing or surprise."""
        return [finding for finding in self.findings if finding.severity == "warning"]


# --- Go's encoding/json, for the hook structs -----------------------------------------------------------


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in document order (Go sees repeated keys; a dict would not)."""


class _Fraction(str):
    """A JSON number with a fraction or exponent: Go refuses it for an int field."""

    __slots__ = ()


# Field kinds of the Go structs podman decodes into.
_STRING, _STRPTR, _STRINGS, _INTPTR, _BOOLPTR, _STRMAP = (
    "string",
    "*string",
    "[]string",
    "*int",
    "*bool",
    "map",
)
_Fields = dict[str, Any]
_HOOK: _Fields = {"path": _STRING, "args": _STRINGS, "env": _STRINGS, "timeout": _INTPTR}
_WHEN: _Fields = {"always": _BOOLPTR, "annotations": _STRMAP, "commands": _STRINGS, "hasBindMounts": _BOOLPTR}
_VERSION: _Fields = {"version": _STRING}
_V1: _Fields = {"version": _STRING, "hook": _HOOK, "when": _WHEN, "stages": _STRINGS}
_V0: _Fields = {
    "hook": _STRPTR,
    "arguments": _STRINGS,
    "stages": _STRINGS,
    "stage": _STRINGS,
    "cmds": _STRINGS,
    "cmd": _STRINGS,
    "annotations": _STRINGS,
    "annotation": _STRINGS,
    "hasbindmounts": _BOOLPTR,
}
_GO_TYPES = {
    _STRING: "a string",
    _STRPTR: "a string",
    _STRINGS: "an array of strings",
    _INTPTR: "an integer",
    _BOOLPTR: "a boolean",
    _STRMAP: "an object of strings",
}


def _go_kind(value: object) -> str:
    """Name a decoded JSON value's type as a message does (``json_kind``; this decoder's objects are
    ``_Pairs`` lists and its fractions ``_Fraction`` strings)."""
    if isinstance(value, _Pairs):
        return "an object"
    if isinstance(value, _Fraction):
        return "a number"
    return json_kind(value)


def _go_field(key: str, fields: _Fields) -> str | None:
    """Return the struct field a JSON key sets: exact name first, else Go's case-insensitive match."""
    if key in fields:
        return key
    folded = key.replace("\u212a", "k").replace("\u017f", "s")  # Kelvin sign and long s fold to k and s
    if not folded.isascii():
        return None
    for name in fields:
        if folded.lower() == name.lower():
            return name
    return None


class _Decoder:
    """Decode JSON values into Go-shaped dicts, collecting type errors and surprises with their paths."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def error(self, path: str, message: str) -> None:
        self.findings.append(Finding(path, message, "error"))

    def warn(self, path: str, message: str) -> None:
        self.findings.append(Finding(path, message, "warning"))

    def struct(self, value: object, fields: _Fields, path: str, into: dict[str, Any], *, notes: bool) -> None:
        """Decode an object into ``into`` (merging, as Go does); ``null`` changes nothing."""
        if value is None:
            return
        if not isinstance(value, _Pairs):
            self.error(path, f"must be an object, got {_go_kind(value)}")
            return
        seen: dict[str, str] = {}
        for key, item in value:
            name = _go_field(key, fields)
            where = _join(path, key)
            if name is None:
                if notes:
                    self.warn(where, "unknown property: podman ignores it")
                continue
            if notes and name != key:
                self.warn(where, f"podman reads this as {name!r} (JSON keys match case-insensitively)")
            if notes and name in seen:
                self.warn(where, f"repeats {seen[name]!r}: the later value wins")
            seen[name] = key
            kind = fields[name]
            if isinstance(kind, dict):
                self.struct(item, kind, where, into.setdefault(name, {}), notes=notes)
            else:
                self.scalar(item, kind, where, into, name)

    def scalar(self, item: object, kind: str, where: str, into: dict[str, Any], name: str) -> None:
        """Decode one non-struct field into ``into[name]``."""
        if item is None:
            if kind in (_STRPTR, _STRINGS, _INTPTR, _BOOLPTR, _STRMAP):
                into.pop(name, None)  # a nil pointer, slice or map: unset
            return
        if kind in (_STRING, _STRPTR):
            if isinstance(item, str) and not isinstance(item, _Fraction):
                into[name] = _go_string(item)
                return
        elif kind == _BOOLPTR:
            if isinstance(item, bool):
                into[name] = item
                return
        elif kind == _INTPTR:
            if isinstance(item, int) and not isinstance(item, bool):
                if -_INT64 <= item < _INT64:
                    into[name] = item
                else:
                    self.error(where, "must be a 64-bit integer")
                return
        elif kind == _STRINGS:
            if isinstance(item, list) and not isinstance(item, _Pairs):
                into[name] = [
                    self.element(element, f"{where}[{index}]") for index, element in enumerate(item)
                ]
                return
        elif kind == _STRMAP and isinstance(item, _Pairs):
            mapping: dict[str, str] = into.setdefault(name, {})
            for key, element in item:
                mapping[_go_string(key)] = self.element(element, _join(where, key))
            return
        self.error(where, f"must be {_GO_TYPES[kind]}, got {_go_kind(item)}")

    def element(self, item: object, where: str) -> str:
        """Decode a string element of an array or map (``null`` is Go's empty string)."""
        if item is None:
            return ""
        if isinstance(item, str) and not isinstance(item, _Fraction):
            return _go_string(item)
        self.error(where, f"must be a string, got {_go_kind(item)}")
        return ""


def _go_string(text: str) -> str:
    """Replace lone surrogates (from ``\\ud800`` escapes) with U+FFFD, as Go's decoder does."""
    if text.isascii():
        return text
    return "".join("\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else char for char in text)


def _join(path: str, key: str) -> str:
    """Append an object key to a JSON path."""
    if key.isidentifier() and key.isascii():
        return f"{path}.{key}"
    return f"{path}[{_quote(key)}]"


def _quote(text: str) -> str:
    """Quote file text for a message: JSON escapes (no control character survives), bounded length."""
    if len(text) > _QUOTE_LIMIT:
        return json.dumps(text[:_QUOTE_LIMIT]) + "..."
    return json.dumps(text)


class _NotJSONError(ValueError):
    """A value Python's json reads but JSON (and Go) does not have."""


def _reject_constant(name: str) -> object:
    """Go has no NaN or Infinity in JSON."""
    raise _NotJSONError(f"{name} is not JSON")


def _parse_json(data: bytes) -> object:
    """Parse JSON as Go does: keys kept in order with repeats, non-integral numbers marked, no NaN."""
    text = data.decode("utf-8", errors="replace")  # Go replaces invalid UTF-8 with U+FFFD
    return json.loads(
        text,
        object_pairs_hook=_Pairs,
        parse_float=_Fraction,
        parse_constant=_reject_constant,
    )


# --- regular expressions, as Go's regexp.Compile sees them ---------------------------------------------


def regexp_error(pattern: str) -> str | None:
    """Return why Go's ``regexp.Compile`` refuses ``pattern`` (RE2 syntax), or None if it compiles."""
    import re2

    go_only = _go_only_error(pattern)
    if go_only is not None:
        return go_only
    options = re2.Options()
    options.log_errors = False
    try:
        re2.compile(pattern, options=options)
    except re2.error as err:
        reason = err.args[0] if err.args else "invalid"
        return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    return None


def _go_only_error(pattern: str) -> str | None:
    """Find what Go 1.19 refuses though the C++ RE2 accepts it: ``\\C``, ``(?<name>``, deep nesting.

    Go limits the height of the parsed expression to 1000; a capturing group is one level, so 1000 nested
    capturing groups (with the literal inside) exceed it. Non-capturing groups make no level.
    """
    index, in_class, length = 0, False, len(pattern)
    groups: list[bool] = []  # open groups: capturing or not
    captures = 0
    while index < length:
        char = pattern[index]
        if char == "\\" and index + 1 < length:
            following = pattern[index + 1]
            if following == "Q":
                end = pattern.find("\\E", index + 2)
                index = length if end < 0 else end + 2
                continue
            if following == "C":
                return "invalid escape sequence: \\C"
            index += 2
            continue
        if in_class:
            if pattern.startswith("[:", index):
                end = pattern.find(":]", index + 2)
                if end > 0:
                    index = end + 2
                    continue
            if char == "]":
                in_class = False
            index += 1
            continue
        if char == "[":
            in_class = True
            index += 1
            if pattern.startswith("^", index):
                index += 1
            if pattern.startswith("]", index):
                index += 1  # a leading ] is a literal
            continue
        if pattern.startswith("(?<", index) and not pattern.startswith(("(?<=", "(?<!"), index):
            return "invalid or unsupported Perl syntax: (?<"
        if char == "(":
            capturing = not pattern.startswith("(?", index) or pattern.startswith("(?P<", index)
            groups.append(capturing)
            captures += capturing
            if captures >= MAX_GO_NESTING:
                return "expression nests too deeply"
        elif char == ")" and groups:
            captures -= groups.pop()
        index += 1
    return None


# --- the readers and the validation ---------------------------------------------------------------------


def check_hooks_file(path: str) -> HooksReport:
    """Read a hooks file (at most 16 MiB) and judge it; a file that cannot be read is one error."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_HOOKS_FILE_BYTES + 1)
    except OSError as err:
        return HooksReport(None, [Finding("$", f"cannot read: {os_reason(err)}", "error")])
    if len(data) > MAX_HOOKS_FILE_BYTES:
        return HooksReport(None, [Finding("$", f"larger than {MAX_HOOKS_FILE_BYTES} bytes", "error")])
    report = check_hooks_json(data)
    if path.endswith(".json"):
        return report
    ignored = Finding("$", "podman reads only files whose name ends in .json: it ignores this one", "warning")
    renamed = [Finding(f.path, f"once renamed to .json: {f.message}", "warning") for f in report.findings]
    return HooksReport(report.version, [ignored, *renamed])


def check_hooks_json(data: bytes) -> HooksReport:
    """Judge a hooks file's bytes as podman 4.3.1 does; stat() the executable from the current directory."""
    try:
        document = _parse_json(data)
    except _NotJSONError as err:
        return HooksReport(None, [Finding("$", f"invalid JSON: {err}", "error")])
    except ValueError as err:
        return HooksReport(None, [Finding("$", f"invalid JSON: {decode_error_reason(err)}", "error")])
    except RecursionError:
        return HooksReport(None, [Finding("$", "invalid JSON: nested too deeply", "error")])
    probe = _Decoder()
    head: dict[str, Any] = {}
    probe.struct(document, _VERSION, "$", head, notes=False)
    if probe.findings:
        return HooksReport(None, probe.findings)
    version = head.get("version", "")
    if version == CURRENT:
        return HooksReport(CURRENT, _check_current(document))
    if version in (LEGACY, ""):
        return HooksReport(LEGACY, _check_legacy(document))
    return HooksReport(
        None, [Finding("$.version", f'unrecognized hook version {_quote(version)}: must be "1.0.0"', "error")]
    )


def _check_current(document: object) -> list[Finding]:
    """Decode and validate a 1.0.0 file. podman refuses the file at its first problem; every problem is
    listed: what failed to decode is left out, and the rest is validated as podman would once it decodes."""
    decoder = _Decoder()
    hook: dict[str, Any] = {}
    decoder.struct(document, _V1, "$", hook, notes=True)
    entry: dict[str, Any] = hook.get("hook", {})
    when: dict[str, Any] = hook.get("when", {})
    patterns: list[tuple[str, str, str]] = []
    for key, value in when.get("annotations", {}).items():
        where = _join("$.when.annotations", key)
        patterns.append((where, key, "annotation key"))
        patterns.append((where, value, "annotation value"))
    patterns += [
        (f"$.when.commands[{i}]", command, "command") for i, command in enumerate(when.get("commands", []))
    ]
    stages = hook.get("stages")
    if stages is None and isinstance(document, dict) and "stages" in document:
        stages = []  # present but not decoded (its error is listed): not also "missing"
    findings = decoder.findings + _validate(entry, "$.hook.path", patterns, stages)
    if not any(finding.severity == "error" for finding in findings):
        findings += _never_runs_current(when, stages)
    return findings


def _check_legacy(document: object) -> list[Finding]:
    """Decode, convert and validate a legacy 0.1.0 file as podman's 0.1.0 reader does."""
    decoder = _Decoder()
    raw: dict[str, Any] = {}
    decoder.struct(document, _V0, "$", raw, notes=True)
    findings = [
        Finding(
            "$",
            "legacy hook format 0.1.0: podman and CRI-O still read it; version 1.0.0 replaces it",
            "warning",
        )
    ]
    findings += decoder.findings
    if any(finding.severity == "error" for finding in findings):
        return findings
    problems: list[Finding] = []
    if "hook" not in raw:
        problems.append(Finding("$.hook", "missing required property: hook", "error"))
    for plural, singular in (("stages", "stage"), ("cmds", "cmd"), ("annotations", "annotation")):
        if plural in raw and singular in raw:
            problems.append(Finding("$", f"cannot set both {singular!r} and {plural!r}", "error"))
    stages = raw.get("stages", raw.get("stage"))
    if stages is None:
        problems.append(Finding("$.stages", "missing required property: stages", "error"))
    if problems:
        return findings + problems
    commands = raw.get("cmds", raw.get("cmd"))
    annotations = raw.get("annotations", raw.get("annotation"))
    patterns = [(f"$.cmds[{i}]", command, "command") for i, command in enumerate(commands or [])]
    if annotations is not None:
        patterns.append(
            ("$.annotations", "|".join(annotations), "annotation value (the entries joined by |)")
        )
    findings += _validate({"path": raw["hook"]}, "$.hook", patterns, stages)
    if not any(finding.severity == "error" for finding in findings):
        if commands is None and annotations is None and not raw.get("hasbindmounts"):
            findings.append(
                Finding("$", "no cmds, annotations or hasbindmounts: the hook never runs", "warning")
            )
        if stages == []:
            findings.append(Finding("$.stages", "no stage: the hook never runs", "warning"))
    return findings


def _validate(
    entry: dict[str, Any], path_at: str, patterns: list[tuple[str, str, str]], stages: list[str] | None
) -> list[Finding]:
    """containers/common's ``Hook.Validate``: the executable, the regular expressions, the stages.

    Podman stops at a missing executable and skips the hook silently; what would refuse the file once the
    executable exists is then reported as a warning saying so.
    """
    hook_path: str = entry.get("path", "")
    if hook_path:
        findings = _executable(hook_path, path_at, entry)
    else:
        findings = [Finding(path_at, "missing required property: hook.path", "error")]
    missing = any(finding.message.startswith("does not exist") for finding in findings)
    later: list[Finding] = []
    for where, pattern, what in patterns:
        reason = regexp_error(pattern)
        if reason is not None:
            later.append(
                Finding(where, f"invalid {what} {_quote(pattern)}: {reason} (Go RE2 syntax)", "error")
            )
    if stages is None:
        later.append(Finding("$.stages", "missing required property: stages", "error"))
    else:
        valid = (*OCI_STAGES, *PODMAN_EXTENSION_STAGES)
        for index, stage in enumerate(stages):
            if stage not in valid:
                later.append(
                    Finding(
                        f"$.stages[{index}]",
                        f"unknown stage {_quote(stage)}: must be one of " + ", ".join(sorted(set(valid))),
                        "error",
                    )
                )
    if missing:
        later = [
            Finding(f.path, f"once {hook_path} exists podman refuses this file: {f.message}", "warning")
            for f in later
        ]
    return findings + later


def _executable(hook_path: str, path_at: str, entry: dict[str, Any]) -> list[Finding]:
    """stat() the executable as podman does; then what runc needs to run it (executable, a timeout > 0)."""
    findings: list[Finding] = []
    try:
        info = os.stat(hook_path)
    except FileNotFoundError:
        return [
            Finding(
                path_at, f"does not exist: {_quote(hook_path)} (podman skips this hook silently)", "warning"
            )
        ]
    except (OSError, ValueError) as err:
        reason = os_reason(err) if isinstance(err, OSError) else "invalid argument"
        return [Finding(path_at, f"stat {_quote(hook_path)}: {reason}", "error")]
    if not hook_path.startswith("/"):
        findings.append(
            Finding(
                path_at,
                f"{_quote(hook_path)} is relative: podman finds it from its own working directory, runc "
                "does not, and every container it applies to fails to start; write an absolute path",
                "error",
            )
        )
    if not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111:
        findings.append(
            Finding(
                path_at,
                f"{_quote(hook_path)} is not an executable file: every container it applies to "
                "fails to start",
                "error",
            )
        )
    timeout = entry.get("timeout")
    if timeout is not None and not 0 < timeout <= MAX_TIMEOUT:
        findings.append(
            Finding(
                "$.hook.timeout",
                f"must be between 1 and {MAX_TIMEOUT} seconds: runc times the hook out "
                "at once and every container it applies to fails to start",
                "error",
            )
        )
    return findings


def _never_runs_current(when: dict[str, Any], stages: list[str] | None) -> list[Finding]:
    """Warn about a 1.0.0 hook that podman loads but can never run (``when`` conditions all must hold)."""
    findings: list[Finding] = []
    conditions = (
        "always" in when,
        "hasBindMounts" in when,
        bool(when.get("annotations")),
        bool(when.get("commands")),
    )
    if not any(conditions):
        findings.append(
            Finding(
                "$.when",
                "no condition (always, annotations, commands, hasBindMounts): the hook never runs",
                "warning",
            )
        )
    if when.get("always") is False:
        findings.append(Finding("$.when.always", "false: the hook never runs (omit it instead)", "warning"))
    if when.get("hasBindMounts") is False:
        findings.append(
            Finding(
                "$.when.hasBindMounts",
                "false: the hook never runs (false does not mean 'without bind mounts'; omit it instead)",
                "warning",
            )
        )
    if stages == []:
        findings.append(Finding("$.stages", "no stage: the hook never runs", "warning"))
    return findings
