"""make demo: the whole story on one machine, with real parts.

1. ``gpu-env-hook install --engine containerd`` into a scratch node root (the wrappers an engine runs);
2. the node's config.toml;
3. the device plugin's two calls: ``gpu-env-hook env-file path`` (Allocate) and ``env-file write``
   (PreStartContainer);
4. a busybox bundle whose container names the file and carries kubelet's fake device ids;
5. ``gpu-env-hook resolve``: what the hook will do, without doing it;
6. ``runc run`` through the installed ``gpu-env-runtime`` wrapper: the shim merges the file into config.json
   and injects the prestart hook; runc runs the hook, which execs nvidia-container-cli;
7. what the shim changed, the cli command line the hook ran, and the environment the container saw;
8. ``gpu-env-hook uninstall``.

It writes nothing on this machine outside its scratch directory (the naming key too is there).

Needs root, runc and busybox-static (``make demo`` installs them through ``.ci/run --install-only``). There is
usually no GPU driver on a demo machine: unless ``nvidia-container-cli`` is on PATH, the hook is pointed at
the project's recording stand-in (tests/standin/nvidia-container-cli), which only writes down how it was
called. The screen says which one ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDIN_CLI = REPO / "tests" / "standin" / "nvidia-container-cli"
BUSYBOX = Path("/bin/busybox")
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its own path
RUNTIME_WRAPPER = "usr/local/libexec/gpu-env-hook/containerd/gpu-env-runtime"
FAKE_IDS = ("fake0", "fake1")  # what kubelet hands a GPU-sharing device plugin
PLUGIN_VARIABLES = (
    "NVIDIA_VISIBLE_DEVICES=0,1",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    "USER_CUSTOM_ENV=hello",
)


def step(number: int, title: str) -> None:
    """Print a step header."""
    print(f"\n== {number}. {title}")


SHORTEN: dict[str, str] = {}  # long temporary paths -> a short name, for the screen


def show(text: str) -> None:
    """Print text indented under the current step, temporary paths shortened."""
    for long, short in SHORTEN.items():
        text = text.replace(long, short)
    print(textwrap.indent(text.rstrip("\n"), "   | ", predicate=lambda _line: True))


def shorten(value: object) -> object:
    """Shorten the temporary paths in every string of a JSON value."""
    if isinstance(value, str):
        for long, short in SHORTEN.items():
            value = value.replace(long, short)
        return value
    if isinstance(value, list):
        return [shorten(item) for item in value]
    if isinstance(value, dict):
        return {key: shorten(item) for key, item in value.items()}
    return value


def resolve_view(document: dict[str, object]) -> str:
    """resolve's human view of its JSON document, rendered after the paths are shortened (so it aligns)."""
    from hook.commands.cli import format_resolve_document

    return format_resolve_document(shorten(document))  # type: ignore[arg-type]


def command(line: str) -> None:
    """Print a command line as typed, temporary paths shortened."""
    for long, short in SHORTEN.items():
        line = line.replace(long, short)
    print(f"   $ {line}")


def only(text: str, *prefixes: str) -> str:
    """Keep the lines of ``text`` that start with one of ``prefixes``."""
    return "\n".join(line for line in text.splitlines() if line.startswith(prefixes))


def check_machine() -> None:
    """Stop with a clear message unless we are root with runc and static busybox."""
    problems = []
    if os.geteuid() != 0:
        problems.append("run as root (runc needs it)")
    if shutil.which("runc") is None:
        problems.append("runc is not installed (apt-get install runc)")
    if not BUSYBOX.exists():
        problems.append(f"{BUSYBOX} is missing (apt-get install busybox-static)")
    if problems:
        sys.exit("make demo: " + "; ".join(problems))


def gpu_env_hook(*args: str, config: Path | None = None) -> str:
    """Run ``gpu-env-hook [-config FILE] ARGS``, echo the command, return its stdout (stop on failure)."""
    flags = ["-config", str(config)] if config is not None else []
    command("gpu-env-hook " + " ".join([*flags, *args]))
    proc = subprocess.run(
        [PYTHON, "-I", "-m", "hook", *flags, *args], capture_output=True, text=True, check=False, timeout=120
    )
    if proc.returncode != 0:
        show(proc.stdout + proc.stderr)
        sys.exit(f"make demo: gpu-env-hook {args[0]} failed (exit status {proc.returncode})")
    return proc.stdout


