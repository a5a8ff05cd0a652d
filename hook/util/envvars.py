"""Every environment-variable name the hook reads or writes, in one place."""

NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NVIDIA_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
NVIDIA_REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
NVIDIA_REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
NVIDIA_REQUIRE_JETPACK = "NVIDIA_REQUIRE_JETPACK"
NVIDIA_DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
NVIDIA_MIG_CONFIG_DEVICES = "NVIDIA_MIG_CONFIG_DEVICES"
NVIDIA_MIG_MONITOR_DEVICES = "NVIDIA_MIG_MONITOR_DEVICES"
NVIDIA_IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
CUDA_VERSION = "CUDA_VERSION"

# Where the hook looks for its config file (read from the hook's own environment, never the container's).
NVIDIA_CTK_CONFIG_FILE_PATH = "NVIDIA_CTK_CONFIG_FILE_PATH"
XDG_CONFIG_HOME = "XDG_CONFIG_HOME"

# Which engine started the hook (set by what ``install --engine X`` writes, never read from the container):
# the default of ``[env-file] pod-binding-engine``, i.e. whose annotations name the pod.
GPU_ENV_HOOK_ENGINE = "GPU_ENV_HOOK_ENGINE"
# The runtime shim's loop guard: the pid of the shim that exec'd the runtime, in the runtime's environment; a
# shim started with its own pid (an exec chain back to itself) or its parent's (a wrapper that forks) there
# refuses. And the probe: a shim started with this variable set only prints "gpu-env-runtime probe VALUE".
GPU_ENV_RUNTIME_PID = "GPU_ENV_RUNTIME_PID"
GPU_ENV_RUNTIME_PROBE = "GPU_ENV_RUNTIME_PROBE"

# The producer's naming key file (``hook.producer.namekey``), when not the default
# /var/lib/gpu-env-hook/alloc.key: set in the device plugin's own environment, never read by the hook.
GPU_ENV_HOOK_NAME_KEY = "GPU_ENV_HOOK_NAME_KEY"

# The NRI plugin in a DaemonSet pod (packaging/kubernetes/gpu-env-hook-nri.yaml), both set in the plugin's
# own environment: the file it creates once registered with the runtime (removed when the session ends: the
# pod's readiness), and the interpreter install wrote for the engines on the node (a node path, or "tree"),
# which the hooks it adds run with the node's copy of the package (the pod's own paths are not the node's).
GPU_ENV_HOOK_NRI_READY = "GPU_ENV_HOOK_NRI_READY"
GPU_ENV_HOOK_NRI_NODE_PYTHON = "GPU_ENV_HOOK_NRI_NODE_PYTHON"

# The env-file feature: the default name of the variable that names the file.
NVIDIA_ENV_FROM_FILE = "NVIDIA_ENV_FROM_FILE"

# Reserved keys of an env file that pin it to one pod (its UID, or its namespace and name) / container;
# never merged into the environment (the rule: ``hook.pipeline.pod``).
GPU_ENV_HOOK_POD_UID = "GPU_ENV_HOOK_POD_UID"
GPU_ENV_HOOK_POD_NAMESPACE = "GPU_ENV_HOOK_POD_NAMESPACE"
GPU_ENV_HOOK_POD_NAME = "GPU_ENV_HOOK_POD_NAME"
GPU_ENV_HOOK_CONTAINER_NAME = "GPU_ENV_HOOK_CONTAINER_NAME"
RESERVED_KEYS = (
    GPU_ENV_HOOK_POD_UID,
    GPU_ENV_HOOK_POD_NAMESPACE,
    GPU_ENV_HOOK_POD_NAME,
    GPU_ENV_HOOK_CONTAINER_NAME,
)

# ``[env-file] pod-binding-engine``: whose OCI annotations name the pod and the container. Each CRI engine
# sets its own pair itself, after (so over) anything a pod passes through; see docs/env-file.md. podman's
# and docker's annotations are whatever the user starting the container passes, so a pin means nothing
# there; "none": no engine known.
POD_BINDING_ENGINES = ("containerd", "crio", "podman", "docker", "none")
POD_BINDING_ANNOTATIONS = {
    "containerd": ("io.kubernetes.cri.sandbox-uid", "io.kubernetes.cri.container-name"),
    "crio": ("io.kubernetes.pod.uid", "io.kubernetes.container.name"),
}

# Go's unicode.IsSpace set, so that "trimmed" means what it means upstream (strings.TrimSpace).
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
