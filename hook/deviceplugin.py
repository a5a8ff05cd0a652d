"""The Python API for device plugins: the env file's path, its writer, and the checker that runs the hook's
own checks. This is the one public import path for them::

    from hook.deviceplugin import allocate_answer, check_env_file, env_file_path, write_env_file

It sits above both sides it joins -- ``hook.producer.envfile`` and ``hook.producer.namekey`` (which
implement them) and ``hook.pipeline.envfile`` (the hook's reader, which the producer reuses) -- and no module
of the hook imports it, so the hook's hot path never loads the producer.
"""

from hook.producer.envfile import CheckStep, EnvFileReport, build_env_file, check_env_file, write_env_file
from hook.producer.namekey import AllocateAnswer, allocate_answer, env_file_name, env_file_path

__all__ = [
    "AllocateAnswer",
    "CheckStep",
    "EnvFileReport",
    "allocate_answer",
    "build_env_file",
    "check_env_file",
    "env_file_name",
    "env_file_path",
    "write_env_file",
]
