"""Device and IMEX-channel selection: env tokens, swarm variables, /dev/null mounts and the privilege gate."""

from __future__ import annotations

import re

import pytest

from hook.pipeline.request import (
    env_request,
    is_legacy_image,
    mount_devices,
    mount_imex_channels,
    mount_requests,
    resolve_devices,
    resolve_imex_channels,
    resolve_tokens,
    split_tokens,
)

ROOT = "/var/run/nvidia-container-devices"
LEGACY = {"CUDA_VERSION": "9.0"}
WARNING = re.compile(r'^time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ" level=warning msg="(?P<msg>.*)"$')


def dev_null(destination: str, source: str = "/dev/null") -> tuple[str, str]:
    """A (source, destination) mount."""
    return source, destination


def warnings(err: str) -> list[str]:
    """The messages of the logrus warnings on stderr (every line must be one)."""
    found = [WARNING.match(line) for line in err.splitlines()]
    assert all(found), err
    return [match["msg"] for match in found if match]


@pytest.mark.parametrize(
    ("env", "legacy"),
    [
        pytest.param({"CUDA_VERSION": "9.0"}, True, id="cuda-version-only"),
        pytest.param({"CUDA_VERSION": "9.0", "NVIDIA_REQUIRE_CUDA": ""}, True, id="empty-require"),
        pytest.param({"CUDA_VERSION": "9.0", "NVIDIA_REQUIRE_CUDA": "cuda>=9.0"}, False, id="modern"),
        pytest.param({"CUDA_VERSION": ""}, False, id="empty-cuda-version"),
        pytest.param({}, False, id="nothing"),
    ],
)
def test_is_legacy_image(env: dict[str, str], legacy: bool) -> None:
    """Legacy means CUDA_VERSION non-empty and NVIDIA_REQUIRE_CUDA unset or empty."""
    assert is_legacy_image(env) is legacy


@pytest.mark.parametrize(
    ("value", "tokens"),
    [
        pytest.param("", [], id="empty"),
        pytest.param(" , ,", [], id="separators"),
        pytest.param("0", ["0"], id="one"),
        pytest.param(" 0 ,\t1\n", ["0", "1"], id="trimmed"),
        pytest.param("GPU-a/1/2,MIG-b", ["GPU-a/1/2", "MIG-b"], id="opaque-ids"),
    ],
)
def test_split_tokens(value: str, tokens: list[str]) -> None:
    """Values split on commas, trimmed, empties dropped."""
    assert split_tokens(value) == tokens


@pytest.mark.parametrize(
    ("tokens", "devices"),
    [
        pytest.param([], [], id="no-tokens"),
        pytest.param(["void"], [], id="void"),
        pytest.param(["0", "void"], [], id="void-anywhere"),
        pytest.param(["all", "void"], [], id="void-beats-all"),
        pytest.param(["none"], [""], id="none"),
        pytest.param(["all"], ["all"], id="all"),
        pytest.param(["0", "all"], ["all"], id="all-among-ids"),
        pytest.param(["none", "all"], [""], id="first-special-none-wins"),
        pytest.param(["all", "none"], ["all"], id="first-special-all-wins"),
        pytest.param(["0", "1"], ["0", "1"], id="ids-in-order"),
        pytest.param(["1", "0"], ["1", "0"], id="order-kept"),
        pytest.param(["0", "1", "0"], ["0", "1"], id="duplicate-keeps-first-position"),
        pytest.param(["0", "0"], ["0"], id="duplicate-pair"),
        pytest.param(["ALL", "None", "VOID"], ["ALL", "None", "VOID"], id="case-sensitive"),
        pytest.param(["nvidia.com/gpu=0"], ["nvidia.com/gpu=0"], id="cdi-name-verbatim"),
    ],
)
def test_resolve_tokens(tokens: list[str], devices: list[str]) -> None:
    """void empties, the first all/none wins, ids keep their first position (upstream leaves empty slots)."""
    assert resolve_tokens(tokens) == devices


