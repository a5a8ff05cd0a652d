"""The hook's stages as an engine starts them: prestart (the OCI hook), precreate (podman's stage) and the
runtime shim.

Nothing is imported here: a module of this part costs its own import alone.
"""
