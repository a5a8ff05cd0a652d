#!/bin/sh
# The DaemonSet's entrypoint (/usr/local/bin/gpu-env-hook-daemonset in the image; gpu-env-hook.yaml sets
# its environment). MODE=install: `gpu-env-hook install --root $HOST --python $PY`, then idle;
# MODE=uninstall: `gpu-env-hook uninstall --root $HOST`, then idle (THEN=exit: exit 0 instead, as the init
# container of gpu-env-hook-nri.yaml does). A TERM (pod deletion, rolling update, drain) only ends it: it
# uninstalls nothing. See packaging/kubernetes/README.md.
#
#   MODE          install | uninstall                               (default install)
#   ENGINE        auto | containerd | crio (auto: by the CRI socket) (default auto)
#   HOST          where the node's / is mounted                     (default /host)
#   PY            the interpreter the engines run: tree (a copy of this image's, with its loader and
#                 libraries, in the node's /opt/gpu-env-hook: the node needs no Python or C library of
#                 its own), or the node's Python 3.11 or later, as a node path   (default tree)
#   INSTALL_ARGS  further `install` options, e.g. "--config /etc/nvidia-container-runtime/config.toml"
#   NRI           pod: the NRI path with the plugin in this DaemonSet's container (install --nri
#                 --no-nri-unit: NRI switched on where a config keeps it off, no unit; CRI-O: no hooks
#                 JSON, whose hook would run for every container)   (default: empty, the runtime handler)
#   THEN          idle | exit: what to do once done                 (default idle)
set -eu

MODE=${MODE:-install}
ENGINE=${ENGINE:-auto}
HOST=${HOST:-/host}
PY=${PY:-tree}
INSTALL_ARGS=${INSTALL_ARGS:-}
case ${NRI:-} in
pod) INSTALL_ARGS="--nri --no-nri-unit $INSTALL_ARGS" ;;
'') ;;
*)
    echo "gpu-env-hook: NRI=$NRI: must be pod or empty" >&2
    exit 1
    ;;
esac
# The image's own gpu-env-hook (isolated: nothing from the environment changes what it imports).
HOOK="/usr/local/lib/gpu-env-hook/bin/python -I -m hook"

SLEEPER=
stop() {
    # A TERM uninstalls nothing: containers created through the handler keep running and must stay
    # stoppable, and the next pod installs again (install adopts its own files).
    trap - TERM INT
    # KILL, not TERM: a sleeper forked an instant ago may still be the shell, with its TERM trap, before it
    # execs sleep; it would swallow TERM and keep running (and holding our stdout).
    if [ -n "$SLEEPER" ]; then kill -KILL "$SLEEPER" 2>/dev/null || true; fi
    exit 0
}
trap stop TERM INT

case $MODE in
install)
    # The engines run the hook on the node, outside any container. With PY=tree install copies this
    # image's interpreter beside the package; with a node path, the node's own Python runs it: it must be
    # there, 3.11 or later, before anything is written. Asked under the node's root, as the engines run it.
    if [ "$PY" != tree ] && ! chroot "$HOST" "$PY" -I -S -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        </dev/null >/dev/null 2>&1; then
        echo "gpu-env-hook: the node has no Python 3.11 or later at $PY (the engines run the hook with it): install one there and set PY to its path, or set PY=tree" >&2
        exit 1
    fi
    # shellcheck disable=SC2086 # HOOK is a command line; INSTALL_ARGS holds several options
    # install also creates the env-file directories (/run/nvidia-env: root's, 0700) when they are missing.
    $HOOK install --engine "$ENGINE" --root "$HOST" --python "$PY" $INSTALL_ARGS
    DONE="installed; stays installed when the pod stops"
    ;;
uninstall)
    # Containers still using the runtime wrapper keep a passthrough (no Python) until they are gone; a
    # later uninstall (this mode again, or `uninstall --purge`) removes it. The node's processes are read
    # from its /proc under the host root; where they cannot be seen there (no live $HOST/proc), which
    # containers use the wrapper cannot be told, and it is kept all the same (uninstall says so).
    if ls "$HOST"/var/lib/gpu-env-hook/install-*.json >/dev/null 2>&1; then
        # shellcheck disable=SC2086 # HOOK is a command line
        $HOOK uninstall --engine "$ENGINE" --root "$HOST" --proc "$HOST/proc"
    else
        # shellcheck disable=SC2086 # HOOK is a command line
        $HOOK uninstall --purge --root "$HOST" --proc "$HOST/proc"
    fi
    DONE="uninstalled; delete the DaemonSet"
    ;;
*)
    echo "gpu-env-hook: MODE=$MODE: must be install or uninstall" >&2
    exit 1
    ;;
esac

if [ "${THEN:-idle}" = exit ]; then
    echo "gpu-env-hook: $DONE"
    exit 0
fi
sleep 2147483647 &
SLEEPER=$!
echo "gpu-env-hook: $DONE"
wait "$SLEEPER" || true
