#!/usr/bin/env bash
# `make image`: build the DaemonSet's image on this machine from Debian's packages and PyPI alone (no other
# registry, no interpreter download), with podman, as root:
#
#   1. the base: mmdebstrap makes a Debian 12 (bookworm) root filesystem from Debian's mirrors (its
#      security and updates suites too) — the essential packages plus Python 3.11 at the versions pinned
#      below, no docs — and podman imports it under a tag named by those inputs (an imported base with that
#      tag is reused);
#   2. the wheels: pip downloads those pinned by hash in packaging/kubernetes/requirements.txt (and pip
#      itself, by hash below) and builds this checkout's own wheel, into build/image/wheels;
#   3. podman build (packaging/kubernetes/Containerfile, no network): pip installs the wheels offline with
#      --require-hashes into a venv, and the entrypoint is added.
#
# IMAGE=registry.example.com/gpu-env-hook:0.1.0 make image    tags it for your registry (then podman push);
# the default tag is localhost/gpu-env-hook:<version>. It ends by printing the image's size.
set -euo pipefail

cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python} # pip (to download the wheels) and setuptools (to build ours)
for tool in podman mmdebstrap; do
    if ! command -v "$tool" >/dev/null; then
        echo "make image: no $tool on PATH: install it (apt-get install podman mmdebstrap), as root" >&2
        exit 1
    fi
done
SUITE=bookworm
# The image's interpreter runs `gpu-env-hook install` (the node's own Python runs the hook). Debian
# replaces these versions with security updates; when its mirrors no longer have them, step 1 fails
# naming the version: set the new one (`apt-cache policy python3.11`) and build again.
PYTHON3_VERSION=3.11.2-1+b1
PYTHON311_VERSION=3.11.2-6+deb12u9
PACKAGES=(
    usr-is-merged # merged /usr without the usrmerge package (which would pull in perl)
    "python3=$PYTHON3_VERSION"
    "python3-minimal=$PYTHON3_VERSION"
    "python3.11=$PYTHON311_VERSION"
    "python3.11-minimal=$PYTHON311_VERSION"
    "libpython3.11-minimal=$PYTHON311_VERSION"
    "libpython3.11-stdlib=$PYTHON311_VERSION"
)
EXCLUDED=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/share/lintian/*'
    '/usr/lib/x86_64-linux-gnu/gconv/*')
PIP_PIN='pip==25.3 --hash=sha256:9655943313a94722b7774661c21049070f6bbb0a1516bf02f7c8d5d9201514cd'
# The wheels' platform: the base's (CPython 3.11, x86_64, glibc 2.36), whatever runs this script.
WHEEL_PLATFORM=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3
    --abi none --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
    --platform any)

OUT=build/image
# This checkout's version (hook/__init__.py holds it and imports nothing): "$PY" need not have it installed.
VERSION=$("$PY" -I -c 'import sys; sys.path[:0] = ["."]; import hook; print(hook.__version__)')
IMAGE=${IMAGE:-localhost/gpu-env-hook:$VERSION}
start=$SECONDS

log() {
    echo "image: $*" >&2
}

mmdebstrap_args=(--variant=essential --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    "--include=$(IFS=,; echo "${PACKAGES[*]}")")
for path in "${EXCLUDED[@]}"; do mmdebstrap_args+=("--dpkgopt=path-exclude=$path"); done
mmdebstrap_args+=("--dpkgopt=path-include=/usr/share/doc/*/copyright" "$SUITE")
BASE=localhost/gpu-env-hook-base:$SUITE-$(printf '%s\n' "${mmdebstrap_args[@]}" | sha256sum | cut -c1-12)

mkdir -p "$OUT"
if podman image exists "$BASE"; then
    log "base $BASE already imported"
else
    log "making the base with mmdebstrap ($SUITE, essential + Python $PYTHON311_VERSION; a few minutes)"
    rm -f "$OUT/base.tar"
    # A fixed epoch: the files' times do not depend on when the base was made.
    SOURCE_DATE_EPOCH=1700000000 mmdebstrap --quiet "${mmdebstrap_args[@]}" "$OUT/base.tar"
    podman import --quiet "$OUT/base.tar" "$BASE" >/dev/null
    rm -f "$OUT/base.tar"
    log "imported $BASE"
fi

log "downloading the wheels (pinned by hash) and building gpu-env-hook's"
rm -rf "$OUT/wheels"
mkdir -p "$OUT/wheels"
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes "${WHEEL_PLATFORM[@]}" \
    -d "$OUT/wheels" -r packaging/kubernetes/requirements.txt -r <(echo "$PIP_PIN")
cp packaging/kubernetes/requirements.txt "$OUT/wheels/requirements.txt"
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w "$OUT/wheels" .

log "podman build $IMAGE"
podman build --quiet --pull=never --network=none --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
    --build-arg "BASE=$BASE" -f packaging/kubernetes/Containerfile -t "$IMAGE" . >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
log "built $IMAGE: $((size / 1000000)) MB, in $((SECONDS - start))s (base $BASE)"
