"""Issue 29: every doc's links and names resolve in the repository. A relative link points at a file that
exists (and, with `#anchor`, at one of its headings); a path of the repository named in backticks
(`tests/…py`, `spark_jobs/…`, `functions/…`) exists; a test file or test named in backticks exists; a doc names
no file outside the repository (`DESIGN.md`) and no issue number of a tracker the repository does not hold."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCS = sorted(
    [REPO / "README.md", REPO / "bench" / "RESULTS.md", *(REPO / "docs").glob("*.md")],
    key=lambda p: str(p),
)
TOP_FOLDERS = (
    "tests",
    "spark_jobs",
    "functions",
    "tools",
    "localaws",
    "deploy",
    "bench",
    "bi",
    "statemachine",
    "events",
    "docs",
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")


def doc_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def prose(text: str) -> str:
    """The text outside fenced code blocks (a shell example may name files it creates)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a document's headings: lower case, punctuation dropped, spaces as `-`, a repeated
    heading suffixed `-1`, `-2`…"""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(markdown).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@cache
def ignored(relative: str) -> bool:
    """Git-ignored (a cache or an output a command writes, e.g. bench/data/): not in a fresh clone."""
    return subprocess.run(["git", "check-ignore", "-q", relative], cwd=REPO).returncode == 0


@cache
def known_tests() -> tuple[set[str], set[str]]:
    files = {p.name for p in (REPO / "tests").rglob("test_*.py")}
    tests = {
        name for p in (REPO / "tests").rglob("*.py") for name in re.findall(r"def (test_\w+)", p.read_text())
    }
    return files, tests


def test_the_anchor_rule_is_githubs():
    """Given headings with punctuation, code and a repeat, Then their anchors are GitHub's."""
    markdown = "# Raw zone <-> ledger audit (`lakehouse/audit/raw_zone.py`)\n## Names\n## Names\n```\n# not a heading\n```"
    assert anchors(markdown) == {"raw-zone---ledger-audit-lakehouseauditraw_zonepy", "names", "names-1"}


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_relative_link_points_at_a_file_and_heading_that_exist(doc: Path):
    broken = []
    for target in LINK.findall(prose(doc.read_text())):
        if re.match(r"^[a-z][a-z+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists() or not linked.is_relative_to(REPO):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert broken == []


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_path_test_file_and_test_named_exists(doc: Path):
    files, tests = known_tests()
    missing = []
    for code in CODE.findall(prose(doc.read_text())):
        for word in code.split():
            name = word.rstrip(".,;:)").split("::")[0]
            if re.match(rf"^({'|'.join(TOP_FOLDERS)})/", name):
                if re.search(r"[<>*{}$]|\.\.\.|…", name):
                    continue  # a pattern or a placeholder
                if not (REPO / name).exists() and not ignored(name):
                    missing.append(name)
            elif re.fullmatch(r"test_\w+\.py", name) and name not in files:
                missing.append(name)
            elif re.fullmatch(r"test_\w+", name) and name not in tests and name != "test_decoding":
                missing.append(name)  # (test_decoding: PostgreSQL's logical decoding plugin)
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_no_doc_names_what_is_outside_the_repository(doc: Path):
    """A design note outside the repository (`DESIGN.md`), an issue number of a tracker the repository does not
    hold ("issue 16"): a reader of the repository cannot follow them."""
    text = doc.read_text()
    outside = re.findall(r"DESIGN\.md|\bissues? ?#?\d+\b|\bissue-\d+\b", text, flags=re.I)
    markdown_named = {m for m in re.findall(r"\b[\w-]+\.md\b", text)}
    known = {p.name for p in REPO.glob("*.md")} | {p.name for p in REPO.glob("*/*.md")}
    assert outside == [] and markdown_named - known == set()
