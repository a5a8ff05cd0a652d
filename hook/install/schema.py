"""JSON schemas shipped in the package, and validation that reports every problem with its JSON path.

Four kinds of document: an OCI ``config.json`` (the whole runtime-spec 1.3 schema, every platform), the OCI
state, an oci-hooks.d 1.0.0 file (the strict form ``install`` writes; ``validate hooks-json`` judges files
as podman does, in ``hook.commands.hooksjson``) and config.toml. Separately from the OCI schema,
``hook_problems`` says what the hook itself needs that OCI leaves optional. The config.toml schema is
generated from ``default_settings()`` (plus the value rules ``parse_config`` applies), so it cannot drift from
what the hook reads; the shipped ``schemas/config-toml.json`` is that generated schema, kept equal by a test.
"""

import json
import re
from importlib import resources
from typing import Any, NamedTuple

from hook.pipeline.config import DEVICE_MODES, MAX_ENV_FILE_BYTES, UNKEYED_ALLOC_NAMES, default_settings
from hook.util.envvars import POD_BINDING_ENGINES
from hook.util.errors import ConfigError, HookError, SpecError, StateError
from hook.util.safetext import decode_error_reason, json_kind, os_reason

KINDS = {
    "config": "oci-config.json",
    "state": "oci-state.json",
    "hooks-json": "oci-hooks.json",
    "config-toml": "config-toml.json",
    "install-manifest": "install-manifest.json",
    "docker-daemon": "docker-daemon.json",
}
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

# Value rules parse_config applies beyond a key's type (dotted key -> extra JSON-schema keywords).
CONFIG_TOML_RULES: dict[str, dict[str, Any]] = {
    "env-file.variable": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
    "env-file.directories": {"items": {"type": "string", "pattern": "^/"}},
    "env-file.on-missing": {"enum": ["error", "ignore"]},
    "env-file.max-bytes": {"minimum": 1, "maximum": MAX_ENV_FILE_BYTES},
    "env-file.pod-binding-engine": {"enum": ["", *POD_BINDING_ENGINES]},
    "gpu-env.device-mode": {"enum": list(DEVICE_MODES)},
    "gpu-env.cdi.default-kind": {
        "pattern": "^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
    },
    "gpu-env.cdi.spec-dirs": {"items": {"type": "string", "pattern": "^/"}},
    "gpu-env.cdi.spec-cache": {"pattern": "^(/.*)?$"},
    "gpu-env.cdi.unkeyed-alloc-names": {"enum": list(UNKEYED_ALLOC_NAMES)},
}


class SchemaError(HookError):
    """A document cannot be read or decoded, so it cannot be validated."""


class Problem(NamedTuple):
    """One way a document breaks its schema: where (a JSON path such as ``$.process.env[2]``) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def build_config_toml_schema() -> dict[str, Any]:
    """Return the config.toml schema: every key of ``default_settings()`` with its type and default."""
    schema = _schema_for_table(default_settings(), "")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://gpu-env-hook/schemas/config-toml.json",
        "title": "config.toml of nvidia-container-runtime, with gpu-env-hook's [env-file] table",
        "description": (
            "Generated from hook.pipeline.config.default_settings(). "
            "Unknown keys are allowed (upstream ignores them). "
            "Cross-key rules are checked by parse_config: nvidia-container-cli.ldconfig must start with '@' "
            "unless features.allow-ldconfig-from-container; supported-driver-capabilities is 'all' or a list "
            "of known capabilities."
        ),
        **schema,
    }


def _schema_for_table(table: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Return an object schema for one TOML table of defaults."""
    properties: dict[str, Any] = {}
    for key, default in table.items():
        name = prefix + key
        if isinstance(default, dict):
            properties[key] = _schema_for_table(default, name + ".")
            continue
        if isinstance(default, bool):
            entry: dict[str, Any] = {"type": "boolean"}
        elif isinstance(default, int):
            entry = {"type": "integer"}
        elif isinstance(default, list):
            entry = {"type": "array", "items": {"type": "string"}}
        else:
            entry = {"type": "string"}
        entry.update(CONFIG_TOML_RULES.get(name, {}))
        entry["default"] = default
        properties[key] = entry
    return {"type": "object", "properties": properties}


def load_schema(kind: str) -> dict[str, Any]:
    """Return the shipped schema for a kind of document."""
    text = resources.files("hook").joinpath("schemas", KINDS[kind]).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def json_path(parts: list[str | int] | Any) -> str:
    """Render a path of keys and indices as ``$.key[0]['odd key']``."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


def validate_document(document: object, kind: str) -> list[Problem]:
    """Return every problem of ``document`` against the schema of ``kind``, in document order."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(load_schema(kind))
    problems = [
        Problem(json_path(list(error.absolute_path)), _describe(error))
        for error in validator.iter_errors(document)
    ]
    if kind == "config-toml" and not problems and isinstance(document, dict):
        problems += _config_rules(document)
    return sorted(set(problems), key=lambda problem: (problem.path, problem.message))