@pytest.mark.parametrize(
    ("env", "swarm", "tokens", "sources"),
    [
        # upstream's GetDevicesFromEnvvar
        pytest.param({}, (), [], [], id="unset"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": ""}, (), [], ["NVIDIA_VISIBLE_DEVICES"], id="empty"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": "void"}, (), ["void"], ["NVIDIA_VISIBLE_DEVICES"], id="void"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": "none"}, (), ["none"], ["NVIDIA_VISIBLE_DEVICES"], id="none"),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "gpu0"}, (), ["gpu0"], ["NVIDIA_VISIBLE_DEVICES"], id="value"
        ),
        pytest.param(LEGACY, (), ["all"], ["CUDA_VERSION"], id="legacy-unset-means-all"),
        pytest.param(
            {**LEGACY, "NVIDIA_VISIBLE_DEVICES": ""}, (), [], ["NVIDIA_VISIBLE_DEVICES"], id="legacy-empty"
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"},
            ("DOCKER_SWARM_RESOURCE",),
            ["GPU1", "GPU2"],
            ["DOCKER_SWARM_RESOURCE"],
            id="swarm-overrides",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "B": "2", "A": "1"},
            ("A", "B"),
            ["1", "2"],
            ["A", "B"],
            id="two-swarm-in-config-order",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "B": "2"},
            ("A", "B"),
            ["2"],
            ["B"],
            id="only-present-swarm-counts",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all"},
            ("DOCKER_SWARM_RESOURCE",),
            ["all"],
            ["NVIDIA_VISIBLE_DEVICES"],
            id="swarm-absent-falls-back",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "A": ""}, ("A",), [], ["A"], id="swarm-set-but-empty-wins"
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "0", "DOCKER_RESOURCE_GPU": "1"},
            (),
            ["0"],
            ["NVIDIA_VISIBLE_DEVICES"],
            id="docker-resource-ignored-by-default",
        ),
        pytest.param({**LEGACY, "A": "3"}, ("A",), ["3"], ["A"], id="legacy-with-swarm"),
    ],
)
def test_env_request(
    env: dict[str, str], swarm: tuple[str, ...], tokens: list[str], sources: list[str]
) -> None:
    """Upstream's GetDevicesFromEnvvar: swarm variables that are set beat NVIDIA_VISIBLE_DEVICES."""
    assert env_request(env, swarm) == (tokens, sources)


@pytest.mark.parametrize(
    ("mounts", "requests"),
    [
        # upstream's GetVisibleDevicesFromMounts
        pytest.param([], [], id="no-mounts"),
        pytest.param([dev_null(f"{ROOT}/GPU0", source="/dev/zero")], [], id="not-dev-null"),
        pytest.param([dev_null("/other/GPU0")], [], id="other-prefix"),
        pytest.param([dev_null(ROOT)], [], id="root-itself"),
        pytest.param([dev_null(f"{ROOT}/")], [], id="root-with-slash"),
        pytest.param(
            [dev_null(f"{ROOT}/GPU0"), dev_null(f"{ROOT}/GPU1")], ["GPU0", "GPU1"], id="two-devices"
        ),
        pytest.param([dev_null(f"{ROOT}/GPU0-MIG0/0/1")], ["GPU0-MIG0/0/1"], id="name-with-slashes"),
        pytest.param([dev_null(f"{ROOT}/cdi/nvidia.com/gpu=0")], ["cdi/nvidia.com/gpu=0"], id="cdi"),
        pytest.param([dev_null(f"{ROOT}/imex/0")], ["imex/0"], id="imex"),
        # quirks of the behaviour description
        pytest.param([dev_null(f"{ROOT}/0", source="/dev//null")], ["0"], id="source-cleaned"),
        pytest.param([dev_null(f"{ROOT}/./0/")], ["0"], id="destination-cleaned"),
        pytest.param([dev_null(f"{ROOT}-extra/7")], ["-extra/7"], id="textual-prefix"),
        pytest.param([dev_null("/run/nvidia-container-devices/0")], [], id="run-not-accepted"),
        pytest.param([dev_null(f"{ROOT}/0"), dev_null(f"{ROOT}//0")], ["0"], id="duplicate-destination"),
        pytest.param(
            [dev_null(f"{ROOT}/0", source="/dev/zero"), dev_null(f"{ROOT}/0")],
            ["0"],
            id="only-dev-null-remembered",
        ),
        pytest.param([dev_null(f"{ROOT}/all")], ["all"], id="all-is-literal"),
        pytest.param([dev_null(f"{ROOT}/1"), dev_null(f"{ROOT}/0")], ["1", "0"], id="mount-order"),
    ],
)
def test_mount_requests(mounts: list[tuple[str, str]], requests: list[str]) -> None:
    """/dev/null mounts under the device-list root carry requests, cleaned, deduplicated, in order."""
    assert mount_requests(mounts) == requests


