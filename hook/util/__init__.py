"""Utilities every part uses: paths, environment names, safe text, errors, JSON and TOML text, atomic
writes, opening beneath a directory.

Nothing is imported here: a module of this part costs its own import alone.
"""