# Where the hook's own refusals of a config.json point, by the words of their message.
_HOOK_PATHS = (
    ("Version is empty", "$.ociVersion"),
    ("ociVersion", "$.ociVersion"),
    ("Process is empty", "$.process"),
    ("process.env", "$.process.env"),
    ("process", "$.process"),
    ("Root is empty", "$.root"),
    ("root", "$.root"),
    ("mounts", "$.mounts"),
)
_HOOK_NEEDS = {
    "$.process": " (process is optional in OCI; the hook, like nvidia-container-runtime-hook, needs it)",
    "$.root": " (root is optional in OCI; the hook, like nvidia-container-runtime-hook, needs it)",
}


def hook_problems(document: object, kind: str) -> list[Problem]:
    """Return what the hook itself cannot act on in a document the OCI schema may accept.

    config: the hook's own ``check_spec`` and ``process.env`` parsing (it needs ``process`` and ``root``,
    which OCI leaves optional, and every env entry as ``KEY=value``); state: the hook's own state reader.
    """
    try:
        if kind == "config" and isinstance(document, dict):
            from hook.pipeline.bundle import check_spec, parse_env, process_env

            check_spec(document)
            parse_env(process_env(document))
        elif kind == "state":
            from hook.pipeline.bundle import parse_state

            parse_state(json.dumps(document).encode())
    except (SpecError, StateError) as err:
        message = str(err)
        path = "$"
        for words, where in _HOOK_PATHS:
            if words in message:
                path = where
                break
        index = re.search(r"process\.env\[(\d+)\]", message)
        if index:
            path = f"$.process.env[{index.group(1)}]"
        what = "config" if kind == "config" else "state"
        reason = f'the hook cannot act on this {what}: it refuses it with "{message}"'
        return [Problem(path, reason + _HOOK_NEEDS.get(path, ""))]
    return []


def _config_rules(document: dict[str, Any]) -> list[Problem]:
    """Apply parse_config's cross-key rules to a document whose types are right."""
    from hook.pipeline.config import build_settings

    try:
        build_settings(_fill(default_settings(suse=False), document), source=None)
    except ConfigError as err:
        message = str(err).rpartition("<config>: ")[2]
        key, _, rest = message.partition(" ")
        parts = key.split(".")
        table: Any = default_settings(suse=False)
        for part in parts:
            table = table.get(part) if isinstance(table, dict) else None
        if table is None or not rest:  # the message does not start with a key: the rule is the document's
            return [Problem("$", message)]
        return [Problem(json_path(parts), rest)]
    return []


def _fill(defaults: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """Overlay a type-checked document on the defaults, keeping only known keys."""
    merged: dict[str, Any] = {}
    for key, default in defaults.items():
        value = document.get(key, default)
        merged[key] = _fill(default, value) if isinstance(default, dict) else value
    return merged


def _describe(error: Any) -> str:
    """Say what must hold, naming the value's type but never quoting a large value."""
    validator, expected, instance = error.validator, error.validator_value, error.instance
    if validator == "required":
        return "missing required property " + str(error.message).partition(" is a required property")[0]
    if validator == "type":
        return f"must be {_article(expected)}, got {json_kind(instance)}"
    if validator == "enum":
        return "must be one of " + ", ".join(json.dumps(value) for value in expected)
    if validator == "const":
        return f"must be {json.dumps(expected)}"
    if validator == "pattern":
        return f"must match {expected}"
    if validator == "minLength":
        return "must not be empty"
    if validator == "minItems":
        return f"must have at least {expected} item" + ("" if expected == 1 else "s")
    if validator == "minProperties":
        return f"must have at least {expected} propert" + ("y" if expected == 1 else "ies")
    if validator == "minimum":
        return f"must be at least {expected}"
    if validator == "maximum":
        return f"must be at most {expected}"
    if validator == "additionalProperties":
        return "unknown property " + ", ".join(repr(name) for name in sorted(_extra(error)))
    return str(error.message)


def _extra(error: Any) -> list[str]:
    """Return the properties an ``additionalProperties: false`` object does not allow."""
    allowed = set(error.schema.get("properties", {}))
    return [name for name in error.instance if name not in allowed]


def _article(expected: str | list[str]) -> str:
    """Name a JSON-schema type with its article."""
    names = {
        "object": "an object",
        "array": "an array",
        "string": "a string",
        "integer": "an integer",
        "number": "a number",
        "boolean": "a boolean",
        "null": "null",
    }
    if isinstance(expected, list):
        return " or ".join(names.get(name, name) for name in expected)
    return names.get(expected, expected)


def parse_document(data: bytes, kind: str, source: str) -> object:
    """Decode a document's bytes: TOML for config-toml, JSON for the others."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SchemaError(f"{source}: {decode_error_reason(err)}") from None
    if kind == "config-toml":
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise SchemaError(f"{source}: invalid TOML: {err}") from None
    try:
        return json.loads(text)
    except ValueError as err:
        raise SchemaError(f"{source}: invalid JSON: {decode_error_reason(err)}") from None


def load_document(path: str, kind: str) -> object:
    """Read and decode a document (a bundle directory stands for its config.json)."""
    import os

    if kind == "config" and os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as err:
        raise SchemaError(f"{path}: cannot read: {os_reason(err)}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise SchemaError(f"{path}: larger than {MAX_DOCUMENT_BYTES} bytes")
    return parse_document(data, kind, path)


def validate_file(path: str, kind: str) -> list[Problem]:
    """Validate the document at ``path`` against the schema of ``kind``."""
    return validate_document(load_document(path, kind), kind)
