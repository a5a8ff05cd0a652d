"""hook.stages.prestart.may_request_gpu: which containers can skip config.toml altogether."""

from __future__ import annotations

import pytest

from hook.stages.prestart import may_request_gpu

SWARM = 'swarm-resource = "DOCKER_RESOURCE_GPU"\n'


@pytest.mark.parametrize(
    ("env", "mounts", "config", "expected"),
    [
        pytest.param({}, [], None, False, id="plain-container"),
        pytest.param({"PATH": "/bin", "NVIDIA_DRIVER_CAPABILITIES": "all"}, [], None, False, id="caps-alone"),
        pytest.param({"NVIDIA_VISIBLE_DEVICES": ""}, [], None, True, id="visible-devices-set-even-empty"),
        pytest.param({"CUDA_VERSION": "9.0"}, [], None, True, id="legacy-image"),
        pytest.param({"CUDA_VERSION": ""}, [], None, False, id="empty-cuda-version"),
        pytest.param({"NVIDIA_ENV_FROM_FILE": "/run/nvidia-env/a.env"}, [], None, True, id="env-file"),
        pytest.param({"NVIDIA_ENV_FROM_FILE": ""}, [], None, False, id="empty-env-file-variable"),
        pytest.param(
            {}, [("/dev/null", "/var/run/nvidia-container-devices/0")], None, True, id="device-list-mount"
        ),
        pytest.param({}, [("/dev/null", "/dev/shm")], None, False, id="other-mount"),
        pytest.param({"DOCKER_RESOURCE_GPU": "1"}, [], SWARM, True, id="swarm-resource-configured"),
        pytest.param({}, [], '[env-file]\nvariable = "MY_FILE"\n', True, id="renamed-env-file-variable"),
    ],
)
def test_may_request_gpu(
    env: dict[str, str], mounts: list[tuple[str, str]], config: str | None, expected: bool
) -> None:
    """A container can be a GPU container only through these variables, mounts or settings."""
    assert may_request_gpu(env, mounts, config) is expected
