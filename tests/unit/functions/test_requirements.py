"""What the libraries layer's requirements.txt must pin for the functions' code (read as text, no install)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.unit.functions.conftest import FUNCTIONS

# S3 conditional writes: IfNoneMatch on PutObject since botocore 1.35.x, IfMatch only since 1.35.69 (the
# first release whose S3 model has it). The Lambda runtime's bundled boto3 may be older: a PutObject
# with IfMatch would then fail parameter validation, so the function must bring its own.
CONDITIONAL_WRITE = re.compile(r"\bIf(?:None)?Match\s*=")
FIRST_WITH_CONDITIONAL_WRITES = Version("1.35.69")
ALL_FUNCTIONS = sorted(folder.name for folder in FUNCTIONS.iterdir() if any(folder.glob("*.py")))


# the layer every function runs its third-party code from (template.yaml, Globals: Layers)
LIBRARIES = FUNCTIONS / "libraries"


def requirements(folder: Path) -> dict[str, Requirement]:
    lines = (folder / "requirements.txt").read_text().splitlines()
    parsed = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    return {requirement.name.lower(): requirement for requirement in parsed}


SHARED = FUNCTIONS / "shared"  # the layer every function has (template.yaml, Globals: Layers)
ALL_FUNCTIONS = [f for f in ALL_FUNCTIONS if (FUNCTIONS / f / "app.py").exists()]


def sources(function: str) -> list[Path]:
    """The code a function runs: its own, and the shared layer's modules it imports (`lake_contracts.x`)."""
    own = sorted((FUNCTIONS / function).glob("*.py"))
    imported = {
        m
        for source in own
        for m in re.findall(r"^from lake_contracts\.(\w+) import", source.read_text(), re.M)
    }
    return own + [SHARED / "lake_contracts" / f"{module}.py" for module in sorted(imported)]


def uses_conditional_writes(function: str) -> bool:
    return any(CONDITIONAL_WRITE.search(source.read_text()) for source in sources(function))


def lowest_allowed(requirement: Requirement) -> Version | None:
    """The lowest version the specifier admits (None: no lower bound)."""
    bounds = [Version(s.version) for s in requirement.specifier if s.operator in (">=", ">", "==", "~=")]
    return max(bounds, default=None)  # ">" counts as its own version: conservative


def test_the_lease_is_found_to_use_conditional_writes():
    """Given the lease's compare-and-swap on S3, When the functions are searched for conditional writes,
    Then the lease is among them (the search below is not vacuous)."""
    assert uses_conditional_writes("lease")


def test_a_conditional_write_in_the_shared_layer_counts_for_the_functions_that_import_it():
    """Given the acknowledge, whose only conditional write is the shared conditional delete
    (lake_contracts.s3.delete_if_unchanged), When the functions are searched, Then it is found (the SDK
    the layer's code runs with is the function's own), and so are the drain's and the reloads'."""
    assert not any(CONDITIONAL_WRITE.search(p.read_text()) for p in (FUNCTIONS / "acknowledge").glob("*.py"))
    assert {"acknowledge", "queue_drain", "reloads", "lease"} <= {
        f for f in ALL_FUNCTIONS if uses_conditional_writes(f)
    }


@pytest.mark.parametrize("function", [f for f in ALL_FUNCTIONS if uses_conditional_writes(f)])
@pytest.mark.parametrize("package", ["boto3", "botocore"])
def test_a_function_using_conditional_writes_runs_on_an_sdk_that_has_them(function, package):
    """Given a function whose code passes IfMatch or IfNoneMatch to S3, When the libraries layer's
    requirements.txt is read, Then it requires boto3 and botocore at a version whose S3 model has both (not
    whatever the Lambda runtime bundles)."""
    required = requirements(LIBRARIES).get(package)

    assert required is not None, f"functions/libraries/requirements.txt does not require {package}"
    assert (lowest_allowed(required) or Version("0")) >= FIRST_WITH_CONDITIONAL_WRITES, str(required)


@pytest.mark.parametrize("function", ALL_FUNCTIONS)
def test_no_function_bundles_libraries_of_its_own(function):
    """Given a function's folder, Then it has no requirements.txt: `sam build` would install its libraries into
    the function's own package (about 20 MB zipped, 45 MB unzipped, for each of the seven) beside the layer's,
    and they would come first on its path, shadowing the layer's SDK."""
    assert not (FUNCTIONS / function / "requirements.txt").exists()
