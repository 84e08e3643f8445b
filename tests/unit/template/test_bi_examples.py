"""The BI examples (the Athena named queries of bi/queries, the QuickSight dataset) read the example models'
refined tables: the stack creates them only where those models are deployed (ExampleModels, which make deploy
sets from the models folder), so a stack of a user's own models holds no query naming a table it lacks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from deploy import glue_artifacts
from tools.bi import load_queries, refined_tables_read

QUICKSIGHT_DATASET = "QuickSightDailyRevenueDataSet"


def _holds(template: dict[str, Any], node: Any, parameters: dict[str, str]) -> Any:
    """A condition (or one of its terms) of the template, evaluated with `parameters` over the defaults."""
    if isinstance(node, dict):
        [(function, argument)] = node.items()
        if function == "Ref":
            return parameters.get(argument, template["Parameters"][argument].get("Default"))
        if function == "Condition":
            return _holds(template, template["Conditions"][argument], parameters)
        if function == "Fn::Equals":
            left, right = (_holds(template, a, parameters) for a in argument)
            return left == right
        if function == "Fn::And":
            return all(_holds(template, a, parameters) for a in argument)
        if function == "Fn::Not":
            return not _holds(template, argument[0], parameters)
        raise AssertionError(f"no evaluation for {function}")
    return node


def _created(template: dict[str, Any], logical_id: str, parameters: dict[str, str]) -> bool:
    condition = template["Resources"][logical_id].get("Condition")
    return condition is None or _holds(template, {"Condition": condition}, parameters)


def _named_queries_of_the_refined_zone(template: dict[str, Any]) -> dict[str, str]:
    """Each Athena named query on the refined database, with its SQL."""
    return {
        logical_id: resource["Properties"]["QueryString"]["Fn::Sub"][0]
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Athena::NamedQuery"
        and resource["Properties"]["Database"] == {"Ref": "RefinedDatabase"}
    }


QUICKSIGHT = {"EnableQuickSight": "true", "QuickSightPrincipalArn": "arn:aws:quicksight:eu-west-1:1:user/a/b"}


@pytest.mark.parametrize(
    ("parameters", "examples_created"),
    [
        ({}, True),  # the defaults: the checkout's folder, the examples
        ({"ExampleModels": "false"}, False),  # a user's own models
        ({"HasRefineModels": "false"}, False),  # no model at all
    ],
)
def test_the_bi_examples_exist_only_with_the_example_models(
    template: dict[str, Any], parameters: dict[str, str], examples_created: bool
) -> None:
    """Given the template with QuickSight on, When the example models are deployed (or a user's own, or none),
    Then every named query of the refined zone and the QuickSight dataset are created with the examples and
    only then; the QuickSight data source (the refined zone through Athena, any models) and the workgroup
    are created either way."""
    with_quicksight = parameters | QUICKSIGHT
    queries = _named_queries_of_the_refined_zone(template)

    assert len(queries) == len(load_queries()) >= 4
    assert {q: _created(template, q, with_quicksight) for q in queries} == dict.fromkeys(
        queries, examples_created
    )
    assert _created(template, QUICKSIGHT_DATASET, with_quicksight) is examples_created
    assert _created(template, "QuickSightDataSource", with_quicksight)
    assert _created(template, "AthenaWorkGroup", with_quicksight)
    assert not _created(template, QUICKSIGHT_DATASET, parameters)  # QuickSight off


def test_the_bi_examples_read_the_example_models_tables_and_nothing_else(template: dict[str, Any]) -> None:
    """Given the named queries (template and bi/queries), the QuickSight dataset and the example models, Then
    every table they read is an example model of the checkout's folder, and each example model is read."""
    resources = template["Resources"]
    in_template = {
        table
        for sql in _named_queries_of_the_refined_zone(template).values()
        for table in re.findall(r"\$\{refined_db\}\.([a-z_][a-z0-9_]*)", sql)
    }
    in_files = {table for query in load_queries().values() for table in refined_tables_read(query)}
    dataset = resources[QUICKSIGHT_DATASET]["Properties"]["PhysicalTableMap"]["daily"]["RelationalTable"]

    assert in_template == in_files == set(glue_artifacts.EXAMPLE_MODELS)
    assert dataset["Name"] in glue_artifacts.EXAMPLE_MODELS
    assert set(glue_artifacts.EXAMPLE_MODELS) <= {p.stem for p in glue_artifacts.model_files()}
    assert template["Parameters"]["ExampleModels"]["Default"] == "true"


def test_make_deploy_says_whether_the_example_models_are_deployed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given the checkout's models folder, When a release is made, Then ExampleModels is true; Given a folder of
    a user's own models (one example kept, another model added), Then it is false and HasRefineModels true."""
    assert glue_artifacts.release().parameters["ExampleModels"] == "true"

    (tmp_path / "sales_enriched.sql").write_text("SELECT 1 AS one FROM {{ source('web_sales') }}")
    (tmp_path / "orders_by_day.sql").write_text("SELECT 1 AS one FROM {{ source('orders') }}")
    monkeypatch.setattr(glue_artifacts, "MODELS", tmp_path)
    own = glue_artifacts.release().parameters

    assert (own["HasRefineModels"], own["ExampleModels"]) == ("true", "false")
