"""The GPU request as a whole: upstream's TestGetNvidiaConfig table and the MIG rules."""

from __future__ import annotations

import re

import pytest
from record_helpers import fields

from hook.pipeline.config import ALL_CAPABILITIES, parse_config
from hook.pipeline.request import GpuRequest, resolve_request
from hook.util.errors import RequestError

S = list(ALL_CAPABILITIES)
D = ["compute", "utility"]
LEGACY = {"CUDA_VERSION": "9.0"}
MODERN = {"NVIDIA_REQUIRE_CUDA": "cuda>=9.0"}
GPUS = {"NVIDIA_VISIBLE_DEVICES": "gpu0,gpu1"}
REQS = {"NVIDIA_REQUIRE_REQ0": "req0=true", "NVIDIA_REQUIRE_REQ1": "req1=false"}
VD = {"NVIDIA_DRIVER_CAPABILITIES": "video,display"}
DISABLE = {"NVIDIA_DISABLE_REQUIRE": "true"}


def gpu(
    devices: list[str], caps: list[str], reqs: list[str], mig_config: str = "", mig_monitor: str = ""
) -> GpuRequest:
    """A GPU request with no IMEX channels."""
    return GpuRequest(
        devices=devices,
        mig_config=mig_config,
        mig_monitor=mig_monitor,
        imex_channels=[],
        capabilities=caps,
        requirements=reqs,
    )


