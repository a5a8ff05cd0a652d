"""The differential table: one row per behaviour of upstream's hook (sections 1-17 of the behaviour description).

Each case is a bundle (env, capabilities, mounts, ociVersion, root), a state on stdin, a config.toml, and what
must come out: the exit status, every stderr line (a string is exact, a compiled pattern must match the whole
line) and the exact argv the recording stand-in cli received (None: the cli was not run).

Placeholders, replaced by the runner everywhere: ``{bundle}`` (the bundle directory, also the hook's cwd),
``{tmp}`` (its parent), ``{cli}`` (the stand-in's path) and ``{ldconfig}`` (the host's normalised
``@/sbin/ldconfig``). ``differs`` says how upstream's output differs, for the rows where we chose otherwise
(docs/compatibility.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from hook.__main__ import USAGE
from hook.pipeline.nvcli import DIRECT_INVOCATION_MESSAGE

ROOT = "/var/run/nvidia-container-devices"
AUTO = "Auto-detected mode as 'legacy'"
CONFIG_ERROR = "error getting hook config: failed to load config: "
HEAD = ["{cli}", "--load-kmods", "configure", "--cuda-compat-mode=ldconfig", "--ldconfig={ldconfig}"]
TAIL = ["--pid=4242", "{bundle}/rootfs"]
DEFAULT_CAPS = ("--compute", "--utility")
ALL_CAPS = ("--compat32", "--compute", "--display", "--graphics", "--ngx", "--utility", "--video")
USAGE_LINES = USAGE.splitlines()
DEVICES_WARNING = "Ignoring devices requested by environment variable(s) in unprivileged container: "
GATE_OFF = "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
MOUNTS_ON = "accept-nvidia-visible-devices-as-volume-mounts = true\n"
SKIP_MODE = "[nvidia-container-runtime-hook]\nskip-mode-detection = true\n"


class Case(NamedTuple):
    """One row: inputs, then the expected exit status, stderr lines, cli argv and cli environment entries."""

    id: str
    env: list[str] | None = None
    privileged: bool = False
    capabilities: Any = None
    mounts: list[dict[str, Any]] | None = None
    oci_version: str | None = "1.0.2"
    root: str | None = "rootfs"
    spec: dict[str, Any] | None = None
    spec_bytes: bytes | None = None
    no_spec: bool = False
    state: dict[str, Any] | None = None
    stdin: bytes | None = None
    toml: str | None = ""
    cli: str = ""
    cli_path: str = "standin"
    config_at: str = "flag"
    cli_copies: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    command: str = "prestart"
    hook_env: dict[str, str] | None = None
    exit: int = 0
    stdout: str = ""
    stderr: Sequence[str | re.Pattern[str]] | None = None
    argv: list[str] | None = None
    cli_env: dict[str, str | None] | None = None
    differs: str = ""


def run(*middle: str, caps: tuple[str, ...] = DEFAULT_CAPS, tail: tuple[str, ...] = ()) -> list[str]:
    """The default argv with the given items between ``--ldconfig`` and ``--pid``."""
    return [*HEAD, *middle, *caps, *tail, *TAIL]


def warning(message: str) -> re.Pattern[str]:
    """A logrus text warning line carrying exactly ``message``."""
    escaped = message.replace("\\", "\\\\").replace('"', '\\"')
    stamp = r'time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"'
    return re.compile(f'{stamp} level=warning msg="{re.escape(escaped)}"')


def mount(destination: str, source: str = "/dev/null") -> dict[str, Any]:
    """A bind mount of ``source`` (default /dev/null) at ``destination``."""
    return {"source": source, "destination": destination, "type": "bind", "options": ["bind", "ro"]}


NVD0 = ["NVIDIA_VISIBLE_DEVICES=0"]
SEARCH_PATH = "{tmp}/search:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# fmt: off
CASES: list[Case] = [
    # 1. command line
    Case("version-flag", flags=("-version",), stdout="gpu-env-hook version 0.1.0\n", stderr=[],
         differs="upstream prints 'NVIDIA Container Runtime Hook version X' and a commit line"),
    Case("version-beats-command", flags=("--version=true",), command="bogus", stdout="gpu-env-hook version 0.1.0\n",
         stderr=[]),
    Case("help-flag", flags=("-h",), stderr=USAGE_LINES),
    Case("help-long-flag", flags=("--help",), stderr=USAGE_LINES),
    Case("unknown-flag", flags=("-bogus",), exit=2, stderr=["flag provided but not defined: -bogus", *USAGE_LINES]),
    Case("bad-bool-flag", flags=("-debug=yes",), exit=2,
         stderr=['invalid boolean value "yes" for -debug: parse error', *USAGE_LINES]),
    Case("no-command", command="--", exit=2, stderr=["no command given", *USAGE_LINES],
         differs="upstream prints only the usage"),
    Case("unknown-command", command="start", exit=2, stderr=["unknown command: start", *USAGE_LINES]),
    Case("poststart-noop", command="poststart", stdin=b"garbage", env=NVD0, stderr=[]),
    Case("poststop-noop", command="poststop", stdin=b"garbage", env=NVD0, stderr=[]),
    Case("poststop-ignores-missing-config", command="poststop", toml=None, flags=("-config", "{tmp}/absent.toml"),
         stdin=b"", stderr=[]),
    Case("create-runtime-is-prestart", command="createRuntime", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("config-flag-equals-form", config_at="flag-equals", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("debug-flag", flags=("-debug",), env=NVD0, stderr=[AUTO],
         argv=["{cli}", "--load-kmods", "--debug=/dev/stderr", *HEAD[2:], "--device=0", *DEFAULT_CAPS, *TAIL]),
    Case("debug-flag-false", flags=("-debug=false",), env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    # 3. configuration file
    Case("config-required-flag-missing", toml=None, flags=("-config", "{tmp}/absent.toml"), env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + "couldn't open required configuration file {tmp}/absent.toml: file does not exist"]),
    Case("config-required-env-missing", toml=None, hook_env={"NVIDIA_CTK_CONFIG_FILE_PATH": "{tmp}/absent.toml"},
         env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + "couldn't open required configuration file {tmp}/absent.toml: file does not exist"]),
    Case("config-required-missing-non-gpu", toml=None, flags=("-config", "{tmp}/absent.toml"), env=[], exit=1,
         stderr=[CONFIG_ERROR + "couldn't open required configuration file {tmp}/absent.toml: file does not exist"]),
    Case("config-from-env-path", config_at="env", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("config-from-xdg", config_at="xdg", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("config-env-beats-xdg", config_at="env", hook_env={"XDG_CONFIG_HOME": "{tmp}/nowhere"}, env=NVD0,
         stderr=[AUTO], argv=run("--device=0")),
    Case("config-optional-missing-means-defaults", toml=None, cli_path="search", cli_copies=("search",),
         hook_env={"PATH": "{tmp}/search"}, env=NVD0, stderr=[AUTO],
         argv=["{tmp}/search/nvidia-container-cli", *run("--device=0")[1:]]),
    Case("config-empty-file", toml="", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("config-unknown-keys-ignored", toml='bogus = 1\n[nvidia-container-runtime]\nruntimes = ["x"]\nlog-level = 3\n'
         "[other]\nx = true\n", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("config-bad-toml", toml="disable-require = \n", env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + "{tmp}/config.toml: invalid TOML: Invalid value (at line 1, column 19)"],
         differs="go-toml's '(L, C): ...' text"),
    Case("config-wrong-type", toml='disable-require = "yes"\n', env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + "{tmp}/config.toml: disable-require must be a boolean, got a string"],
         differs="upstream: failed to unmarshal config: (1, 1): Can't convert yes(string) to bool"),
    Case("config-wrong-type-in-cli-table", cli="load-kmods = 1", env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + "{tmp}/config.toml: nvidia-container-cli.load-kmods must be a boolean, got an integer"]),
    Case("config-invalid-supported-caps", toml='supported-driver-capabilities = "compute,bogus"\n', env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + "{tmp}/config.toml: supported-driver-capabilities must list only compat32, compute, "
                 "display, graphics, ngx, utility, video or be 'all', got unknown 'bogus'"],
         differs="upstream exits 1 with no message"),
    Case("config-ldconfig-not-host-relative", cli='ldconfig = "/sbin/ldconfig"', env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + '{tmp}/config.toml: nvidia-container-cli.ldconfig value "/sbin/ldconfig" is not '
                 "host-relative (does not start with a '@')"],
         differs="upstream adds a second line 'invalid config value'"),
    Case("config-ldconfig-empty-refused", cli='ldconfig = ""', env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + '{tmp}/config.toml: nvidia-container-cli.ldconfig value "" is not '
                 "host-relative (does not start with a '@')"]),
    Case("config-ldconfig-from-container", toml="[features]\nallow-ldconfig-from-container = true\n",
         cli='ldconfig = "/sbin/ldconfig"', env=NVD0, stderr=[AUTO],
         argv=[*HEAD[:4], "--ldconfig=/sbin/ldconfig", "--device=0", *DEFAULT_CAPS, *TAIL]),
    Case("config-ldconfig-empty-allowed", toml="[features]\nallow-ldconfig-from-container = true\n",
         cli='ldconfig = ""', env=NVD0, stderr=[AUTO], argv=[*HEAD[:4], "--device=0", *DEFAULT_CAPS, *TAIL]),
    Case("config-ldconfig-real-stripped", cli='ldconfig = "@/sbin/ldconfig.real"', env=NVD0, stderr=[AUTO],
         argv=run("--device=0")),
    Case("broken-config-non-gpu-container", toml="this is not toml", env=["PATH=/bin"], stderr=[],
         differs="upstream refuses every container when config.toml is broken"),
    Case("broken-config-spec-error-first", toml="this is not toml", no_spec=True, exit=1,
         stderr=["could not open OCI spec: open {bundle}/config.json: no such file or directory"],
         differs="upstream reports the config error first"),
    Case("broken-config-gpu-container", toml="this is not toml", env=NVD0, exit=1,
         stderr=[CONFIG_ERROR + "{tmp}/config.toml: invalid TOML: Expected '=' after a key in a key/value pair "
                 "(at line 1, column 6)"]),
    Case("broken-config-swarm-line-parsed", toml='swarm-resource = "X"\nbogus', env=[], exit=1,
         stderr=[CONFIG_ERROR + "{tmp}/config.toml: invalid TOML: Expected '=' after a key in a key/value pair "
                 "(at line 2, column 6)"]),
    # 4. OCI state
    Case("state-not-json", stdin=b"not json", env=NVD0, exit=1,
         stderr=["could not decode container state: Expecting value at line 1 column 1"],
         differs="Go's json error text"),
    Case("state-empty", stdin=b"", env=NVD0, exit=1,
         stderr=["could not decode container state: Expecting value at line 1 column 1"]),
    Case("state-pid-string", state={"pid": "42", "bundle": "{bundle}"}, env=NVD0, exit=1,
         stderr=["could not decode container state: pid must be an integer, got a string"],
         differs="upstream: json: cannot unmarshal string into Go struct field HookState.pid of type int"),
    Case("state-pid-absent", state={"bundle": "{bundle}"}, env=NVD0, stderr=[AUTO],
         argv=[*run("--device=0")[:-2], "--pid=0", "{bundle}/rootfs"]),
    Case("state-bundle-path-fallback", state={"pid": 4242, "bundlePath": "{bundle}"}, env=NVD0, stderr=[AUTO],
         argv=run("--device=0")),
    Case("state-no-bundle-uses-cwd", state={"pid": 4242}, env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("state-trailing-bytes-ignored", stdin=b'{"pid": 4242, "bundle": "{bundle}"}\n{garbage', env=NVD0,
         stderr=[AUTO], argv=run("--device=0")),
    Case("state-other-fields-ignored",
         state={"ociVersion": "9", "id": "x", "status": "creating", "pid": 4242, "bundle": "{bundle}"}, env=NVD0,
         stderr=[AUTO], argv=run("--device=0")),
    Case("state-error-non-gpu", stdin=b"[]", env=[], exit=1,
         stderr=["could not decode container state: the state must be a JSON object"]),
    # 5. config.json
    Case("spec-missing", no_spec=True, exit=1,
         stderr=["could not open OCI spec: open {bundle}/config.json: no such file or directory"]),
    Case("spec-not-json", spec_bytes=b"{oops", exit=1,
         stderr=["could not decode OCI spec: Expecting property name enclosed in double quotes at line 1 column 2"]),
    Case("spec-no-oci-version", oci_version=None, env=NVD0, exit=1, stderr=["Version is empty in OCI spec"]),
    Case("spec-no-process", spec={"ociVersion": "1.0.2", "root": {"path": "rootfs"}}, exit=1,
         stderr=["Process is empty in OCI spec"]),
    Case("spec-no-root", root=None, env=NVD0, exit=1, stderr=["Root is empty in OCI spec"]),
    Case("spec-no-env", env=None, stderr=[]),
    Case("spec-annotations-not-used", spec={"ociVersion": "1.0.2", "process": {"env": []}, "root": {"path": "rootfs"},
         "annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}}, stderr=[]),
    # 6. privilege
    Case("caps-array-on-modern-spec-non-gpu", capabilities=["CAP_SYS_ADMIN"], env=[], exit=1,
         stderr=["could not decode Process.Capabilities in OCI spec: expected an object, got an array"]),
    Case("caps-object-on-rc-spec", oci_version="1.0.0-rc2", capabilities={"bounding": []}, env=NVD0, exit=1,
         stderr=[("could not decode Process.Capabilities in OCI spec: expected an array of strings for "
                  "ociVersion 1.0.0-rc2, got an object")]),
    Case("rc-spec-flat-list-privileged", oci_version="1.0.0-rc2-dev", capabilities=["CAP_SYS_ADMIN"],
         env=[*NVD0, "NVIDIA_MIG_CONFIG_DEVICES=0"], stderr=[AUTO], argv=run("--device=0", "--mig-config=0")),
    Case("sys-admin-outside-bounding-unprivileged",
         capabilities={"effective": ["CAP_SYS_ADMIN"], "permitted": ["CAP_SYS_ADMIN"], "bounding": []},
         env=[*NVD0, "NVIDIA_MIG_CONFIG_DEVICES=0"], exit=1,
         stderr=["cannot set MIG_CONFIG_DEVICES in non privileged container"]),
    # 7. image environment
    Case("env-entry-without-equals", env=["PATH=/bin", "SECRET"], exit=1,
         stderr=["invalid environment variable: process.env[1] has no '='"],
         differs="upstream echoes the entry: invalid environment variable: SECRET"),
    Case("env-later-duplicate-wins", env=["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1"], stderr=[AUTO],
         argv=run("--device=1")),
    Case("env-names-case-sensitive", env=["nvidia_visible_devices=0"], stderr=[]),
    # 8. device selection
    Case("no-gpu-nothing-set", env=["PATH=/bin"], stderr=[]),
    Case("nvd-empty", env=["NVIDIA_VISIBLE_DEVICES="], stderr=[]),
    Case("nvd-void", env=["NVIDIA_VISIBLE_DEVICES=void"], stderr=[]),
    Case("nvd-void-among-ids", env=["NVIDIA_VISIBLE_DEVICES=0,void"], stderr=[]),
    Case("nvd-only-separators", env=["NVIDIA_VISIBLE_DEVICES= , "], stderr=[]),
    Case("nvd-none", env=["NVIDIA_VISIBLE_DEVICES=none"], stderr=[AUTO], argv=run()),
    Case("nvd-all", env=["NVIDIA_VISIBLE_DEVICES=all"], stderr=[AUTO], argv=run("--device=all")),
    Case("nvd-all-among-ids", env=["NVIDIA_VISIBLE_DEVICES=0,all"], stderr=[AUTO], argv=run("--device=all")),
    Case("nvd-first-special-none-wins", env=["NVIDIA_VISIBLE_DEVICES=none,all"], stderr=[AUTO], argv=run()),
    Case("nvd-first-special-all-wins", env=["NVIDIA_VISIBLE_DEVICES=all,none"], stderr=[AUTO],
         argv=run("--device=all")),
    Case("nvd-case-sensitive", env=["NVIDIA_VISIBLE_DEVICES=ALL"], stderr=[AUTO], argv=run("--device=ALL")),
    Case("nvd-trimmed", env=["NVIDIA_VISIBLE_DEVICES= 0 ,\t1 ,"], stderr=[AUTO], argv=run("--device=0,1")),
    Case("nvd-order-kept", env=["NVIDIA_VISIBLE_DEVICES=1,0"], stderr=[AUTO], argv=run("--device=1,0")),
    Case("nvd-duplicates", env=["NVIDIA_VISIBLE_DEVICES=0,1,0"], stderr=[AUTO], argv=run("--device=0,1"),
         differs="upstream: --device=,1,0"),
    Case("nvd-duplicate-pair", env=["NVIDIA_VISIBLE_DEVICES=0,0"], stderr=[AUTO], argv=run("--device=0"),
         differs="upstream: --device=,0"),
    Case("nvd-opaque-ids", env=["NVIDIA_VISIBLE_DEVICES=GPU-1a2b,MIG-3c/1/0,0:1,GPU-x/gi/ci"], stderr=[AUTO],
         argv=run("--device=GPU-1a2b,MIG-3c/1/0,0:1,GPU-x/gi/ci")),
    Case("legacy-image-means-all", env=["CUDA_VERSION=9.0"], stderr=[AUTO],
         argv=run("--device=all", caps=ALL_CAPS, tail=("--require=cuda>=9.0",))),
    Case("legacy-empty-require-cuda", env=["CUDA_VERSION=9.0", "NVIDIA_REQUIRE_CUDA="], stderr=[AUTO],
         argv=run("--device=all", caps=ALL_CAPS, tail=("--require=", "--require=cuda>=9.0"))),
    Case("legacy-nvd-empty", env=["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES="], stderr=[]),
    Case("legacy-nvd-void", env=["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=void"], stderr=[]),
    Case("legacy-nvd-ids", env=["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=0"], stderr=[AUTO],
         argv=run("--device=0", caps=ALL_CAPS, tail=("--require=cuda>=9.0",))),
    Case("modern-image-without-nvd", env=["CUDA_VERSION=9.0", "NVIDIA_REQUIRE_CUDA=cuda>=9.0"], stderr=[]),
    Case("cuda-version-empty-not-legacy", env=["CUDA_VERSION="], stderr=[]),
    Case("swarm-overrides-nvd", toml='swarm-resource = "DOCKER_RESOURCE_GPU"\n',
         env=[*NVD0, "DOCKER_RESOURCE_GPU=2"], stderr=[AUTO], argv=run("--device=2")),
    Case("swarm-two-in-config-order", toml='swarm-resource = "B, A"\n', env=[*NVD0, "A=1", "B=2"], stderr=[AUTO],
         argv=run("--device=2,1")),
    Case("swarm-set-but-empty-no-gpu", toml='swarm-resource = "A"\n', env=[*NVD0, "A="], stderr=[]),
    Case("swarm-absent-uses-nvd", toml='swarm-resource = "A"\n', env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("swarm-default-ignores-docker-resource", env=["DOCKER_RESOURCE_GPU=1"], stderr=[]),
    Case("swarm-only-non-gpu-by-env", toml='swarm-resource = "A"\n', env=["A=3"], stderr=[AUTO],
         argv=run("--device=3")),
    Case("gate-unprivileged-warns", toml=GATE_OFF, env=NVD0,
         stderr=[warning(DEVICES_WARNING + "[NVIDIA_VISIBLE_DEVICES]")]),
    Case("gate-privileged-passes", toml=GATE_OFF, env=NVD0, privileged=True, stderr=[AUTO], argv=run("--device=0")),
    Case("gate-swarm-names", toml=GATE_OFF + 'swarm-resource = "A,B"\n', env=[*NVD0, "A=1", "B=2"],
         stderr=[warning(DEVICES_WARNING + "[A B]")]),
    Case("gate-legacy-implicit-all", toml=GATE_OFF, env=["CUDA_VERSION=9.0"],
         stderr=[warning(DEVICES_WARNING + "[NVIDIA_VISIBLE_DEVICES]")]),
    Case("gate-void-no-warning", toml=GATE_OFF, env=["NVIDIA_VISIBLE_DEVICES=void"], stderr=[]),
    Case("mounts-accepted", toml=MOUNTS_ON + GATE_OFF, env=NVD0,
         mounts=[mount(f"{ROOT}/GPU0"), mount(f"{ROOT}/GPU1")], stderr=[AUTO], argv=run("--device=GPU0,GPU1")),
    Case("mounts-not-accepted-by-default", env=NVD0, mounts=[mount(f"{ROOT}/GPU0")], stderr=[AUTO],
         argv=run("--device=0")),
    Case("mounts-not-accepted-no-env", mounts=[mount(f"{ROOT}/GPU0")], env=[], stderr=[]),
    Case("mounts-double-slash-source", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/1", source="/dev//null")],
         stderr=[AUTO], argv=run("--device=1")),
    Case("mounts-other-source-ignored", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/1", source="/dev/zero")],
         stderr=[]),
    Case("mounts-textual-prefix", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}-extra/7")], stderr=[AUTO],
         argv=run("--device=-extra/7")),
    Case("mounts-run-prefix-not-accepted", toml=MOUNTS_ON, env=[],
         mounts=[mount("/run/nvidia-container-devices/0")], stderr=[]),
    Case("mounts-root-itself", toml=MOUNTS_ON, env=[], mounts=[mount(ROOT)], stderr=[]),
    Case("mounts-duplicate-destination", toml=MOUNTS_ON, env=[],
         mounts=[mount(f"{ROOT}/0"), mount(f"{ROOT}//0/"), mount(f"{ROOT}/1")], stderr=[AUTO],
         argv=run("--device=0,1")),
    Case("mounts-name-with-slashes", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/GPU0-MIG0/0/1")],
         stderr=[AUTO], argv=run("--device=GPU0-MIG0/0/1")),
    Case("mounts-all-is-literal", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/all"), mount(f"{ROOT}/all")],
         stderr=[AUTO], argv=run("--device=all")),
    Case("mounts-void-is-a-name", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/void")], stderr=[AUTO],
         argv=run("--device=void")),
    Case("mounts-beat-env", toml=MOUNTS_ON, env=NVD0, mounts=[mount(f"{ROOT}/5")], stderr=[AUTO],
         argv=run("--device=5")),
    Case("mounts-cdi-three-parts", toml=MOUNTS_ON + SKIP_MODE, env=[], mounts=[mount(f"{ROOT}/cdi/nvidia.com/gpu/0")],
         stderr=[], argv=run("--device=nvidia.com/gpu=0")),
    Case("mounts-cdi-qualified", toml=MOUNTS_ON + SKIP_MODE, env=[],
         mounts=[mount(f"{ROOT}/cdi/nvidia.com/gpu=all")], stderr=[], argv=run("--device=nvidia.com/gpu=all")),
    Case("mounts-cdi-auto-mode-refused", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/cdi/nvidia.com/gpu/0")],
         exit=1, stderr=[DIRECT_INVOCATION_MESSAGE], differs="upstream prints \"Auto-detected mode as 'cdi'\" first"),
    Case("mounts-cdi-invalid-warned", toml=MOUNTS_ON, env=NVD0, mounts=[mount(f"{ROOT}/cdi/nvidia.com/gpu")],
         stderr=[warning("Ignoring invalid mount request for CDI device cdi/nvidia.com/gpu: "
                         "invalid mount CDI device request: cdi/nvidia.com/gpu"), AUTO],
         argv=run("--device=0")),
    Case("mounts-imex-and-device", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/imex/3"), mount(f"{ROOT}/GPU0")],
         stderr=[AUTO], argv=run("--device=GPU0", "--imex-channel=3")),
    Case("mounts-imex-only-no-gpu", toml=MOUNTS_ON, env=[], mounts=[mount(f"{ROOT}/imex/3")], stderr=[]),
    # 9. MIG
    Case("mig-config-privileged", privileged=True, env=[*NVD0, "NVIDIA_MIG_CONFIG_DEVICES=0,1"], stderr=[AUTO],
         argv=run("--device=0", "--mig-config=0,1")),
    Case("mig-monitor-privileged", privileged=True, env=[*NVD0, "NVIDIA_MIG_MONITOR_DEVICES=all"], stderr=[AUTO],
         argv=run("--device=0", "--mig-monitor=all")),
    Case("mig-both-untrimmed", privileged=True,
         env=[*NVD0, "NVIDIA_MIG_MONITOR_DEVICES= 2 ", "NVIDIA_MIG_CONFIG_DEVICES= 1 "], stderr=[AUTO],
         argv=run("--device=0", "--mig-config= 1 ", "--mig-monitor= 2 ")),
    Case("mig-config-unprivileged", env=[*NVD0, "NVIDIA_MIG_CONFIG_DEVICES=0"], exit=1,
         stderr=["cannot set MIG_CONFIG_DEVICES in non privileged container"]),
    Case("mig-monitor-unprivileged", env=[*NVD0, "NVIDIA_MIG_MONITOR_DEVICES=0"], exit=1,
         stderr=["cannot set MIG_MONITOR_DEVICES in non privileged container"]),
    Case("mig-empty-unprivileged-fine", env=[*NVD0, "NVIDIA_MIG_CONFIG_DEVICES=", "NVIDIA_MIG_MONITOR_DEVICES="],
         stderr=[AUTO], argv=run("--device=0")),
    Case("mig-non-gpu-not-checked", env=["NVIDIA_MIG_CONFIG_DEVICES=0"], stderr=[]),
    Case("mig-before-capabilities", env=[*NVD0, "NVIDIA_MIG_CONFIG_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=bogus"],
         exit=1, stderr=["cannot set MIG_CONFIG_DEVICES in non privileged container"]),
    # 10.1 capabilities
    Case("caps-all", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=all"], stderr=[AUTO],
         argv=run("--device=0", caps=ALL_CAPS)),
    Case("caps-listed-sorted", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=video,display"], stderr=[AUTO],
         argv=run("--device=0", caps=("--display", "--video"))),
    Case("caps-empty-means-default", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES="], stderr=[AUTO],
         argv=run("--device=0")),
    Case("caps-no-items-means-none", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES= ,"], stderr=[AUTO],
         argv=run("--device=0", caps=())),
    Case("caps-all-skips-validation", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=all,foo"], stderr=[AUTO],
         argv=run("--device=0", caps=ALL_CAPS)),
    Case("caps-unknown", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=foo,compute"], exit=1,
         stderr=["unsupported capabilities found in 'compute,foo' (allowed 'compute')"]),
    Case("caps-none-not-special", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=none"], exit=1,
         stderr=["unsupported capabilities found in 'none' (allowed '')"]),
    Case("caps-case-sensitive", env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=Compute"], exit=1,
         stderr=["unsupported capabilities found in 'Compute' (allowed '')"]),
    Case("caps-unsupported-by-config", toml='supported-driver-capabilities = "compute,utility"\n',
         env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=video,compute"], exit=1,
         stderr=["unsupported capabilities found in 'compute,video' (allowed 'compute')"]),
    Case("caps-supported-bounds-default", toml='supported-driver-capabilities = "compute"\n', env=NVD0,
         stderr=[AUTO], argv=run("--device=0", caps=("--compute",))),
    Case("caps-supported-empty", toml='supported-driver-capabilities = ""\n', env=NVD0, stderr=[AUTO],
         argv=run("--device=0", caps=())),
    Case("caps-supported-all-explicit", toml='supported-driver-capabilities = "all"\n',
         env=[*NVD0, "NVIDIA_DRIVER_CAPABILITIES=all"], stderr=[AUTO], argv=run("--device=0", caps=ALL_CAPS)),
    Case("caps-legacy-unset-means-supported", toml='supported-driver-capabilities = "video,compute"\n',
         env=["CUDA_VERSION=10.1"], stderr=[AUTO],
         argv=run("--device=all", caps=("--compute", "--video"), tail=("--require=cuda>=10.1",))),
    # 10.2 requirements
    Case("require-in-env-order", env=[*NVD0, "NVIDIA_REQUIRE_CUDA=cuda>=11.0", "NVIDIA_REQUIRE_BRAND=brand=tesla"],
         stderr=[AUTO], argv=run("--device=0", tail=("--require=cuda>=11.0", "--require=brand=tesla")),
         differs="upstream's order is random (Go map order)"),
    Case("require-jetpack-excluded", env=[*NVD0, "NVIDIA_REQUIRE_JETPACK=csv-mounts=all",
         "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS=base-only"], stderr=[AUTO], argv=run("--device=0")),
    Case("require-verbatim-empty-and-bare-prefix", env=[*NVD0, "NVIDIA_REQUIRE_A= x y ", "NVIDIA_REQUIRE_B=",
         "NVIDIA_REQUIRE_=z"], stderr=[AUTO],
         argv=run("--device=0", tail=("--require= x y ", "--require=", "--require=z"))),
    Case("require-legacy-cuda-last", env=["NVIDIA_REQUIRE_BRAND=brand=tesla", "CUDA_VERSION=9.0", *NVD0],
         stderr=[AUTO], argv=run("--device=0", caps=ALL_CAPS, tail=("--require=brand=tesla", "--require=cuda>=9.0"))),
    *(
        Case(f"disable-require-{label}", env=[*NVD0, "NVIDIA_REQUIRE_X=x", "CUDA_VERSION=junk",
             f"NVIDIA_DISABLE_REQUIRE={value}"], stderr=[AUTO], argv=run("--device=0", caps=ALL_CAPS))
        for label, value in (("true", "true"), ("1", "1"), ("t", "t"), ("upper-true", "TRUE"), ("title", "True"))
    ),
    *(
        Case(f"disable-require-{label}-is-false", env=[*NVD0, "NVIDIA_REQUIRE_X=x", f"NVIDIA_DISABLE_REQUIRE={value}"],
             stderr=[AUTO], argv=run("--device=0", tail=("--require=x",)))
        for label, value in (("yes", "yes"), ("on", "on"), ("junk", "junk"), ("false", "false"), ("empty", ""))
    ),
    Case("disable-require-from-config", toml="disable-require = true\n",
         env=[*NVD0, "NVIDIA_REQUIRE_X=x", "NVIDIA_DISABLE_REQUIRE=false"], stderr=[AUTO], argv=run("--device=0")),
    *(
        Case(f"cuda-version-{label}", env=[f"CUDA_VERSION={value}"], stderr=[AUTO],
             argv=run("--device=all", caps=ALL_CAPS, tail=(f"--require=cuda>={expected}",)))
        for label, value, expected in (
            ("major-only", "9", "9.0"),
            ("v-prefix", "v11", "11.0"),
            ("three-parts", "9.0.176", "9.0"),
            ("leading-zero", "09.1", "9.1"),
            ("prerelease", "9.0-rc1", "9.0"),
            ("build", "9.0+build", "9.0"),
            ("uint32-max", "4294967295.4294967295", "4294967295.4294967295"),
        )
    ),
    *(
        Case(f"cuda-version-invalid-{label}", env=[f"CUDA_VERSION={value}"], exit=1,
             stderr=[f"failed to get requirements failed to get version: invalid CUDA version {value}: {reason}"])
        for label, value, reason in (
            ("capital-v", "V9.0", "invalid version string: invalid semantic version"),
            ("four-parts", "9.0.176.1", "invalid version string: invalid semantic version"),
            ("word", "legacy", "invalid version string: invalid semantic version"),
            ("leading-space", " 9.0", "invalid version string: invalid semantic version"),
            ("minor-overflow", "9.4294967296", "invalid minor version"),
            ("major-overflow", "4294967296", "invalid major version"),
        )
    ),
    # 11. IMEX channels
    Case("imex-channels", env=[*NVD0, "NVIDIA_IMEX_CHANNELS=0,1"], stderr=[AUTO],
         argv=run("--device=0", "--imex-channel=0,1")),
    Case("imex-after-mig", privileged=True, env=[*NVD0, "NVIDIA_IMEX_CHANNELS=2", "NVIDIA_MIG_MONITOR_DEVICES=1"],
         stderr=[AUTO], argv=run("--device=0", "--mig-monitor=1", "--imex-channel=2")),
    Case("imex-all-means-none", env=[*NVD0, "NVIDIA_IMEX_CHANNELS=all"], stderr=[AUTO], argv=run("--device=0")),
    Case("imex-none-no-flag", env=[*NVD0, "NVIDIA_IMEX_CHANNELS=none"], stderr=[AUTO], argv=run("--device=0")),
    Case("imex-void", env=[*NVD0, "NVIDIA_IMEX_CHANNELS=1,void"], stderr=[AUTO], argv=run("--device=0")),
    Case("imex-duplicates", env=[*NVD0, "NVIDIA_IMEX_CHANNELS=1,0,1"], stderr=[AUTO],
         argv=run("--device=0", "--imex-channel=1,0"), differs="upstream: --imex-channel=,0,1"),
    Case("imex-legacy-default-is-none", env=["CUDA_VERSION=9.0"], stderr=[AUTO],
         argv=run("--device=all", caps=ALL_CAPS, tail=("--require=cuda>=9.0",))),
    Case("imex-ignored-by-feature", toml="[features]\nignore-imex-channel-requests = true\n",
         env=[*NVD0, "NVIDIA_IMEX_CHANNELS=0"], stderr=[AUTO], argv=run("--device=0")),
    Case("imex-creation-disabled", toml="[features]\ndisable-imex-channel-creation = true\n",
         env=[*NVD0, "NVIDIA_IMEX_CHANNELS=0"], stderr=[AUTO],
         argv=["{cli}", "--load-kmods", "--no-create-imex-channels", *HEAD[2:], "--device=0", "--imex-channel=0",
               *DEFAULT_CAPS, *TAIL]),
    Case("imex-gated-unprivileged", toml=MOUNTS_ON + GATE_OFF, mounts=[mount(f"{ROOT}/GPU0")],
         env=["NVIDIA_IMEX_CHANNELS=1"],
         stderr=[warning("Ignoring request by environment variable(s) in unprivileged container: "
                         "[NVIDIA_IMEX_CHANNELS]"), AUTO],
         argv=run("--device=GPU0")),
    Case("imex-mounts-beat-env", toml=MOUNTS_ON, mounts=[mount(f"{ROOT}/imex/7")],
         env=[*NVD0, "NVIDIA_IMEX_CHANNELS=1"], stderr=[AUTO], argv=run("--device=0", "--imex-channel=7")),
    Case("imex-non-gpu-ignored", env=["NVIDIA_IMEX_CHANNELS=1"], stderr=[]),
    # 12. runtime mode
    Case("mode-requested-legacy", toml='[nvidia-container-runtime]\nmode = "legacy"\n', env=NVD0,
         stderr=["Using requested mode 'legacy'"], argv=run("--device=0")),
    Case("mode-configured-cdi", toml='[nvidia-container-runtime]\nmode = "cdi"\n', env=NVD0, exit=1,
         stderr=[DIRECT_INVOCATION_MESSAGE], differs="upstream prints \"Using requested mode 'cdi'\" first"),
    Case("mode-configured-csv", toml='[nvidia-container-runtime]\nmode = "csv"\n', env=NVD0, exit=1,
         stderr=[DIRECT_INVOCATION_MESSAGE]),
    Case("mode-configured-typo", toml='[nvidia-container-runtime]\nmode = "lgacy"\n', env=NVD0, exit=1,
         stderr=[DIRECT_INVOCATION_MESSAGE]),
    Case("mode-auto-all-cdi", env=["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,nvidia.com/gpu=1"], exit=1,
         stderr=[DIRECT_INVOCATION_MESSAGE]),
    Case("mode-auto-mixed-cdi", env=["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,1"], stderr=[AUTO],
         argv=run("--device=nvidia.com/gpu=0,1")),
    Case("mode-one-char-cdi-class", env=["NVIDIA_VISIBLE_DEVICES=nvidia.com/g=0"], exit=1,
         stderr=[DIRECT_INVOCATION_MESSAGE], differs="upstream panics: slice bounds out of range [1:0]"),
    Case("mode-skipped", toml=SKIP_MODE + '[nvidia-container-runtime]\nmode = "cdi"\n',
         env=["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], stderr=[], argv=run("--device=nvidia.com/gpu=0")),
    Case("mode-non-gpu-not-checked", toml='[nvidia-container-runtime]\nmode = "cdi"\n', env=[], stderr=[]),
    # 13. rootfs
    Case("rootfs-relative-to-cwd", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("rootfs-dot-dot", root="../x", env=NVD0, stderr=[AUTO], argv=[*run("--device=0")[:-1], "{tmp}/x"]),
    Case("rootfs-absolute-cleaned", root="{bundle}/./rootfs/", env=NVD0, stderr=[AUTO], argv=run("--device=0")),
    Case("rootfs-cwd-not-state-bundle", state={"pid": 4242, "bundle": "{tmp}/other"}, root="r", env=NVD0,
         stderr=[AUTO], argv=[*run("--device=0")[:-1], "{bundle}/r"]),
    # 14. locating the cli
    Case("cli-path-search", cli_path="search", cli_copies=("search",), hook_env={"PATH": "{tmp}/search"}, env=NVD0,
         stderr=[AUTO], argv=["{tmp}/search/nvidia-container-cli", *run("--device=0")[1:]],
         cli_env={"PATH": SEARCH_PATH}),
    Case("cli-path-search-under-root", cli_path="search", cli='root = "{tmp}/driver"', cli_copies=("driver/usr/bin",),
         hook_env={"PATH": "/nonexistent"}, env=NVD0, stderr=[AUTO],
         argv=["{tmp}/driver/usr/bin/nvidia-container-cli", "--root={tmp}/driver", *run("--device=0")[1:]],
         cli_env={"PATH": "{tmp}/driver/nonexistent:{tmp}/driver/usr/local/sbin:{tmp}/driver/usr/local/bin:"
                  "{tmp}/driver/usr/sbin:{tmp}/driver/usr/bin:{tmp}/driver/sbin:{tmp}/driver/bin:/nonexistent:"
                  "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}),
    Case("cli-not-found", cli_path="search", hook_env={"PATH": "{tmp}/empty"}, env=NVD0, exit=1,
         stderr=[AUTO, ('couldn\'t find binary nvidia-container-cli in PATH: exec: "nvidia-container-cli": '
                        "executable file not found in $PATH")]),
    Case("cli-configured-path-verbatim-missing", cli_path="none", cli='path = "{tmp}/absent-cli"', env=NVD0, exit=1,
         stderr=[AUTO, "exec failed: no such file or directory"]),
    Case("cli-configured-not-executable", cli_path="none", cli='path = "{bundle}/config.json"', env=NVD0, exit=1,
         stderr=[AUTO, "exec failed: permission denied"]),
    Case("cli-configured-path-keeps-hook-path", hook_env={"PATH": "/custom:/usr/bin"}, env=NVD0, stderr=[AUTO],
         argv=run("--device=0"), cli_env={"PATH": "/custom:/usr/bin"}),
    # 15. argv
    Case("argv-every-option", privileged=True,
         toml="[features]\ndisable-imex-channel-creation = true\n"
              '[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "mount"\n',
         cli='root = "/drv"\ndebug = "/var/log/cli.log"\nldcache = "/etc/ld.so.cache"\nno-pivot = true\n'
             'no-cgroups = true\nuser = "root:video"\nldconfig = "@/nonexistent/ldconfig"',
         env=["NVIDIA_VISIBLE_DEVICES=GPU-a,1", "NVIDIA_MIG_CONFIG_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=1",
              "NVIDIA_IMEX_CHANNELS=2,3", "NVIDIA_DRIVER_CAPABILITIES=video,compat32",
              "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_REQUIRE_BRAND=brand=tesla"],
         stderr=[AUTO],
         argv=["{cli}", "--root=/drv", "--load-kmods", "--no-create-imex-channels", "--no-pivot",
               "--debug=/var/log/cli.log", "--ldcache=/etc/ld.so.cache", "--user=root:video", "configure",
               "--cuda-compat-mode=mount", "--ldconfig=@/nonexistent/ldconfig", "--no-cgroups", "--device=GPU-a,1",
               "--mig-config=0", "--mig-monitor=1", "--imex-channel=2,3", "--compat32", "--video",
               "--require=cuda>=12.0", "--require=brand=tesla", *TAIL]),
    Case("argv-debug-flag-overrides-config", flags=("-debug",), cli='debug = "/var/log/cli.log"', env=NVD0,
         stderr=[AUTO],
         argv=["{cli}", "--load-kmods", "--debug=/dev/stderr", *HEAD[2:], "--device=0", *DEFAULT_CAPS, *TAIL]),
    Case("argv-no-load-kmods", cli="load-kmods = false", env=NVD0, stderr=[AUTO],
         argv=["{cli}", *HEAD[2:], "--device=0", *DEFAULT_CAPS, *TAIL]),
    *(
        Case(f"cuda-compat-{label}", toml=f'[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "{value}"\n'
             + feature, env=NVD0, stderr=[AUTO],
             argv=["{cli}", "--load-kmods", "configure", *flag, "--ldconfig={ldconfig}", "--device=0", *DEFAULT_CAPS,
                   *TAIL])
        for label, value, feature, flag in (
            ("mount", "mount", "", ("--cuda-compat-mode=mount",)),
            ("disabled", "disabled", "", ("--cuda-compat-mode=disabled",)),
            ("hook-is-disabled", "hook", "", ("--cuda-compat-mode=disabled",)),
            ("empty-is-disabled", "", "", ("--cuda-compat-mode=disabled",)),
            ("unknown-is-disabled", "bogus", "", ("--cuda-compat-mode=disabled",)),
            ("unknown-with-feature-omitted", "bogus", "[features]\nallow-cuda-compat-libs-from-container = true\n",
             ()),
        )
    ),
    # 16. exec
    Case("exec-environment-entries", cli='environment = ["FOO=1", "FOO=2", "PATH=/nope", "NOEQUALS", "BAR=x=y"]',
         hook_env={"PATH": "/custom:/usr/bin"}, env=NVD0, stderr=[AUTO], argv=run("--device=0"),
         cli_env={"FOO": "1", "BAR": "x=y", "PATH": "/custom:/usr/bin", "NOEQUALS": None},
         differs="upstream appends duplicates and entries without '='; getenv finds the first either way"),
    Case("exec-status-is-the-clis", hook_env={"STANDIN_EXIT": "3"}, env=NVD0, exit=3, stderr=[AUTO],
         argv=run("--device=0")),
    Case("exec-inherits-hook-env", hook_env={"HOOK_ONLY": "1"}, env=NVD0, stderr=[AUTO], argv=run("--device=0"),
         cli_env={"HOOK_ONLY": "1", "NVIDIA_VISIBLE_DEVICES": None}),
]
# fmt: on
