"""The NRI plugin (``gpu-env-hook nri``): the env file on containerd 2.x without a runtime swap.

``wire`` frames the socket (multiplexer and ttrpc), ``nri_pb2``/``ttrpc_pb2`` are generated from the
pinned ``.proto`` subsets beside them, ``decide`` answers one CreateContainer, ``plugin`` runs the session.
"""
