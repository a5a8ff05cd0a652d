"""One container start's steps: the state on stdin, the bundle and its config.json, the settings, the devices
and requirements, the privilege checks, the env file, the hand-off to nvidia-container-cli.

Nothing is imported here: a module of this part costs its own import alone.
"""
