"""make demo: a real busybox container started by runc with gpu-env-hook as its prestart hook.

Step by step: build a busybox bundle in a temporary directory, write an env file the way a device plugin
would, point the container at it with NVIDIA_ENV_FROM_FILE, run it with runc, and show what happened:
the env file, the nvidia-container-cli command line the hook ran, config.json's merged env, and what the
container printed. Needs root, runc and busybox-static (``.ci/run --install-only`` installs them).

There is usually no GPU driver on a demo machine: unless ``nvidia-container-cli`` is on PATH, the hook is
pointed at the project's recording stand-in (tests/standin/nvidia-container-cli), which only writes down
how it was called. The screen says which one ran.
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
HOOK_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
ENV_FILE_TEXT = """\
# Written by the node's device plugin for one container.
NVIDIA_VISIBLE_DEVICES=0,1
NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER_CUSTOM_ENV=hello
"""
CONTAINER_SCRIPT = (
    "echo hello from the container; "
    'echo "  NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"; '
    'echo "  USER_CUSTOM_ENV=$USER_CUSTOM_ENV"'
)


def step(number: int, title: str) -> None:
    """Print a step header."""
    print(f"\n== {number}. {title}")


def show(text: str) -> None:
    """Print text indented under the current step."""
    print(textwrap.indent(text.rstrip("\n"), "   | ", predicate=lambda _line: True))


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


def build_rootfs(rootfs: Path) -> None:
    """A minimal root filesystem: static busybox and the applets the container uses."""
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in ("sh", "echo", "env", "cat"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    for name in ("proc", "dev", "sys", "tmp"):
        (rootfs / name).mkdir()


def write_env_file(env_dir: Path) -> Path:
    """The device plugin's file: root-owned, mode 0644, in a directory the hook is configured to accept."""
    env_dir.mkdir(mode=0o755)
    path = env_dir / "demo-container.env"
    path.write_text(ENV_FILE_TEXT, encoding="utf-8")
    path.chmod(0o644)
    return path


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


def hook_entry(config: Path) -> dict[str, object]:
    """The prestart entry an engine would add: our hook, run by this interpreter in isolated mode."""
    args = [sys.executable, "-I", "-m", "hook", "-config", str(config), "prestart"]
    return {"path": sys.executable, "args": args, "env": HOOK_ENV}


def write_bundle(bundle: Path, *, env_file: Path, config: Path) -> Path:
    """config.json from ``runc spec``, with our process, env and prestart hook."""
    build_rootfs(bundle / "rootfs")
    subprocess.run(["runc", "spec"], cwd=bundle, check=True)
    spec_path = bundle / "config.json"
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["sh", "-c", CONTAINER_SCRIPT]
    spec["process"]["env"] = [
        "PATH=/bin",
        "NVIDIA_VISIBLE_DEVICES=fake0,fake1",
        f"NVIDIA_ENV_FROM_FILE={env_file}",
    ]
    spec["hooks"] = {"prestart": [hook_entry(config)]}
    spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    return spec_path


def run_container(bundle: Path, state_root: Path) -> subprocess.CompletedProcess[str]:
    """``runc run`` the bundle, then always delete the container."""
    cid = f"gpu-env-hook-demo-{os.getpid()}"
    cmd = ["runc", "--root", str(state_root), "run", "--bundle", str(bundle), cid]
    try:
        return subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=60
        )
    finally:
        subprocess.run(
            ["runc", "--root", str(state_root), "delete", "-f", cid], capture_output=True, check=False
        )


def show_cli_call(record: Path, *, standin: bool, cli: str) -> None:
    """Show the nvidia-container-cli command line the hook executed."""
    if not standin:
        show(f"the real {cli} ran (its command line is not recorded; run the hook with -debug to log it)")
        return
    if not record.exists():
        show("the stand-in was not called")
        return
    argv = json.loads(record.read_text(encoding="utf-8"))["argv"]
    show("RECORDING STAND-IN, not NVIDIA's cli (no GPU driver here); it was called as:")
    show("  nvidia-container-cli " + " ".join(argv[1:]))


def main() -> int:
    """Run the demo; exit status 0 when the container started and ran."""
    check_machine()
    with tempfile.TemporaryDirectory(prefix="gpu-env-hook-demo-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        record = work / "cli-record.json"

        step(1, "the device plugin writes an env file")
        env_file = write_env_file(work / "nvidia-env")
        print(f"   {env_file}:")
        show(env_file.read_text(encoding="utf-8"))

        step(2, "the node's config.toml")
        cli, cli_env, standin = choose_cli(record)
        config = write_config(work / "config.toml", cli=cli, cli_env=cli_env, env_dir=env_file.parent)
        show(config.read_text(encoding="utf-8"))
        if standin:
            show(f"(nvidia-container-cli not found: using the recording stand-in {STANDIN_CLI})")

        step(3, "a busybox bundle whose container names the file and has fake devices of its own")
        spec_path = write_bundle(work / "bundle", env_file=env_file, config=config)
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
        show("process.env:\n" + "\n".join(f"  {entry}" for entry in spec["process"]["env"]))
        show("hooks.prestart[0].args:\n  " + " ".join(spec["hooks"]["prestart"][0]["args"]))

        step(4, "runc run")
        result = run_container(work / "bundle", work / "runc-state")
        print(f"   runc exited with status {result.returncode}")
        if result.stderr.strip():
            show(result.stderr)

        step(5, "what the hook ran")
        show_cli_call(record, standin=standin, cli=cli)

        step(6, "config.json after the hook (process.env, merged from the env file)")
        merged = json.loads(spec_path.read_text(encoding="utf-8"))["process"]["env"]
        show("\n".join(f"  {entry}" for entry in merged))

        step(7, "what the container printed")
        show(result.stdout or "(nothing)")
        show(
            "The container's own env still says fake0,fake1: runc read config.json before any prestart\n"
            "hook ran, so a hook can pick the GPUs but not change the process env (the runtime shim can)."
        )
        return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
