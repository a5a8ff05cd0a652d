"""config.toml: where it is found, every key's default and type check, and the start-up validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from record_helpers import fields

from hook.pipeline import config
from hook.pipeline.config import ALL_CAPABILITIES, parse_config, split_list
from hook.pipeline.configfile import SYSTEM_CONFIG, find_config_path, load_config_text
from hook.util.errors import ConfigError

PREFIX = re.escape("error getting hook config: failed to load config: ")


@pytest.mark.parametrize(
    ("flag", "environ", "expected"),
    [
        pytest.param("/f.toml", {}, ("/f.toml", True), id="flag-required"),
        pytest.param(
            "/f.toml",
            {"NVIDIA_CTK_CONFIG_FILE_PATH": "/e.toml", "XDG_CONFIG_HOME": "/x"},
            ("/f.toml", True),
            id="flag-beats-env",
        ),
        pytest.param("rel.toml", {}, ("rel.toml", True), id="relative-flag-kept"),
        pytest.param(None, {"NVIDIA_CTK_CONFIG_FILE_PATH": "/e.toml"}, ("/e.toml", True), id="env-required"),
        pytest.param(
            "", {"NVIDIA_CTK_CONFIG_FILE_PATH": "/e.toml"}, ("/e.toml", True), id="empty-flag-falls-to-env"
        ),
        pytest.param(
            None,
            {"NVIDIA_CTK_CONFIG_FILE_PATH": "/e.toml", "XDG_CONFIG_HOME": "/x"},
            ("/e.toml", True),
            id="env-beats-xdg",
        ),
        pytest.param(
            None,
            {"XDG_CONFIG_HOME": "/x"},
            ("/x/nvidia-container-runtime/config.toml", False),
            id="xdg-optional",
        ),
        pytest.param(
            None,
            {"NVIDIA_CTK_CONFIG_FILE_PATH": "", "XDG_CONFIG_HOME": "/x"},
            ("/x/nvidia-container-runtime/config.toml", False),
            id="empty-env-falls-to-xdg",
        ),
        pytest.param(None, {"XDG_CONFIG_HOME": ""}, (SYSTEM_CONFIG, False), id="empty-xdg-falls-to-system"),
        pytest.param(None, {}, ("/etc/nvidia-container-runtime/config.toml", False), id="system-optional"),
    ],
)
def test_find_config_path(flag: str | None, environ: dict[str, str], expected: tuple[str, bool]) -> None:
    """The flag, then NVIDIA_CTK_CONFIG_FILE_PATH (both required), then XDG or the system path (optional)."""
    assert find_config_path(flag, environ) == expected


def test_load_config_text_reads_file(tmp_path: Path) -> None:
    """An existing file's text is returned whether it is required or not."""
    path = tmp_path / "config.toml"
    path.write_text("disable-require = true\n", encoding="utf-8")
    assert load_config_text(str(path), required=True) == "disable-require = true\n"
    assert load_config_text(str(path), required=False) == "disable-require = true\n"


def test_load_config_text_missing_optional(tmp_path: Path) -> None:
    """A missing optional file means all defaults (None), with no error."""
    assert load_config_text(str(tmp_path / "absent.toml"), required=False) is None


def test_load_config_text_missing_required(tmp_path: Path) -> None:
    """A missing required file is refused, naming the path."""
    path = tmp_path / "absent.toml"
    with pytest.raises(
        ConfigError,
        match=rf"^{PREFIX}couldn't open required configuration file {re.escape(str(path))}: file does not exist$",
    ):
        load_config_text(str(path), required=True)


@pytest.mark.parametrize("required", [pytest.param(True, id="required"), pytest.param(False, id="optional")])
def test_load_config_text_unreadable(tmp_path: Path, required: bool) -> None:
    """A path that exists but cannot be read (a directory) is an error even when the file is optional."""
    with pytest.raises(
        ConfigError,
        match=rf"^{PREFIX}couldn't open configuration file {re.escape(str(tmp_path))}: Is a directory$",
    ):
        load_config_text(str(tmp_path), required=required)


def test_load_config_text_not_utf8(tmp_path: Path) -> None:
    """A file that is not UTF-8 is refused without quoting it."""
    path = tmp_path / "config.toml"
    path.write_bytes(b"mode = '\xff'\n")
    with pytest.raises(ConfigError, match=rf"^{PREFIX}{re.escape(str(path))}: the file is not valid UTF-8$"):
        load_config_text(str(path), required=True)


