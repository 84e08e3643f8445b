"""Every doc's links and names resolve in the repository. A relative link points at a file that exists (and,
with `#anchor`, at one of its headings); a path of the repository named in backticks (`tests/…py`,
`spark_jobs/…`, `functions/…`) exists; a test file or test named in backticks exists; neither a doc nor a Python
file of the product or the tests names a Markdown file outside the repository (a design note) or an issue number
of a tracker the repository does not hold."""

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
    "lakectl",
    "localaws",
    "deploy",
    "bench",
    "bi",
    "statemachine",
    "events",
    "docs",
)
# The product's and the tests' Python files (committed or new, not ignored), as the repository has them.
PYTHON_FOLDERS = ("spark_jobs", "functions", "localaws", "tools", "lakectl", "deploy", "bench", "tests")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A design note kept outside the repository, an issue number of a tracker the repository does not hold.
OUTSIDE = re.compile(r"DESIGN\.md|\bissues? ?#?\d+\b|\bissue-\d+\b", flags=re.I)
MARKDOWN_NAME = re.compile(r"\b[\w-]+\.md\b")
CODE = re.compile(r"`([^`\n]+)`")


def doc_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def python_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *PYTHON_FOLDERS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(REPO / name for name in listed if name.endswith(".py") and (REPO / name).exists())


def outside_references(text: str, known_markdown: set[str]) -> list[str]:
    """What `text` names outside the repository: a design note (a Markdown file of no such name in the
    repository), an issue number of a tracker."""
    named = OUTSIDE.findall(text) + MARKDOWN_NAME.findall(text)
    return [name for name in dict.fromkeys(named) if name not in known_markdown]


@cache
def repository_markdown() -> frozenset[str]:
    return frozenset({p.name for p in REPO.glob("*.md")} | {p.name for p in REPO.glob("*/*.md")})


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


def test_the_outside_rule_finds_design_notes_and_issue_numbers():
    """Given text naming a design note kept elsewhere, issue numbers in their usual spellings, a document of the
    repository and words that only look alike, Then the rule finds the design note and the issue numbers only.
    (The names are assembled here, so that this file does not name them itself.)"""
    design_note, elsewhere = "DESIGN" + ".md", "NOTES" + ".md"
    issues = ["Issue" + " 29", "issues" + " 25", "issue #" + "7", "issue-" + "12", "issue" + "3"]
    text = (
        f"the rules of {design_note}; {issues[0]}: the steps; ({issues[1]}, 27); see {issues[2]}, {issues[3]} "
        f"and {issues[4]}; docs/CONTRACTS.md; an issue of 2 tables; tissue 5; the issues; {elsewhere}"
    )
    assert outside_references(text, {"CONTRACTS.md"}) == [design_note, *issues, elsewhere]
    assert outside_references("docs/CONTRACTS.md, an issue of 2 tables, tissue 5", {"CONTRACTS.md"}) == []


def test_the_python_files_checked_are_the_products_and_the_tests():
    """Given the repository, Then the Python files the rule reads include a module of each product folder and
    this test file, and nothing of a virtual environment."""
    files = {str(p.relative_to(REPO)) for p in python_files()}
    assert {
        "spark_jobs/lakehouse/apply/cdc.py",
        "functions/queue_drain/drain.py",
        "functions/shared/lake_contracts/names.py",
        "localaws/demo.py",
        "tools/verify.py",
        "deploy/preflight.py",
        "bench/cost_model.py",
        "tests/unit/docs/test_docs_resolve.py",
    } <= files
    assert not any(name.startswith(".venv") for name in files)


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_no_doc_names_what_is_outside_the_repository(doc: Path):
    """A design note outside the repository, an issue number of a tracker the repository does not hold: a reader
    of the repository cannot follow them."""
    assert outside_references(doc.read_text(), set(repository_markdown())) == []


def test_no_python_file_names_what_is_outside_the_repository():
    """The same rule for the code, its comments and docstrings, and the tests: every Python file of the product
    and the tests."""
    known = set(repository_markdown())
    found = {
        str(path.relative_to(REPO)): outside
        for path in python_files()
        if (outside := outside_references(path.read_text(encoding="utf-8"), known))
    }
    assert found == {}
