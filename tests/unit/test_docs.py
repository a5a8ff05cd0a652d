"""The documentation: every relative link resolves inside the repository (files and #anchors), no document
points outside it, and the format specification's example reads as it says."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
FORBIDDEN = ("../shared", "upstream-hook-behaviour", "seed-issue")


def tracked_docs() -> list[Path]:
    """README.md, SECURITY.md and every Markdown file under docs/ (and the rest of the repository's .md)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()  # fmt: skip
    paths = sorted({REPO / name for name in listed} | {REPO / "README.md", REPO / "SECURITY.md"})
    return [path for path in paths if path.exists()]


DOCS = tracked_docs()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*|_(?=\W)|(?<=\W)_|\[|\]\([^)]*\)|\]", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers (duplicates numbered as GitHub does)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*$", text, re.MULTILINE):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside code blocks."""
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def test_the_documents_are_found() -> None:
    """The test looks at README.md, SECURITY.md and docs/."""
    names = {str(path.relative_to(REPO)) for path in DOCS}
    assert {"README.md", "SECURITY.md", "docs/troubleshooting.md", "docs/faq.md", "docs/env-file.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_resolve_inside_the_repository(path: Path) -> None:
    """Each relative link names a file inside the repository, and its #anchor a heading of that file."""
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.is_relative_to(REPO) or not resolved.exists():
            broken.append(f"{target}: no such file in the repository")
            continue
        if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert broken == []


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(REPO)))
def test_no_document_points_outside_the_repository(path: Path) -> None:
    """No document names the project's private reference material."""
    text = path.read_text(encoding="utf-8")
    assert [word for word in FORBIDDEN if word in text] == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        pytest.param(
            "For device-plugin authors: producing env files",
            "for-device-plugin-authors-producing-env-files",
            id="colon",
        ),
        pytest.param("`NVIDIA_ENV_FROM_FILE`: the env file", "nvidia_env_from_file-the-env-file", id="code"),
        pytest.param("The format, as a specification", "the-format-as-a-specification", id="comma"),
        pytest.param(
            "`-env-only`: in front of NVIDIA's hook", "-env-only-in-front-of-nvidias-hook", id="apostrophe"
        ),
    ],
)
def test_slug(heading: str, anchor: str) -> None:
    """Anchors are computed as GitHub computes them."""
    assert slug(heading) == anchor


def test_specification_example_reads_as_described() -> None:
    """The example of "The format, as a specification" is read by the hook's reader with the values it shows."""
    from hook.pipeline.dotenvreader import parse_dotenv

    text = (REPO / "docs" / "env-file.md").read_text(encoding="utf-8")
    section = text[text.index("### The format, as a specification") :]
    example = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert example is not None
    values = {key: value for key, value, _ in parse_dotenv(example.group(1))}
    assert values == {
        "GPU_ENV_HOOK_POD_UID": "6f1c2a9e-0d7b-4c55-9d8e-2d6f3b1a9c10",
        "GPU_ENV_HOOK_CONTAINER_NAME": "main",
        "NVIDIA_VISIBLE_DEVICES": "0",
        "USER_CUSTOM_ENV": 'a "quoted" word, a backslash \\ and ${NOT_EXPANDED}',
    }