DEFAULTS = {
    "source": None,
    "disable_require": False,
    "swarm_resource": (),
    "accept_envvar_unprivileged": True,
    "accept_volume_mounts": False,
    "supported_capabilities": frozenset(ALL_CAPABILITIES),
    "mode": "auto",
    "runtimes": ("runc", "crun"),
    "cuda_compat_mode": "ldconfig",
    "skip_mode_detection": False,
    "allow_ldconfig_from_container": False,
    "allow_cuda_compat_libs_from_container": False,
    "disable_imex_channel_creation": False,
    "ignore_imex_channel_requests": False,
}
CLI_DEFAULTS = {
    "root": "",
    "path": "",
    "environment": (),
    "debug": "",
    "ldcache": "",
    "load_kmods": True,
    "no_pivot": False,
    "no_cgroups": False,
    "user": "",
    "ldconfig": "@/sbin/ldconfig",
}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(None, id="no-file"),
        pytest.param("", id="empty-file"),
        pytest.param("# only a comment\n", id="comment-only"),
        pytest.param(
            'unknown = 1\n[nvidia-container-cli]\nunknown = "x"\n[other]\nx = [1]\n', id="unknown-keys"
        ),
    ],
)
def test_defaults(text: str | None) -> None:
    """Absent keys keep upstream's defaults; unknown keys and tables are ignored."""
    settings = parse_config(text, suse=False)
    assert {key: getattr(settings, key) for key in DEFAULTS} == DEFAULTS
    assert fields(settings.cli) == CLI_DEFAULTS


def test_suse_default_user() -> None:
    """On a SUSE-like host the cli user defaults to root:video."""
    assert parse_config(None, suse=True).cli.user == "root:video"
    assert parse_config('[nvidia-container-cli]\nuser = ""\n', suse=True).cli.user == ""


@pytest.mark.parametrize(
    ("os_release", "suse"),
    [
        pytest.param('ID=opensuse-leap\nID_LIKE="suse opensuse"\n', True, id="opensuse"),
        pytest.param("ID=sles\nID_LIKE=suse\n", True, id="sles-unquoted"),
        pytest.param('ID=ubuntu\nID_LIKE="debian"\n', False, id="ubuntu"),
        pytest.param("ID=debian\n", False, id="no-id-like"),
        pytest.param('ID_LIKE="nosuse"\n', False, id="word-not-substring"),
        pytest.param(None, False, id="no-file"),
    ],
)
def test_host_is_suse(tmp_path: Path, os_release: str | None, suse: bool) -> None:
    """ID_LIKE containing the word suse or opensuse marks a SUSE-like host."""
    path = tmp_path / "os-release"
    if os_release is not None:
        path.write_text(os_release, encoding="utf-8")
    assert config._host_is_suse(str(path)) is suse


@pytest.mark.parametrize(
    ("text", "attribute", "value"),
    [
        pytest.param("disable-require = true", "disable_require", True, id="disable-require"),
        pytest.param('swarm-resource = "A, B,,C "', "swarm_resource", ("A", "B", "C"), id="swarm-resource"),
        pytest.param(
            "accept-nvidia-visible-devices-envvar-when-unprivileged = false",
            "accept_envvar_unprivileged",
            False,
            id="accept-envvar",
        ),
        pytest.param(
            "accept-nvidia-visible-devices-as-volume-mounts = true",
            "accept_volume_mounts",
            True,
            id="accept-mounts",
        ),
        pytest.param('[nvidia-container-runtime]\nmode = "cdi"', "mode", "cdi", id="mode"),
        pytest.param(
            '[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "mount"',
            "cuda_compat_mode",
            "mount",
            id="cuda-compat-mode",
        ),
        pytest.param(
            "[nvidia-container-runtime-hook]\nskip-mode-detection = true",
            "skip_mode_detection",
            True,
            id="skip-mode-detection",
        ),
        pytest.param(
            "[features]\nallow-ldconfig-from-container = true",
            "allow_ldconfig_from_container",
            True,
            id="feat-ldconfig",
        ),
        pytest.param(
            "[features]\nallow-cuda-compat-libs-from-container = true",
            "allow_cuda_compat_libs_from_container",
            True,
            id="feat-compat-libs",
        ),
        pytest.param(
            "[features]\ndisable-imex-channel-creation = true",
            "disable_imex_channel_creation",
            True,
            id="feat-no-imex-creation",
        ),
        pytest.param(
            "[features]\nignore-imex-channel-requests = true",
            "ignore_imex_channel_requests",
            True,
            id="feat-ignore-imex",
        ),
    ],
)
def test_top_level_keys(text: str, attribute: str, value: object) -> None:
    """Each key the hook reads reaches its setting."""
    assert getattr(parse_config(text, suse=False), attribute) == value


