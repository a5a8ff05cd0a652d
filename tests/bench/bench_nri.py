"""What the NRI plugin adds to container creation on a real containerd 2.x (``GPU_ENV_HOOK_CONTAINERD2``).

One containerd 2.x (NRI on), one pod sandbox through CRI; containers are created and started in it through
CRI (CreateContainer + StartContainer, timed together, as kubelet does them) in four setups:

- ``plain``: no plugin connected, no backstop hook: plain runc, the baseline;
- ``plugin, no env file``: the plugin connected and the backstop in the base spec, containers naming no env
  file (the added latency every non-GPU container pays);
- ``plugin, env file, cdi``: each container names its own env file (pinned to the pod) whose device the plugin
  names as a CDI device (containerd resolves it from a test CDI spec);
- ``plugin, env file, legacy``: the same files in legacy mode (our prestart hook and the stand-in cli run).

Sequential creates give p50/p99 per create; a burst of ``--burst`` creates at once gives each create's
latency and the wall time of the whole burst. Judged: the burst's p50 (CDI, env file) against plain, target
<= 1.5x. Run as root: ``GPU_ENV_HOOK_CONTAINERD2=DIR .venv/bin/python tests/bench/bench_nri.py``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
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
    GPUS,
    Node,
    base_spec_with_backstop,
    containerd_config,
    write_cdi_spec,
    write_env_file,
)

TARGET = 1.5


def percentile(values: list[float], fraction: float) -> float:
    """The value at ``fraction`` of the sorted values (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def line(name: str, seconds: list[float], wall: float | None = None) -> str:
    """p50 / p99 in milliseconds (and the burst's wall time)."""
    text = (
        f"{name:52s} p50 {statistics.median(seconds) * 1000:8.1f} ms  p99 {percentile(seconds, 0.99) * 1000:8.1f} ms"
        f"  (n={len(seconds)})"
    )
    return text + (f"  wall {wall:6.2f} s" if wall is not None else "")


class Bench:
    """containerd 2.x, a pod sandbox, and a way to time creates in it."""

    def __init__(self, work: Path, *, mode: str, backstop: bool) -> None:
        self.work = work
        self.records = work / "records"
        self.records.mkdir(parents=True, exist_ok=True)
        self.hook_config = work / f"gpu-env-hook-{mode}.toml"
        device_mode = 'device-mode = "cdi"\n' if mode == "cdi" else ""
        self.hook_config.write_text(
            "[nvidia-container-cli]\n"
            f'path = "{STANDIN_CLI}"\n'
            f'environment = ["STANDIN_RECORD_DIR={self.records}"]\n'
            "[env-file]\n"
            f'directories = ["{ENV_DIR}"]\n'
            f"[gpu-env]\n{device_mode}"
            f'[gpu-env.cdi]\nspec-dirs = ["{work / "cdi"}"]\nspec-cache = "{work / "spec-cache"}"\n'
        )
        self.backstop = backstop

    def config(self, ctr: str) -> str:
        """containerd's config: NRI on, CDI on with the test spec, the base spec (with or without backstop)."""
        base = self.work / "base-spec.json"
        spec: dict[str, Any] = base_spec_with_backstop(ctr, self.hook_config)
        if not self.backstop:
            del spec["hooks"]
        base.write_text(json.dumps(spec))
        write_cdi_spec(self.work / "cdi")
        return containerd_config(self.work / "nri.sock", base, self.work / "cdi")


def create_and_start(client: Any, sandbox: str, config: Any, name: str, env: dict[str, str]) -> float:
    """CreateContainer + StartContainer of one container; the seconds both took."""
    started = time.perf_counter()
    container = client.create_container(
        sandbox,
        config,
        name=name,
        image=CONTAINERD_IMAGE,
        command=["/bin/true"],
        env=env,
        log_path=f"{name}.log",
    )
    client.start_container(container)
    return time.perf_counter() - started


def run_setup(
    args: argparse.Namespace,
    work: Path,
    archive: Path,
    *,
    mode: str,
    plugin: bool,
    env_file: bool,
    backstop: bool = True,
) -> list[str]:
    """One setup: sequential creates, then a burst; returns its report lines (and keeps the figures)."""
    assert BINARIES is not None
    bench = Bench(work, mode=mode, backstop=plugin and backstop)
    ctr = str(BINARIES / "ctr")
    tree = work / "node"
    (tree / "etc/containerd").mkdir(parents=True, exist_ok=True)
    (tree / "etc/containerd/config.toml").write_text(bench.config(ctr))
    with running(tree, work / "daemon", binaries=BINARIES) as daemon:
        daemon.import_image(archive)
        node = Node(work, daemon, bench.hook_config, bench.records)
        try:
            if plugin:
                node.start_plugin()
            client = node.client
            config = client.sandbox_config("bench", work / "logs", {})
            sandbox = client.run_pod_sandbox(config, "")
            env_files = {}
            if env_file:
                total = args.sequential + args.burst
                for index in range(total):
                    env_files[index] = write_env_file(
                        f"bench-{index}.env",
                        f"GPU_ENV_HOOK_POD_UID=uid-bench\nNVIDIA_VISIBLE_DEVICES={index % GPUS}\nMARK={index}\n",
                    )

            def env(index: int) -> dict[str, str]:
                return {"NVIDIA_ENV_FROM_FILE": str(env_files[index])} if env_file else {"MARK": str(index)}

            for index in range(3):  # warm up: image snapshot, page cache
                create_and_start(client, sandbox, config, f"warm-{index}", {"MARK": "w"})
            sequential = [
                create_and_start(client, sandbox, config, f"seq-{index}", env(index))
                for index in range(args.sequential)
            ]
            offset = args.sequential
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(max_workers=args.burst) as pool:
                burst = list(
                    pool.map(
                        lambda i: create_and_start(client, sandbox, config, f"burst-{i}", env(offset + i)),
                        range(args.burst),
                    )
                )
            wall = time.perf_counter() - started
            with contextlib.suppress(grpc.RpcError):  # the daemon and its shims are killed when it stops
                client.stop_pod_sandbox(sandbox)
                client.remove_pod_sandbox(sandbox)
        finally:
            node.stop_plugin()
            node.client.close()
    name = "plain" if not plugin else f"plugin, {'env file' if env_file else 'no env file'}, {mode}"
    if plugin and not backstop:
        name += ", no backstop"
    FIGURES[name] = (sequential, burst, wall)
    return [line(f"{name} (one at a time)", sequential), line(f"{name} (burst of {args.burst})", burst, wall)]


FIGURES: dict[str, tuple[list[float], list[float], float]] = {}


def main(argv: list[str] | None = None) -> int:
    """Run every setup and print the figures; exit 1 when the judged ratio misses its target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=100)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--only", help="run only the setups whose label contains this (plain always runs)")
    args = parser.parse_args(argv)
    if BINARIES is None or os.geteuid() != 0:
        print("bench_nri: needs root and GPU_ENV_HOOK_CONTAINERD2 (a containerd 2.x build)")
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-nri-") as tmp:
        root = Path(tmp)
        archive = write_image_archive(root / "image.tar", CONTAINERD_IMAGE, ["/bin/sleep", "3600"])
        setups = [
            ("plain", "legacy", False, False, False),
            ("nogpu-plugin", "legacy", True, False, False),
            ("nogpu", "legacy", True, False, True),
            ("cdi", "cdi", True, True, True),
            ("legacy", "legacy", True, True, True),
        ]
        for label, mode, plugin, env_file, backstop in setups:
            if args.only and label != "plain" and args.only not in label:
                continue
            for text in run_setup(
                args, root / label, archive, mode=mode, plugin=plugin, env_file=env_file, backstop=backstop
            ):
                print(text, flush=True)
    plain_seq, plain_burst, plain_wall = FIGURES["plain"]
    for name in ("plugin, no env file, legacy, no backstop", "plugin, no env file, legacy"):
        if name not in FIGURES:
            continue
        seq = FIGURES[name][0]
        print(
            f"added latency, non-GPU create ({name}): "
            f"p50 {(statistics.median(seq) - statistics.median(plain_seq)) * 1000:+.1f} ms  "
            f"p99 {(percentile(seq, 0.99) - percentile(plain_seq, 0.99)) * 1000:+.1f} ms"
        )
    ok = True
    for name in ("plugin, env file, cdi", "plugin, env file, legacy"):
        if name not in FIGURES:
            continue
        _, burst, wall = FIGURES[name]
        ratio = statistics.median(burst) / statistics.median(plain_burst)
        judged = name.endswith("cdi")
        verdict = ("ok" if ratio <= TARGET else "MISSED") if judged else "(not judged)"
        ok = ok and (ratio <= TARGET or not judged)
        print(
            f"burst p50 {name} / plain: {ratio:.2f}x  wall {wall / plain_wall:.2f}x  target <= {TARGET}x {verdict}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
