"""The commands for people: the command line (``cli``), ``validate``, ``doctor``, ``env-file`` and the ``cdi``
commands.

Nothing is imported here: a module of this part costs its own import alone.
"""
