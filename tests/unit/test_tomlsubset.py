"""hook.util.tomlsubset never disagrees with tomllib: where it answers, tomllib gives the same document."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hook.util.tomlsubset import parse_toml_subset

NVIDIA_SHIPPED = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""


def test_nvidia_shipped_config_is_in_the_subset() -> None:
    """The config.toml NVIDIA ships is read without tomllib, to the same document."""
    assert parse_toml_subset(NVIDIA_SHIPPED) == tomllib.loads(NVIDIA_SHIPPED)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("# only a comment\n\n", id="comments"),
        pytest.param("a = 1\r\nb = -2\r\n", id="crlf-and-signs"),
        pytest.param("[a.b]\nx = 'lit'\n[a]\ny = []\n", id="super-table-after-sub-table"),
        pytest.param("  a = [ \"x\" , 'y' , ]   # trailing\n", id="array-spacing-and-trailing-comma"),
        pytest.param('a = "é ✓"\n', id="unicode-string"),
        pytest.param("a = +0\nb = 0\n", id="zeroes"),
    ],
)
def test_subset_documents(text: str) -> None:
    """Documents in the subset are read to exactly tomllib's result."""
    assert parse_toml_subset(text) == tomllib.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('a = "x\\ty"\n', id="escape"),
        pytest.param('a = """x"""\n', id="multi-line-string"),
        pytest.param("a = [\n 'x',\n]\n", id="multi-line-array"),
        pytest.param("a = {b = 1}\n", id="inline-table"),
        pytest.param("a = 1.5\n", id="float"),
        pytest.param("a = 1_000\n", id="underscore-integer"),
        pytest.param("a = 0x1f\n", id="hex-integer"),
        pytest.param("a = 1979-05-27\n", id="date"),
        pytest.param("a.b = 1\n", id="dotted-key"),
        pytest.param('"a" = 1\n', id="quoted-key"),
        pytest.param("[[a]]\n", id="array-of-tables"),
        pytest.param("[ a ]\n", id="spaced-header"),
        pytest.param("a = 1\na = 2\n", id="duplicate-key"),
        pytest.param("[a]\n[a]\n", id="duplicate-table"),
        pytest.param("a = 1\n[a]\n", id="table-over-a-value"),
        pytest.param("a = [1, 2]\n", id="array-of-integers"),
        pytest.param("a = 01\n", id="leading-zero"),
        pytest.param("a = truex\n", id="not-a-boolean"),
        pytest.param("a = 'x\x01'\n", id="control-character"),
        pytest.param("a = \n", id="no-value"),
        pytest.param("a\n", id="no-equals"),
        pytest.param("\ufeffa = 1\n", id="byte-order-mark"),
    ],
)
def test_outside_the_subset(text: str) -> None:
    """Anything beyond the subset (valid TOML or not) is left to tomllib."""
    assert parse_toml_subset(text) is None


KEYS = st.sampled_from(["a", "b", "load-kmods", "x_1", "true", "0", "a.b", '"q"', "", "a b"])
VALUES = st.one_of(
    st.sampled_from(
        ["true", "false", "0", "-1", "+7", "01", "1.0", "[]", "[,]", "['x',]", "[1]", '"\\n"', "truex"]
    ),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=8).map(lambda s: f'"{s}"'),
    st.text(max_size=8).map(lambda s: f"'{s}'"),
    st.lists(st.text(max_size=4).map(lambda s: f'"{s}"'), max_size=3).map(
        lambda xs: "[" + ", ".join(xs) + "]"
    ),
)
LINES = st.one_of(
    st.builds(
        lambda k, v, pad, comment: f"{pad}{k}{pad}={pad}{v}{comment}",
        KEYS,
        VALUES,
        st.sampled_from(["", " ", "\t"]),
        st.sampled_from(["", " # c", "#c", " # \x01"]),
    ),
    st.lists(KEYS, min_size=1, max_size=3).map(lambda ks: "[" + ".".join(ks) + "]"),
    st.sampled_from(["", "# comment", "   ", "[[t]]", "\r", "key"]),
    st.text(max_size=12),
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(LINES, max_size=8), st.sampled_from(["\n", "\r\n"]))
@example(["a = 9223372036854775808"], "\n")
def test_never_disagrees_with_tomllib(lines: list[str], newline: str) -> None:
    """For random near-TOML text: when the subset reader answers, tomllib accepts the text with the same result."""
    text = newline.join(lines)
    ours = parse_toml_subset(text)
    if ours is None:
        return
    assert tomllib.loads(text) == ours