@pytest.mark.parametrize(
    ("line", "attribute", "value"),
    [
        pytest.param('root = "/run/nvidia/driver"', "root", "/run/nvidia/driver", id="root"),
        pytest.param('path = "/opt/cli"', "path", "/opt/cli", id="path"),
        pytest.param('environment = ["A=1", "B=2"]', "environment", ("A=1", "B=2"), id="environment"),
        pytest.param('debug = "/var/log/cli.log"', "debug", "/var/log/cli.log", id="debug"),
        pytest.param('ldcache = "/etc/ld.so.cache"', "ldcache", "/etc/ld.so.cache", id="ldcache"),
        pytest.param("load-kmods = false", "load_kmods", False, id="load-kmods"),
        pytest.param("no-pivot = true", "no_pivot", True, id="no-pivot"),
        pytest.param("no-cgroups = true", "no_cgroups", True, id="no-cgroups"),
        pytest.param('user = "root:video"', "user", "root:video", id="user"),
        pytest.param('ldconfig = "@/usr/sbin/ldconfig"', "ldconfig", "@/usr/sbin/ldconfig", id="ldconfig"),
    ],
)
def test_cli_keys(line: str, attribute: str, value: object) -> None:
    """Each ``[nvidia-container-cli]`` key reaches its setting; the others keep their defaults."""
    cli = fields(parse_config(f"[nvidia-container-cli]\n{line}\n", suse=False).cli)
    assert cli == {**CLI_DEFAULTS, attribute: value}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            'disable-require = "yes"', "disable-require must be a boolean, got a string", id="bool-string"
        ),
        pytest.param(
            "disable-require = 1", "disable-require must be a boolean, got an integer", id="bool-int"
        ),
        pytest.param(
            "swarm-resource = true", "swarm-resource must be a string, got a boolean", id="string-bool"
        ),
        pytest.param(
            'swarm-resource = ["A"]',
            "swarm-resource must be a string, got an array of strings",
            id="string-array",
        ),
        pytest.param(
            "accept-nvidia-visible-devices-envvar-when-unprivileged = 0",
            "accept-nvidia-visible-devices-envvar-when-unprivileged must be a boolean, got an integer",
            id="accept-envvar-int",
        ),
        pytest.param(
            'accept-nvidia-visible-devices-as-volume-mounts = "true"',
            "accept-nvidia-visible-devices-as-volume-mounts must be a boolean, got a string",
            id="accept-mounts-string",
        ),
        pytest.param(
            "supported-driver-capabilities = 7",
            "supported-driver-capabilities must be a string, got an integer",
            id="caps-int",
        ),
        pytest.param(
            "nvidia-container-cli = 1", "nvidia-container-cli must be a table, got an integer", id="table-int"
        ),
        pytest.param(
            "[nvidia-container-cli]\nenvironment = [1]",
            "nvidia-container-cli.environment must be an array of strings, got an array",
            id="environment-ints",
        ),
        pytest.param(
            '[nvidia-container-cli]\nenvironment = "A=1"',
            "nvidia-container-cli.environment must be an array of strings, got a string",
            id="environment-string",
        ),
        pytest.param(
            "[nvidia-container-cli]\nload-kmods = 1",
            "nvidia-container-cli.load-kmods must be a boolean, got an integer",
            id="load-kmods-int",
        ),
        pytest.param(
            "[nvidia-container-cli]\nroot = false",
            "nvidia-container-cli.root must be a string, got a boolean",
            id="root-bool",
        ),
        pytest.param(
            "[nvidia-container-cli]\nuser = 0.5",
            "nvidia-container-cli.user must be a string, got a float",
            id="user-float",
        ),
        pytest.param(
            "[nvidia-container-runtime]\nmode = 1",
            "nvidia-container-runtime.mode must be a string, got an integer",
            id="mode-int",
        ),
        pytest.param(
            "[nvidia-container-runtime]\nmodes = 1",
            "nvidia-container-runtime.modes must be a table, got an integer",
            id="modes-int",
        ),
        pytest.param(
            "[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = true",
            "nvidia-container-runtime.modes.legacy.cuda-compat-mode must be a string, got a boolean",
            id="cuda-compat-mode-bool",
        ),
        pytest.param(
            '[nvidia-container-runtime-hook]\nskip-mode-detection = "true"',
            "nvidia-container-runtime-hook.skip-mode-detection must be a boolean, got a string",
            id="skip-mode-string",
        ),
        pytest.param(
            "[features]\nignore-imex-channel-requests = 1",
            "features.ignore-imex-channel-requests must be a boolean, got an integer",
            id="feature-int",
        ),
        pytest.param(
            '[gpu-env-hook]\ntimeout = "60"',
            "gpu-env-hook.timeout must be an integer, got a string",
            id="hook-timeout-string",
        ),
        pytest.param(
            "[gpu-env-hook]\ntimeout = 0",
            "gpu-env-hook.timeout must be between 1 and 3600 (seconds)",
            id="hook-timeout-zero",
        ),
        pytest.param(
            "[gpu-env-runtime]\nruntime = []",
            "gpu-env-runtime.runtime must be a string, got an array of strings",
            id="runtime-array",
        ),
        pytest.param(
            '[gpu-env-runtime]\nruntime = "crun"',
            "gpu-env-runtime.runtime must be an absolute path",
            id="runtime-relative",
        ),
    ],
)
def test_wrong_type_is_refused(text: str, message: str) -> None:
    """A known key of the wrong type is an error that names the key, the expected and the actual type."""
    with pytest.raises(ConfigError, match=rf"^{PREFIX}/etc/c\.toml: {re.escape(message)}$"):
        parse_config(text, source="/etc/c.toml", suse=False)


