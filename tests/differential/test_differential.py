"""Run the real hook process on every row of the differential table and compare exit, stderr, argv and env."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import STANDIN_CLI, HookRun, MakeBundle, RunHook
from differential_cases import CASES, Case

LDCONFIG = "@/sbin/ldconfig.real" if Path("/sbin/ldconfig.real").exists() else "@/sbin/ldconfig"


class Render:
    """Replaces the table's placeholders with this run's paths."""

    def __init__(self, tmp_path: Path) -> None:
        self.values = {
            "{bundle}": str(tmp_path / "bundle"),
            "{tmp}": str(tmp_path),
            "{cli}": str(STANDIN_CLI),
            "{ldconfig}": LDCONFIG,
        }

    def __call__(self, text: str) -> str:
        """Render one string."""
        for key, value in self.values.items():
            text = text.replace(key, value)
        return text

    def data(self, value: object) -> object:
        """Render every string inside a JSON-like value."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, list):
            return [self.data(item) for item in value]
        if isinstance(value, dict):
            return {self(str(k)): self.data(v) for k, v in value.items()}
        return value


def config_text(case: Case, render: Render) -> str:
    """The config.toml of a case: its top-level text, then the cli table (pointing at the stand-in if asked)."""
    assert case.toml is not None
    lines = ["[nvidia-container-cli]"]
    if case.cli_path == "standin":
        lines.append(f'path = "{STANDIN_CLI}"')
    lines.append(case.cli)
    return render(case.toml + "\n" + "\n".join(lines) + "\n")


def write_inputs(
    case: Case, tmp_path: Path, render: Render, make_bundle: MakeBundle, record_path: Path
) -> tuple[Path, Path | None, list[str], dict[str, str]]:
    """Write the bundle(s), config and cli copies; return bundle, -config path, flags and the hook's env."""
    names = ["bundle", *(["other"] if case.state and "{tmp}/other" in json.dumps(case.state) else [])]
    for name in names:
        bundle = make_bundle(
            env=render.data(case.env),
            name=name,
            oci_version=case.oci_version,
            capabilities=case.capabilities,
            privileged=case.privileged,
            mounts=case.mounts,
            root=render(case.root) if case.root is not None else None,
            spec=render.data(case.spec) if case.spec is not None else None,
        )
    bundle = tmp_path / "bundle"
    if case.spec_bytes is not None:
        (bundle / "config.json").write_bytes(case.spec_bytes)
    if case.no_spec:
        (bundle / "config.json").unlink()
    flags = [render(flag) for flag in case.flags]
    hook_env = {"STANDIN_RECORD": str(record_path)}
    hook_env.update({key: render(value) for key, value in (case.hook_env or {}).items()})
    config: Path | None = None
    if case.toml is not None:
        where = {
            "flag": tmp_path / "config.toml",
            "flag-equals": tmp_path / "config.toml",
            "env": tmp_path / "env-config.toml",
            "xdg": tmp_path / "xdg" / "nvidia-container-runtime" / "config.toml",
        }[case.config_at]
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(config_text(case, render), encoding="utf-8")
        if case.config_at == "flag":
            config = where
        elif case.config_at == "flag-equals":
            flags.insert(0, f"--config={where}")
        elif case.config_at == "env":
            hook_env["NVIDIA_CTK_CONFIG_FILE_PATH"] = str(where)
        else:
            hook_env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    for directory in case.cli_copies:
        folder = tmp_path / directory
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "nvidia-container-cli").symlink_to(STANDIN_CLI)
    return bundle, config, flags, hook_env


def check_stderr(result: HookRun, case: Case, render: Render) -> None:
    """Every stderr line matches its expected line, exactly or by a whole-line pattern."""
    assert case.stderr is not None, "every case states its stderr"
    lines = result.stderr.splitlines()
    assert len(lines) == len(case.stderr), result.stderr
    for line, expected in zip(lines, case.stderr, strict=True):
        if isinstance(expected, re.Pattern):
            assert re.fullmatch(render(expected.pattern), line), (line, expected.pattern)
        else:
            assert line == render(expected)


def render_stdin(case: Case, render: Render) -> bytes:
    """The bytes the row gives the hook on stdin: its raw stdin, or its state (default: pid 4242, the bundle)."""
    if case.stdin is not None:
        return render(case.stdin.decode()).encode()
    state = case.state if case.state is not None else {"pid": 4242, "bundle": "{bundle}"}
    return json.dumps(render.data(state)).encode()


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
def test_differential(
    case: Case, tmp_path: Path, record_path: Path, make_bundle: MakeBundle, run_hook: RunHook
) -> None:
    """The hook's exit status, stderr lines, the cli's exact argv and env are those of the table's row."""
    render = Render(tmp_path)
    bundle, config, flags, hook_env = write_inputs(case, tmp_path, render, make_bundle, record_path)
    stdin = render_stdin(case, render)
    result = run_hook(bundle, config=config, flags=flags, command=case.command, stdin=stdin, env=hook_env)
    assert (result.returncode, result.stdout) == (case.exit, case.stdout), result.stderr
    check_stderr(result, case, render)
    if case.argv is None:
        assert result.record is None, result.record
    else:
        assert result.cli_argv == [render(item) for item in case.argv]
    for name, value in (case.cli_env or {}).items():
        assert result.record is not None
        assert result.record["env"].get(name) == (render(value) if value is not None else None), name
    assert result.spec_after == result.spec_before


def test_ids_are_unique_kebab_case() -> None:
    """Every row has its own readable kebab-case id."""
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", case_id) for case_id in ids)
