"""The contracts the Lambdas share are defined once (functions/shared/lake_contracts) and built into
every function as the layer LakeContractsLayer; no function keeps a copy of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.unit.functions.conftest import FUNCTIONS, REPO
from tools.emr_serverless_asl import load_template

SHARED = FUNCTIONS / "shared"
CONTRACTS = SHARED / "lake_contracts"
FUNCTION_FOLDERS = sorted(p for p in FUNCTIONS.iterdir() if (p / "app.py").exists())
# What the shared package defines; a function defining one of these itself holds a copy.
SHARED_DEFINITIONS = {
    node.name
    for source in CONTRACTS.glob("*.py")
    for node in ast.parse(source.read_text()).body
    if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
} | {
    "MISSING",
    "CONFLICT",
    "LOST_RACE",
    "RUN_ID_PATTERN",
    "LOAD_FILE",
    "CDC_FILE",
    "DATE_FOLDER",
    "TABLE_NAME",
}


@pytest.fixture(scope="module")
def template() -> dict:
    return load_template(REPO / "template.yaml")


def test_every_function_gets_the_contracts_layer_built_from_the_shared_folder(template):
    """Given the template, Then the contracts layer is built by `sam build` from functions/shared (BuildMethod
    python3.11, which puts it under python/ on the function's path), the libraries layer from
    functions/libraries/requirements.txt, and every function has both."""
    resources = template["Resources"]
    layer = resources["LakeContractsLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Metadata"]["BuildMethod"] == "python3.11"
    assert (REPO / layer["Properties"]["ContentUri"]).resolve() == SHARED.resolve()
    runtime = template["Globals"]["Function"]["Runtime"]
    assert runtime in layer["Properties"]["CompatibleRuntimes"]
    functions = {n: r for n, r in resources.items() if r["Type"] == "AWS::Serverless::Function"}
    assert len(functions) == len(FUNCTION_FOLDERS)
    libraries = resources["LakeLibrariesLayer"]
    assert libraries["Metadata"]["BuildMethod"] == "python3.11"
    assert (REPO / libraries["Properties"]["ContentUri"]).resolve() == (FUNCTIONS / "libraries").resolve()
    assert runtime in libraries["Properties"]["CompatibleRuntimes"]
    for name, function in functions.items():
        layers = function["Properties"].get("Layers", template["Globals"]["Function"].get("Layers", []))
        assert {"Ref": "LakeContractsLayer"} in layers, name
        assert {"Ref": "LakeLibrariesLayer"} in layers, name


@pytest.mark.parametrize("folder", FUNCTION_FOLDERS, ids=lambda p: p.name)
def test_a_function_imports_only_contracts_that_exist_and_keeps_no_copy_of_them(folder: Path):
    """Given a function's code, Then every `lake_contracts` name it imports is defined there, it has no
    `lake_contracts` of its own (which would shadow the layer's), and it defines none of the shared names
    itself (the copies the layer replaced: error codes, the conditional delete, name encoding, the manifest...)."""
    assert not (folder / "lake_contracts").exists()
    for source in sorted(folder.glob("*.py")):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lake_contracts"):
                module = CONTRACTS / f"{node.module.removeprefix('lake_contracts.')}.py"
                assert module.exists(), f"{source}: {node.module}"
                defined = {n.id for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.Name)}
                defined |= {
                    n.name
                    for n in ast.parse(module.read_text()).body
                    if isinstance(n, ast.FunctionDef | ast.ClassDef)
                }
                defined |= set(re.findall(r"^from \S+ import .*?(\w+)$", module.read_text(), re.M))
                for alias in node.names:
                    assert alias.name in defined, f"{source}: {node.module}.{alias.name}"
        own = {
            target.id
            for node in tree.body
            for target in (
                node.targets
                if isinstance(node, ast.Assign)
                else [node]
                if isinstance(node, ast.FunctionDef | ast.ClassDef)
                else []
            )
            if isinstance(target, ast.Name)
        } | {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
        assert own & SHARED_DEFINITIONS == set(), source
        assert '"NoSuchKey"' not in source.read_text(), f"{source} spells S3's error codes itself"