def choose_cli(record: Path) -> tuple[str, list[str], bool]:
    """Return (cli path, extra environment for it, whether it is the stand-in)."""
    real = shutil.which("nvidia-container-cli")
    if real is not None:
        return real, [], False
    return str(STANDIN_CLI), [f"STANDIN_RECORD={record}"], True


def write_config(path: Path, *, cli: str, cli_env: list[str], env_dir: Path) -> Path:
    """The node's config.toml: NVIDIA's keys plus our [env-file] table."""
    text = (
        "[nvidia-container-cli]\n"
        f"path = {json.dumps(cli)}\n"
        f"environment = {json.dumps(cli_env)}\n"
        "\n[env-file]\n"
        f"directories = {json.dumps([str(env_dir)])}\n"
    )
    path.write_text(text, encoding="utf-8")
    return path


def build_rootfs(rootfs: Path) -> None:
    """A minimal root filesystem: static busybox and the applets the container uses."""
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in ("sh", "env", "sort"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    for name in ("proc", "dev", "sys", "tmp"):
        (rootfs / name).mkdir()


def write_bundle(bundle: Path, *, env_file: str) -> Path:
    """config.json from ``runc spec``: the container prints its environment; no hooks (the shim adds ours)."""
    build_rootfs(bundle / "rootfs")
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    spec_path = bundle / "config.json"
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["sh", "-c", "env | sort"]
    spec["process"]["env"] = [
        "PATH=/bin",
        "NVIDIA_VISIBLE_DEVICES=" + ",".join(FAKE_IDS),
        f"NVIDIA_ENV_FROM_FILE={env_file}",
    ]
    spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    return spec_path


def run_through_shim(
    runtime: Path, bundle: Path, state_root: Path, config: Path
) -> subprocess.CompletedProcess[str]:
    """``gpu-env-runtime run`` the bundle as containerd would call it, then always delete the container."""
    cid = f"gpu-env-hook-demo-{os.getpid()}"
    args = ["--root", str(state_root), "run", "--bundle", str(bundle), cid]
    command(f"NVIDIA_CTK_CONFIG_FILE_PATH={config} {runtime} {' '.join(args)}")
    # As an engine would: some inherited environment, which the wrapper drops (all but the config path).
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "/nonexistent", "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
    # The installed files name the node's runtime tree, /opt/gpu-env-hook: run where the scratch node's is
    # there (a private mount namespace with /opt on tmpfs, so this machine's /opt is not touched).
    tree = Path(str(runtime).removesuffix(RUNTIME_WRAPPER)) / "opt/gpu-env-hook"
    namespace = 'mount -t tmpfs tmpfs /opt && mkdir /opt/gpu-env-hook && mount --bind "$0" /opt/gpu-env-hook && exec "$@"'
    try:
        return subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                namespace,
                str(tree),
                str(runtime),
                *args,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    finally:
        subprocess.run(
            ["runc", "--root", str(state_root), "delete", "-f", cid], capture_output=True, check=False
        )


def show_cli_call(record: Path, *, standin: bool, cli: str) -> None:
    """Show the nvidia-container-cli command line the hook executed."""
    if not standin:
        show(f"the real {cli} ran (its command line is not recorded; `resolve` above printed it)")
        return
    if not record.exists():
        show("the stand-in was not called")
        return
    called = json.loads(record.read_text(encoding="utf-8"))
    show("RECORDING STAND-IN, not NVIDIA's cli (no GPU driver here); it was called as:")
    show("  nvidia-container-cli " + " ".join(called["argv"][1:]))
    show(
        "with environment:\n" + "\n".join(f"  {key}={value}" for key, value in sorted(called["env"].items()))
    )


def demo(work: Path) -> int:
    """Tell the story in ``work``; return 0 when the container ran and saw the env file's variables."""
    node = work / "node"
    node.mkdir()
    record = work / "cli-record.json"
    cli, cli_env, standin = choose_cli(record)
    print(f"DEMO={work}  (a scratch directory, removed at the end); REPO={REPO}")
    if standin:
        print("NOTE: no nvidia-container-cli on this machine: the hook calls the RECORDING STAND-IN")
        print(f"      {STANDIN_CLI}, which writes down how it was called and does nothing else.")
    else:
        print(f"NOTE: using the real {cli}")

    step(1, "install: the wrappers an engine runs, and containerd's drop-in (into a scratch node root)")
    show(only(gpu_env_hook("install", "--engine", "containerd", "--root", str(node)), "wrote", "next"))
    runtime = node / RUNTIME_WRAPPER
    wrapper = runtime.read_text(encoding="utf-8")
    show(f"{runtime}, the end (the rest is comments):\n" + wrapper[wrapper.index("exec ") :])

    step(2, "the node's config.toml")
    env_dir = work / "nvidia-env"
    env_dir.mkdir(mode=0o700)  # as install makes it (root's, 0700)
    config = write_config(work / "config.toml", cli=cli, cli_env=cli_env, env_dir=env_dir)
    show(config.read_text(encoding="utf-8"))

    step(3, "device plugin, Allocate(): names the env file from kubelet's fake device ids")
    show("naming key: GPU_ENV_HOOK_NAME_KEY=$DEMO/key/alloc.key (a node's: /var/lib/gpu-env-hook/alloc.key)")
    env_file = gpu_env_hook("env-file", "path", *FAKE_IDS, config=config).strip()
    show(f"-> the container gets NVIDIA_ENV_FROM_FILE={env_file}")

    step(4, "device plugin, PreStartContainer(): writes the real GPUs into that file")
    gpu_env_hook("env-file", "write", env_file, *PLUGIN_VARIABLES, config=config)
    show(f"{env_file}:\n" + Path(env_file).read_text(encoding="utf-8"))

    step(5, "a busybox bundle: the container names the file and still has the fake ids")
    spec_path = write_bundle(work / "bundle", env_file=env_file)
    show("process.env:\n" + "\n".join(f"  {e}" for e in json.loads(spec_path.read_text())["process"]["env"]))

    step(6, "resolve: what the hook will do (reads, writes nothing; its JSON shown as the human view)")
    document = json.loads(gpu_env_hook("resolve", "--bundle", str(spec_path.parent), "--json", config=config))
    show(resolve_view(document))

    step(7, "runc run through the runtime shim (what containerd runs for runtime handler gpu-env)")
    result = run_through_shim(runtime, spec_path.parent, work / "runc-state", config)
    print(f"   exit status {result.returncode}")
    if result.stderr.strip():
        show("stderr:\n" + result.stderr)

    step(8, "what the shim did to config.json before runc read it")
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    show("process.env:\n" + "\n".join(f"  {e}" for e in spec["process"]["env"]))
    hooks = spec.get("hooks", {}).get("prestart", [])
    show("hooks.prestart (injected):\n" + "\n".join("  " + " ".join(h["args"]) for h in hooks))

    step(9, "the nvidia-container-cli command the hook ran")
    show_cli_call(record, standin=standin, cli=cli)

    step(10, "the environment the container saw")
    show(result.stdout or "(nothing)")

    step(11, "uninstall: the scratch node root is as it was")
    uninstall(node)

    saw_file = "USER_CUSTOM_ENV=hello" in result.stdout.splitlines()
    return 0 if result.returncode == 0 and saw_file else 1


def uninstall(node: Path) -> None:
    """Uninstall from the scratch node root and show that nothing is left."""
    report = gpu_env_hook("uninstall", "--engine", "containerd", "--root", str(node))
    show("\n".join(line for line in report.splitlines() if not line.startswith("removed directory")))
    left = sorted(str(path.relative_to(node)) for path in node.rglob("*"))
    show(f"left under {node}: {left or 'nothing (the directories install created are gone too)'}")


def main() -> int:
    """Run the demo in a scratch directory that is removed afterwards."""
    check_machine()
    with tempfile.TemporaryDirectory(prefix="gpu-env-hook-demo-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        SHORTEN[str(work)] = "$DEMO"
        SHORTEN[str(REPO)] = "$REPO"
        # The names' key (hook.producer.namekey) for every command run here: the scratch directory's.
        os.environ["GPU_ENV_HOOK_NAME_KEY"] = str(work / "key" / "alloc.key")
        return demo(work)


if __name__ == "__main__":
    sys.exit(main())