@pytest.mark.parametrize(
    ("env", "privileged", "config", "expected"),
    [
        pytest.param({}, False, "", None, id="empty-env"),
        pytest.param({}, True, "", None, id="empty-env-privileged"),
        pytest.param(LEGACY, False, "", gpu(["all"], S, ["cuda>=9.0"]), id="legacy"),
        pytest.param(
            {**LEGACY, "NVIDIA_VISIBLE_DEVICES": "all"},
            False,
            "",
            gpu(["all"], S, ["cuda>=9.0"]),
            id="legacy-all",
        ),
        pytest.param({**LEGACY, "NVIDIA_VISIBLE_DEVICES": ""}, False, "", None, id="legacy-empty"),
        pytest.param({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "void"}, False, "", None, id="legacy-void"),
        pytest.param(
            {**LEGACY, "NVIDIA_VISIBLE_DEVICES": "none"},
            False,
            "",
            gpu([""], S, ["cuda>=9.0"]),
            id="legacy-none",
        ),
        pytest.param(
            {**LEGACY, **GPUS}, False, "", gpu(["gpu0", "gpu1"], S, ["cuda>=9.0"]), id="legacy-gpus"
        ),
        pytest.param(
            {**LEGACY, **GPUS, "NVIDIA_DRIVER_CAPABILITIES": ""},
            False,
            "",
            gpu(["gpu0", "gpu1"], D, ["cuda>=9.0"]),
            id="legacy-caps-empty",
        ),
        pytest.param(
            {**LEGACY, **GPUS, "NVIDIA_DRIVER_CAPABILITIES": "all"},
            False,
            "",
            gpu(["gpu0", "gpu1"], S, ["cuda>=9.0"]),
            id="legacy-caps-all",
        ),
        pytest.param(
            {**LEGACY, **GPUS, **VD},
            False,
            "",
            gpu(["gpu0", "gpu1"], ["display", "video"], ["cuda>=9.0"]),
            id="legacy-caps-listed",
        ),
        pytest.param(
            {**LEGACY, **GPUS, **VD, **REQS},
            False,
            "",
            gpu(["gpu0", "gpu1"], ["display", "video"], ["req0=true", "req1=false", "cuda>=9.0"]),
            id="legacy-requirements",
        ),
        pytest.param(
            {**LEGACY, **GPUS, **VD, **REQS, **DISABLE},
            False,
            "",
            gpu(["gpu0", "gpu1"], ["display", "video"], []),
            id="legacy-disable-require",
        ),
        pytest.param(MODERN, False, "", None, id="modern-no-devices"),
        pytest.param({**MODERN, **LEGACY}, False, "", None, id="modern-with-cuda-version-no-devices"),
        pytest.param(
            {**MODERN, "NVIDIA_VISIBLE_DEVICES": "all"},
            False,
            "",
            gpu(["all"], D, ["cuda>=9.0"]),
            id="modern-all",
        ),
        pytest.param({**MODERN, "NVIDIA_VISIBLE_DEVICES": ""}, False, "", None, id="modern-empty"),
        pytest.param({**MODERN, "NVIDIA_VISIBLE_DEVICES": "void"}, False, "", None, id="modern-void"),
        pytest.param(
            {**MODERN, "NVIDIA_VISIBLE_DEVICES": "none"},
            False,
            "",
            gpu([""], D, ["cuda>=9.0"]),
            id="modern-none",
        ),
        pytest.param(
            {**MODERN, **GPUS}, False, "", gpu(["gpu0", "gpu1"], D, ["cuda>=9.0"]), id="modern-gpus"
        ),
        pytest.param(
            {**MODERN, **GPUS, "NVIDIA_DRIVER_CAPABILITIES": ""},
            False,
            "",
            gpu(["gpu0", "gpu1"], D, ["cuda>=9.0"]),
            id="modern-caps-empty",
        ),
        pytest.param(
            {**MODERN, **GPUS, "NVIDIA_DRIVER_CAPABILITIES": "all"},
            False,
            "",
            gpu(["gpu0", "gpu1"], S, ["cuda>=9.0"]),
            id="modern-caps-all",
        ),
        pytest.param(
            {**MODERN, **GPUS, **VD},
            False,
            "",
            gpu(["gpu0", "gpu1"], ["display", "video"], ["cuda>=9.0"]),
            id="modern-caps-listed",
        ),
        pytest.param(
            {**MODERN, **GPUS, **VD, **REQS},
            False,
            "",
            gpu(["gpu0", "gpu1"], ["display", "video"], ["cuda>=9.0", "req0=true", "req1=false"]),
            id="modern-requirements",
        ),
        pytest.param(
            {**MODERN, **GPUS, **VD, **REQS, **DISABLE},
            False,
            "",
            gpu(["gpu0", "gpu1"], ["display", "video"], []),
            id="modern-disable-require",
        ),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": "all"}, False, "", gpu(["all"], D, []), id="all-only"),
        pytest.param(
            {**MODERN, "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_MIG_CONFIG_DEVICES": "mig0,mig1"},
            True,
            "",
            gpu(["all"], D, ["cuda>=9.0"], mig_config="mig0,mig1"),
            id="mig-config-privileged",
        ),
        pytest.param(
            {**MODERN, "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_MIG_MONITOR_DEVICES": "mig0,mig1"},
            True,
            "",
            gpu(["all"], D, ["cuda>=9.0"], mig_monitor="mig0,mig1"),
            id="mig-monitor-privileged",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all"},
            True,
            'supported-driver-capabilities = "video,display"',
            gpu(["all"], ["display", "video"], []),
            id="supported-subset-all",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", **VD},
            True,
            'supported-driver-capabilities = "video,display,compute,utility"',
            gpu(["all"], ["display", "video"], []),
            id="supported-subset-listed",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all"},
            True,
            'supported-driver-capabilities = "video,display,utility,compute"',
            gpu(["all"], D, []),
            id="supported-subset-default",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"},
            True,
            'swarm-resource = "DOCKER_SWARM_RESOURCE"',
            gpu(["GPU1", "GPU2"], D, []),
            id="swarm",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "all", "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"},
            True,
            'swarm-resource = "NOT_DOCKER_SWARM_RESOURCE,DOCKER_SWARM_RESOURCE"',
            gpu(["GPU1", "GPU2"], D, []),
            id="swarm-second-name",
        ),
        # beyond upstream's table
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_REQUIRE_X": "x"},
            False,
            "disable-require = true",
            gpu(["0"], D, []),
            id="config-disable-require",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_MIG_CONFIG_DEVICES": ""},
            False,
            "",
            gpu(["0"], D, []),
            id="mig-empty-is-fine-unprivileged",
        ),
        pytest.param(
            {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_MIG_MONITOR_DEVICES": " 1 "},
            True,
            "",
            gpu(["0"], D, [], mig_monitor=" 1 "),
            id="mig-value-untrimmed",
        ),
    ],
)
def test_get_nvidia_config(
    env: dict[str, str], privileged: bool, config: str, expected: GpuRequest | None
) -> None:
    """Upstream's TestGetNvidiaConfig: devices, MIG, capabilities and requirements of each image."""
    settings = parse_config(config, suse=False)
    result = resolve_request(env, [], settings, privileged=privileged)
    assert (result and fields(result)) == (expected and fields(expected))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"NVIDIA_MIG_CONFIG_DEVICES": "mig0,mig1"},
            "cannot set MIG_CONFIG_DEVICES in non privileged container",
            id="mig-config-unprivileged",
        ),
        pytest.param(
            {"NVIDIA_MIG_MONITOR_DEVICES": "mig0,mig1"},
            "cannot set MIG_MONITOR_DEVICES in non privileged container",
            id="mig-monitor-unprivileged",
        ),
        pytest.param(
            {"NVIDIA_MIG_CONFIG_DEVICES": "a", "NVIDIA_MIG_MONITOR_DEVICES": "b"},
            "cannot set MIG_CONFIG_DEVICES in non privileged container",
            id="config-checked-before-monitor",
        ),
        pytest.param(
            {"NVIDIA_MIG_MONITOR_DEVICES": "b", "NVIDIA_DRIVER_CAPABILITIES": "bogus"},
            "cannot set MIG_MONITOR_DEVICES in non privileged container",
            id="mig-before-capabilities",
        ),
        pytest.param(
            {"NVIDIA_DRIVER_CAPABILITIES": "bogus", "CUDA_VERSION": "junk"},
            "unsupported capabilities found in 'bogus' (allowed '')",
            id="capabilities-before-requirements",
        ),
        pytest.param(
            {"CUDA_VERSION": "junk"},
            "failed to get requirements failed to get version: invalid CUDA version junk: "
            "invalid version string: invalid semantic version",
            id="requirements",
        ),
    ],
)
def test_first_fatal_condition_wins(env: dict[str, str], message: str) -> None:
    """MIG (unprivileged), then capabilities, then requirements: the first failing rule is reported."""
    settings = parse_config(None, suse=False)
    with pytest.raises(RequestError, match=rf"^{re.escape(message)}$"):
        resolve_request({"NVIDIA_VISIBLE_DEVICES": "all", **env}, [], settings, privileged=False)


def test_no_gpu_skips_every_later_rule() -> None:
    """A container without devices is not checked for MIG, capabilities or requirements."""
    env = {
        "NVIDIA_MIG_CONFIG_DEVICES": "x",
        "NVIDIA_DRIVER_CAPABILITIES": "bogus",
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    assert resolve_request(env, [], parse_config(None, suse=False), privileged=False) is None


@pytest.mark.parametrize(
    ("config", "channels"),
    [
        pytest.param("", ["3", "4"], id="channels"),
        pytest.param("[features]\nignore-imex-channel-requests = true", [], id="ignored-by-feature"),
    ],
)
def test_imex_channels_in_request(config: str, channels: list[str]) -> None:
    """IMEX channels are part of a GPU request unless the feature gate drops them."""
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": "3,4"}
    result = resolve_request(env, [], parse_config(config, suse=False), privileged=False)
    assert result is not None
    assert result.imex_channels == channels
