"""gpu-env-hook: an OCI prestart hook for GPU containers that honours NVIDIA_ENV_FROM_FILE."""

__version__ = "0.1.0"
