"""Where things live on a node: one place for the paths that install, uninstall and doctor agree on."""

from __future__ import annotations

# Executables the engines call: small wrappers that run this package's Python isolated (-I).
LIBEXEC_DIR = "/usr/local/libexec/gpu-env-hook"
HOOK_WRAPPER = LIBEXEC_DIR + "/gpu-env-hook"
RUNTIME_WRAPPER = LIBEXEC_DIR + "/gpu-env-runtime"
# `docker run --gpus` looks this name up on PATH; /usr/local/bin comes before /usr/bin.
NVIDIA_HOOK_ALIAS = "/usr/local/bin/nvidia-container-runtime-hook"

# oci-hooks.d directories: podman reads both by default, CRI-O the first.
OCI_HOOKS_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
HOOK_JSON_NAME = "gpu-env-hook.json"
PRECREATE_JSON_NAME = "gpu-env-hook-precreate.json"

CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_DROPIN_DIR = "/etc/containerd/conf.d"
CONTAINERD_DROPIN_NAME = "gpu-env-hook.toml"
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
CRIO_DROPIN_DIR = "/etc/crio/crio.conf.d"
CRIO_DROPIN_NAME = "99-gpu-env-hook.conf"

# What `install` wrote, per engine, so `uninstall` can take exactly that off again.
STATE_DIR = "/var/lib/gpu-env-hook"

# Inside a container: /dev/null mounts below this root request devices (upstream's volume-mount strategy).
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"

# The runtime handler name engines know the shim by.
RUNTIME_HANDLER = "gpu-env"

# A fixed PATH for everything we start: the caller's PATH is never trusted (podman may give none).
FIXED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