def test_invalid_toml_names_position() -> None:
    """A TOML syntax error names the file and tomllib's line and column."""
    with pytest.raises(
        ConfigError,
        match=rf"^{PREFIX}/etc/c\.toml: invalid TOML: Expected '=' after a key in a key/value pair \(at line 2, column 3\)$",
    ):
        parse_config("a = 1\nb c\n", source="/etc/c.toml", suse=False)


def test_source_defaults_to_placeholder() -> None:
    """Without a source the messages say ``<config>``."""
    with pytest.raises(
        ConfigError, match=rf"^{PREFIX}<config>: disable-require must be a boolean, got a string$"
    ):
        parse_config('disable-require = "x"', suse=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(None, ALL_CAPABILITIES, id="no-file"),
        pytest.param("", ALL_CAPABILITIES, id="empty-file"),
        pytest.param('supported-driver-capabilities = "all"', ALL_CAPABILITIES, id="all"),
        pytest.param('supported-driver-capabilities = ""', (), id="empty-string"),
        pytest.param('supported-driver-capabilities = "compute,utility"', ("compute", "utility"), id="two"),
        pytest.param(
            'supported-driver-capabilities = " compute , ,utility,"', ("compute", "utility"), id="trimmed"
        ),
        pytest.param('supported-driver-capabilities = " , "', (), id="only-separators"),
    ],
)
def test_supported_capabilities(text: str | None, expected: tuple[str, ...]) -> None:
    """Upstream's TestGetHookConfig: the supported set is all seven by default, ``all``, or a checked list."""
    assert parse_config(text, suse=False).supported_capabilities == frozenset(expected)


@pytest.mark.parametrize(
    ("value", "unknown"),
    [
        pytest.param("compute,utility,not-compute", "'not-compute'", id="upstream-row"),
        pytest.param("all,compute", "'all'", id="all-inside-a-list"),
        pytest.param("ALL", "'ALL'", id="case-sensitive"),
        pytest.param("zz,compute,aa", "'aa', 'zz'", id="several-sorted"),
    ],
)
def test_supported_capabilities_invalid(value: str, unknown: str) -> None:
    """An unknown supported capability is refused with a message (upstream exits 1 silently)."""
    expected = (
        "supported-driver-capabilities must list only compat32, compute, display, graphics, ngx, utility, video "
        f"or be 'all', got unknown {unknown}"
    )
    with pytest.raises(ConfigError, match=rf"^{PREFIX}<config>: {re.escape(expected)}$"):
        parse_config(f'supported-driver-capabilities = "{value}"', suse=False)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("/sbin/ldconfig", id="absolute"),
        pytest.param("", id="empty"),
        pytest.param("ldconfig", id="bare"),
    ],
)
def test_ldconfig_must_be_host_relative(value: str) -> None:
    """Without the feature gate an ldconfig value not starting with '@' (even empty) is one error line."""
    with pytest.raises(
        ConfigError,
        match=rf"^{PREFIX}<config>: nvidia-container-cli\.ldconfig value \"{re.escape(value)}\" is not "
        r"host-relative \(does not start with a '@'\)$",
    ):
        parse_config(f'[nvidia-container-cli]\nldconfig = "{value}"\n', suse=False)


