"""What a device plugin runs to hand a container its variables: env files (``envfile``) and CDI allocations
(``alloc``).

Nothing is imported here: a module of this part costs its own import alone.
"""
