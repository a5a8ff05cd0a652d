"""gpu-env-hook: an OCI prestart hook for GPU containers that honours NVIDIA_ENV_FROM_FILE.

The parts, each a subpackage (imports go down this list, never up: ``tests/test_layers.py``):

* ``commands``: the commands for people (``resolve``, ``validate``, ``doctor``, ``env-file``, ``cdi``);
* ``install``: install and uninstall for podman, CRI-O, containerd, Docker and a Kubernetes DaemonSet;
* ``nri``: the NRI plugin for containerd 2.x, built on the stages' decisions;
* ``stages``: what an engine starts per container: ``prestart`` (the OCI hook), ``precreate`` (podman's
  stage) and ``shim`` (the runtime shim); ``producer``: what a device plugin runs (env files, CDI
  allocations);
* ``pipeline``: one container start's steps, from the state on stdin to nvidia-container-cli's argv;
* ``cdi``: the Container Device Interface engine (names, spec files, registry, edits);
* ``util``: paths, names, safe text, errors, JSON and TOML text, atomic writes.

``__main__`` is the command line (and the one place errors become exit statuses), ``launcher`` the code
every launched process starts with, ``deviceplugin`` the Python API for device plugins.
docs/architecture.md follows one container start through them.
"""

__version__ = "0.1.0"