@pytest.mark.parametrize(
    "value", [pytest.param("/sbin/ldconfig", id="absolute"), pytest.param("", id="empty")]
)
def test_ldconfig_from_container_allowed(value: str) -> None:
    """``features.allow-ldconfig-from-container`` permits a container path (or none)."""
    text = f'[nvidia-container-cli]\nldconfig = "{value}"\n[features]\nallow-ldconfig-from-container = true\n'
    assert parse_config(text, suse=False).cli.ldconfig == value


@pytest.mark.parametrize(
    ("value", "items"),
    [
        pytest.param("", (), id="empty"),
        pytest.param("A", ("A",), id="one"),
        pytest.param(" A ,\tB ,, ", ("A", "B"), id="trim-and-drop-empties"),
        pytest.param("A,\u00a0B\u3000", ("A", "B"), id="go-unicode-space"),
    ],
)
def test_split_list(value: str, items: tuple[str, ...]) -> None:
    """Comma lists are split, trimmed with Go's TrimSpace set, and emptied items dropped."""
    assert split_list(value) == items


def test_launch_keys() -> None:
    """Our own tables: the hook's timeout (default 60 s) and the runtime the shim execs (default unset)."""
    assert (parse_config(None, suse=False).hook_timeout, parse_config(None, suse=False).runtime) == (60, "")
    settings = parse_config('[gpu-env-hook]\ntimeout = 5\n[gpu-env-runtime]\nruntime = "/usr/bin/crun"\n')
    assert (settings.hook_timeout, settings.runtime) == (5, "/usr/bin/crun")


def test_source_is_kept(tmp_path: Path) -> None:
    """The settings remember which file they came from."""
    path = str(tmp_path / "config.toml")
    assert parse_config("", source=path, suse=False).source == path


@pytest.mark.parametrize(
    ("text", "engine", "expected"),
    [
        pytest.param(None, None, "none", id="nothing-set"),
        pytest.param(None, "", "none", id="empty-environment"),
        pytest.param(None, "crio", "crio", id="from-the-hooks-environment"),
        pytest.param('[env-file]\npod-binding-engine = "containerd"\n', "crio", "containerd", id="key-wins"),
        pytest.param('[env-file]\npod-binding-engine = "none"\n', "crio", "none", id="key-none-wins"),
        pytest.param('[env-file]\npod-binding-engine = "podman"\n', None, "podman", id="podman"),
    ],
)
def test_pod_binding_engine(text: str | None, engine: str | None, expected: str) -> None:
    """The key, else the hook's own GPU_ENV_HOOK_ENGINE, else none."""
    assert parse_config(text, suse=False, engine=engine).env_file.pod_binding_engine == expected


@pytest.mark.parametrize(
    ("text", "engine", "message"),
    [
        pytest.param(
            '[env-file]\npod-binding-engine = "k8s"\n',
            None,
            r"^error getting hook config: failed to load config: <config>: env-file\.pod-binding-engine must be "
            r"one of containerd, crio, podman, docker, none \(or empty: GPU_ENV_HOOK_ENGINE decides\), "
            r"got 'k8s'$",
            id="unknown-key-value",
        ),
        pytest.param(
            None,
            "cri-o\n",
            r"^error getting hook config: failed to load config: the hook's environment: GPU_ENV_HOOK_ENGINE must "
            r"be one of containerd, crio, podman, docker, none, got 'cri-o\\n'$",
            id="unknown-environment-value",
        ),
    ],
)
def test_pod_binding_engine_refuses_unknown_names(text: str | None, engine: str | None, message: str) -> None:
    """An unknown engine is a configuration error, never a guess."""
    with pytest.raises(ConfigError, match=message):
        parse_config(text, suse=False, engine=engine)
