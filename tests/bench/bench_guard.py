"""What the env-file guard costs per container on a real containerd 2.x (``GPU_ENV_HOOK_CONTAINERD2``), or with
``--crio`` on a real CRI-O (``GPU_ENV_HOOK_CRIO``).

One runtime (NRI on, CDI mode), one pod sandbox through CRI; CreateContainer + StartContainer timed
together, as kubelet calls them, in blocks that alternate:

- ``env file + guard``: an env-file container given the guard's CDI device, the plugin connected (it removes
  the guard's mount and names the file's device);
- ``env file, no guard``: the same container without the guard's device (what a device plugin returned
  before the guard);
- ``plain, installed``: a container without an env file, the plugin connected and the guard's spec in the CDI
  directory (a node with our install);
- ``plain, not installed``: the same container, no plugin connected and no guard spec (a node without it).

Run as root: ``GPU_ENV_HOOK_CONTAINERD2=DIR .venv/bin/python tests/bench/bench_guard.py [--rounds N]``, or
``GPU_ENV_HOOK_CRIO=DIR .venv/bin/python tests/bench/bench_guard.py --crio [--rounds N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS / "integration"))
sys.path.insert(0, str(TESTS))

from containerd import CONTAINERD_IMAGE, running, write_image_archive  # noqa: E402
from runc_hooks import STANDIN_CLI  # noqa: E402
from test_nri_containerd import (  # noqa: E402
    BINARIES,
    ENV_DIR,
    GUARD,
    Node,
    containerd_config,
    write_cdi_spec,
    write_env_file,
    write_guard_spec,
)

from hook.util import paths  # noqa: E402

BLOCK = 10


def create_and_start(
    node: Node, sandbox: str, config: Any, name: str, env: dict[str, str], guard: bool
) -> float:
    """CreateContainer + StartContainer of one container (checked to exit 0); the seconds both took."""
    client = node.client
    started = time.perf_counter()
    container = client.create_container(
        sandbox,
        config,
        name=name,
        image=CONTAINERD_IMAGE,
        command=["/bin/true"],
        env=env,
        log_path=f"{name}.log",
        cdi_devices=(GUARD,) if guard else (),
    )
    client.start_container(container)
    took = time.perf_counter() - started
    assert client.wait_exited(container).exit_code == 0
    client.remove_container(container)
    return took


@contextlib.contextmanager
def runtime_node(crio: bool, work: Path, hook_config: Path, archive: Path) -> Iterator[Any]:
    """The runtime (its CDI specs in ``work/cdi``, NRI on) with the test image, as the NRI tests' ``Node``."""
    if not crio:
        tree = work / "node"
        (tree / "etc/containerd").mkdir(parents=True)
        (tree / "etc/containerd/config.toml").write_text(containerd_config(work / "nri.sock", work / "cdi"))
        with running(tree, work / "daemon", binaries=BINARIES) as daemon:
            daemon.import_image(archive)
            yield Node(work, daemon, hook_config, work)
        return
    import crio as crio_harness
    import test_nri_crio

    tree = work / "node"
    (tree / "etc/crio").mkdir(parents=True)
    (tree / "etc/crio/crio.conf").write_text(crio_harness.node_config(work / "daemon"))
    (tree / "etc/cdi").symlink_to(work / "cdi")
    with crio_harness.running(tree, work / "daemon") as daemon:
        daemon.import_image(archive)
        yield test_nri_crio.Node(work, daemon, hook_config, work, ENV_DIR)


def main(argv: list[str] | None = None) -> int:
    """Run the alternating blocks and print p50/p95 per setup and the differences."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help=f"blocks of {BLOCK} per setup")
    parser.add_argument("--crio", action="store_true", help="on CRI-O (GPU_ENV_HOOK_CRIO) instead")
    args = parser.parse_args(argv)
    from engine_builds import crio_dir

    built = crio_dir() if args.crio else BINARIES
    if built is None or os.geteuid() != 0:
        print("bench_guard: needs root and GPU_ENV_HOOK_CONTAINERD2 (a containerd 2.x build), or with --crio")
        print("GPU_ENV_HOOK_CRIO (a CRI-O build)")
        return 2
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        work = Path(tmp)
        archive = write_image_archive(work / "image.tar", CONTAINERD_IMAGE, ["/bin/sleep", "3600"])
        hook_config = work / "gpu-env-hook.toml"
        hook_config.write_text(
            f'[nvidia-container-cli]\npath = "{STANDIN_CLI}"\n[env-file]\ndirectories = ["{ENV_DIR}"]\n'
            f'[gpu-env]\ndevice-mode = "cdi"\n[gpu-env.cdi]\nspec-dirs = ["{work / "cdi"}"]\n'
            f'spec-cache = "{work / "spec-cache"}"\n'
        )
        write_cdi_spec(work / "cdi")
        env_file = write_env_file(
            "bench-guard.env", "GPU_ENV_HOOK_POD_UID=uid-bench\nNVIDIA_VISIBLE_DEVICES=0\n"
        )
        guard_spec = work / "cdi" / Path(paths.ENV_FILE_GUARD_SPEC).name
        with runtime_node(args.crio, work, hook_config, archive) as node:
            try:
                config = node.client.sandbox_config("bench", work / "logs", {})
                sandbox = node.client.run_pod_sandbox(config, "")
                count = 0

                def block(label: str, env: dict[str, str], guard: bool) -> None:
                    nonlocal count
                    for _ in range(BLOCK):
                        count += 1
                        took = create_and_start(node, sandbox, config, f"c{count}", env, guard)
                        times.setdefault(label, []).append(took)

                for index in range(3):
                    create_and_start(node, sandbox, config, f"warm{index}", {"MARK": "w"}, False)
                gpu = {"NVIDIA_ENV_FROM_FILE": str(env_file)}
                plain = {"MARK": "plain"}
                for _ in range(args.rounds):
                    write_guard_spec(work / "cdi")
                    node.start_plugin()
                    block("env file + guard", gpu, True)
                    block("env file, no guard", gpu, False)
                    block("plain, installed", plain, False)
                    node.stop_plugin()
                    guard_spec.unlink()
                    time.sleep(0.5)  # the runtime's CDI cache sees the spec gone
                    block("plain, not installed", plain, False)
                with contextlib.suppress(grpc.RpcError):
                    node.client.stop_pod_sandbox(sandbox)
                    node.client.remove_pod_sandbox(sandbox)
            finally:
                node.stop_plugin()
                node.client.close()
                env_file.unlink()
    load = os.getloadavg()
    print(
        f"{'CRI-O' if args.crio else 'containerd'} {built}, {args.rounds} rounds of {BLOCK} per setup, "
        f"load {load[0]:.1f} {load[1]:.1f}"
    )
    for label, values in times.items():
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        print(
            f"{label:24s} p50 {statistics.median(values) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  (n={len(values)})"
        )
    for one, other in (
        ("env file + guard", "env file, no guard"),
        ("plain, installed", "plain, not installed"),
    ):
        diff = statistics.median(times[one]) - statistics.median(times[other])
        print(f"{one} - {other}: p50 {diff * 1000:+.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