@pytest.mark.parametrize(
    ("requests", "devices", "warned"),
    [
        pytest.param(["0", "GPU-x/1"], ["0", "GPU-x/1"], [], id="plain"),
        pytest.param(["imex/0", "1"], ["1"], [], id="imex-skipped"),
        pytest.param(["cdi/nvidia.com/gpu=0"], ["nvidia.com/gpu=0"], [], id="cdi-qualified"),
        pytest.param(["cdi/nvidia.com/gpu/0"], ["nvidia.com/gpu=0"], [], id="cdi-three-parts"),
        pytest.param(["cdi/a/b/c/d"], ["a/b=c/d"], [], id="cdi-rest-in-name"),
        pytest.param(
            ["cdi/nvidia.com/gpu", "0"],
            ["0"],
            [
                "Ignoring invalid mount request for CDI device cdi/nvidia.com/gpu: invalid mount CDI device request: cdi/nvidia.com/gpu"
            ],
            id="cdi-two-parts-warned",
        ),
        pytest.param(["void", "none"], ["void", "none"], [], id="specials-are-literal"),
    ],
)
def test_mount_devices(
    requests: list[str], devices: list[str], warned: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Mount requests become devices; cdi/ ones become CDI names or are skipped with a warning."""
    assert mount_devices(requests) == devices
    assert warnings(capsys.readouterr().err) == warned


def test_mount_imex_channels() -> None:
    """imex/<x> mount requests are IMEX channels, in order."""
    assert mount_imex_channels(["0", "imex/3", "imex/1"]) == ["3", "1"]


MOUNTS = [dev_null(f"{ROOT}/GPU0"), dev_null(f"{ROOT}/GPU1")]
NVD = {"NVIDIA_VISIBLE_DEVICES": "GPU2"}
NVD_ENV_WARNING = "Ignoring devices requested by environment variable(s) in unprivileged container: "


@pytest.mark.parametrize(
    ("env", "mounts", "swarm", "privileged", "accept_envvar", "accept_mounts", "devices", "warned"),
    [
        # upstream's VisibleDevices matrix
        pytest.param(NVD, MOUNTS, (), False, False, True, ["GPU0", "GPU1"], [], id="mounts-win-unprivileged"),
        pytest.param(
            NVD,
            [],
            (),
            False,
            False,
            True,
            [],
            [NVD_ENV_WARNING + "[NVIDIA_VISIBLE_DEVICES]"],
            id="no-mounts-gated",
        ),
        pytest.param(NVD, [], (), True, False, True, ["GPU2"], [], id="privileged-env"),
        pytest.param(NVD, [], (), False, True, True, ["GPU2"], [], id="accept-unprivileged-env"),
        pytest.param(NVD, MOUNTS, (), True, False, False, ["GPU2"], [], id="mounts-not-accepted"),
        pytest.param(
            NVD,
            MOUNTS,
            (),
            False,
            False,
            False,
            [],
            [NVD_ENV_WARNING + "[NVIDIA_VISIBLE_DEVICES]"],
            id="mounts-not-accepted-gated",
        ),
        pytest.param(
            {**NVD, "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"},
            [],
            ("DOCKER_SWARM_RESOURCE",),
            True,
            False,
            False,
            ["GPU1", "GPU2"],
            [],
            id="swarm-privileged",
        ),
        pytest.param(
            {**NVD, "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"},
            [],
            ("DOCKER_SWARM_RESOURCE",),
            False,
            True,
            False,
            ["GPU1", "GPU2"],
            [],
            id="swarm-accepted",
        ),
        pytest.param(
            {**NVD, "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"},
            [],
            ("DOCKER_SWARM_RESOURCE",),
            False,
            False,
            False,
            [],
            [NVD_ENV_WARNING + "[DOCKER_SWARM_RESOURCE]"],
            id="swarm-gated",
        ),
        pytest.param(
            {**NVD, "A": "GPU1", "B": "GPU3"},
            [],
            ("A", "B"),
            False,
            False,
            False,
            [],
            [NVD_ENV_WARNING + "[A B]"],
            id="two-swarm-gated-names-space-separated",
        ),
        pytest.param(
            {**NVD, "A": "GPU1", "B": "GPU3"},
            [],
            ("A", "B"),
            True,
            False,
            False,
            ["GPU1", "GPU3"],
            [],
            id="two-swarm",
        ),
        pytest.param(
            NVD, [], ("DOCKER_SWARM_RESOURCE",), True, False, False, ["GPU2"], [], id="swarm-absent"
        ),
        # the rest of the behaviour description
        pytest.param(
            LEGACY,
            [],
            (),
            False,
            False,
            False,
            [],
            [NVD_ENV_WARNING + "[NVIDIA_VISIBLE_DEVICES]"],
            id="legacy-all-gated",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "void"}, [], (), False, False, False, [], [], id="void-no-warning"
        ),
        pytest.param({}, [], (), False, False, True, [], [], id="nothing"),
        pytest.param(
            NVD,
            [dev_null(f"{ROOT}/imex/0")],
            (),
            True,
            False,
            True,
            ["GPU2"],
            [],
            id="only-imex-mounts-fall-back-to-env",
        ),
    ],
)
def test_resolve_devices(
    env: dict[str, str],
    mounts: list[tuple[str, str]],
    swarm: tuple[str, ...],
    privileged: bool,
    accept_envvar: bool,
    accept_mounts: bool,
    devices: list[str],
    warned: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Mounts (when accepted) beat env vars; env requests pass the gate if privileged or accepted."""
    result = resolve_devices(
        env,
        mounts,
        swarm_resource=swarm,
        accept_volume_mounts=accept_mounts,
        accept_envvar_unprivileged=accept_envvar,
        privileged=privileged,
    )
    assert result == devices
    assert warnings(capsys.readouterr().err) == warned


def test_resolve_devices_trusted_sources_pass_the_gate(capsys: pytest.CaptureFixture[str]) -> None:
    """Variables from a pinned env file pass the unprivileged gate; only when all sources are trusted."""
    common = {
        "mounts": [],
        "swarm_resource": (),
        "accept_volume_mounts": False,
        "accept_envvar_unprivileged": False,
        "privileged": False,
    }
    trusted = frozenset({"NVIDIA_VISIBLE_DEVICES"})
    assert resolve_devices(NVD, trusted=trusted, **common) == ["GPU2"]  # type: ignore[arg-type]
    assert resolve_devices(NVD, trusted=frozenset({"OTHER"}), **common) == []  # type: ignore[arg-type]
    assert warnings(capsys.readouterr().err) == [NVD_ENV_WARNING + "[NVIDIA_VISIBLE_DEVICES]"]


IMEX_WARNING = "Ignoring request by environment variable(s) in unprivileged container: [NVIDIA_IMEX_CHANNELS]"


@pytest.mark.parametrize(
    ("env", "mounts", "privileged", "accept_envvar", "accept_mounts", "channels", "warned"),
    [
        # upstream's ImexChannelsFromEnvVar
        pytest.param({}, [], True, True, False, [], [], id="unset"),
        pytest.param(LEGACY, [], True, True, False, [], [], id="legacy-unset-is-all-is-none"),
        pytest.param({"NVIDIA_IMEX_CHANNELS": "3,4"}, [], True, True, False, ["3", "4"], [], id="two"),
        # the rest of the behaviour description
        pytest.param({"NVIDIA_IMEX_CHANNELS": "all"}, [], True, True, False, [], [], id="all-means-none"),
        pytest.param({"NVIDIA_IMEX_CHANNELS": "none"}, [], True, True, False, [""], [], id="none"),
        pytest.param({"NVIDIA_IMEX_CHANNELS": "0,void"}, [], True, True, False, [], [], id="void"),
        pytest.param(
            {"NVIDIA_IMEX_CHANNELS": "1,0,1"}, [], True, True, False, ["1", "0"], [], id="duplicates"
        ),
        pytest.param({"NVIDIA_IMEX_CHANNELS": "3"}, [], False, False, False, [], [IMEX_WARNING], id="gated"),
        pytest.param(
            {"NVIDIA_IMEX_CHANNELS": "3"}, [], False, True, False, ["3"], [], id="accepted-unprivileged"
        ),
        pytest.param(
            {"NVIDIA_IMEX_CHANNELS": "3"},
            [dev_null(f"{ROOT}/imex/5"), dev_null(f"{ROOT}/imex/6")],
            False,
            False,
            True,
            ["5", "6"],
            [],
            id="mounts-win",
        ),
        pytest.param(
            {"NVIDIA_IMEX_CHANNELS": "3"},
            [dev_null(f"{ROOT}/imex/5")],
            True,
            True,
            False,
            ["3"],
            [],
            id="mounts-not-accepted",
        ),
        pytest.param(
            {"NVIDIA_IMEX_CHANNELS": "3"},
            [dev_null(f"{ROOT}/0")],
            True,
            True,
            True,
            ["3"],
            [],
            id="no-imex-mounts",
        ),
    ],
)
def test_resolve_imex_channels(
    env: dict[str, str],
    mounts: list[tuple[str, str]],
    privileged: bool,
    accept_envvar: bool,
    accept_mounts: bool,
    channels: list[str],
    warned: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """IMEX channels come from imex/ mounts (when accepted) or NVIDIA_IMEX_CHANNELS behind the same gate."""
    result = resolve_imex_channels(
        env,
        mounts,
        accept_volume_mounts=accept_mounts,
        accept_envvar_unprivileged=accept_envvar,
        privileged=privileged,
    )
    assert result == channels
    assert warnings(capsys.readouterr().err) == warned


def test_resolve_devices_legacy_cuda_version_never_passes_as_trusted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A pinned file's CUDA_VERSION (a legacy image's implied "all") does not pass the unprivileged gate:
    only an explicit device list from a pinned file does."""
    devices = resolve_devices(
        {"CUDA_VERSION": "12.0"},
        [],
        swarm_resource=(),
        accept_volume_mounts=False,
        accept_envvar_unprivileged=False,
        privileged=False,
        trusted=frozenset({"CUDA_VERSION"}),
    )
    assert devices == []
    assert warnings(capsys.readouterr().err) == [NVD_ENV_WARNING + "[NVIDIA_VISIBLE_DEVICES]"]
