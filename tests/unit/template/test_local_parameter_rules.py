"""The local AWS refuses the parameter values CloudFormation refuses (localaws/sam_app.refused_parameters): LocalStack
checks no AllowedPattern, AllowedValues or MinValue, so without this a test could deploy, and pass with, a
setting no user can deploy on AWS."""

from __future__ import annotations

from typing import Any

import pytest

from localaws import sam_app


@pytest.fixture(scope="module")
def declared() -> dict[str, dict[str, Any]]:
    return sam_app.template_parameter_declarations()


def test_the_templates_defaults_and_every_samconfig_environment_are_accepted(
    template: dict[str, Any], declared: dict[str, dict[str, Any]]
) -> None:
    """Given the template's own defaults (CloudFormation checks them too) and the parameter overrides of the
    samconfig's environments, Then none is refused: the checker refuses only what AWS refuses."""
    defaults = {
        name: value for name, value in sam_app.template_parameter_defaults().items() if value is not None
    }

    assert set(declared) == set(template["Parameters"])
    assert sam_app.refused_parameters(defaults, declared) == []
    for environment in ("default", "local", "prod"):
        overrides = sam_app.samconfig_parameters(environment)
        assert overrides, environment
        assert sam_app.refused_parameters(overrides, declared) == [], environment


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("ReconcileEveryMinutes", "1e3", "does not match"),  # AllowedPattern, whole value
        ("ReconcileEveryMinutes", "0.125", "does not match"),
        ("RepairMode", "fix", "not one of"),  # AllowedValues
        ("RawAuditGraceMinutes", "0.5", "outside 1..None"),  # Number below MinValue
        ("RawAuditGraceMinutes", "soon", "not a number"),
        ("RawAuditGraceMinutes", "nan", "not a number"),
    ],
)
def test_a_value_cloudformation_refuses_is_refused_with_its_reason(
    declared: dict[str, dict[str, Any]], name: str, value: str, why: str
) -> None:
    """Given one value outside its parameter's declared rule among accepted ones, Then exactly that parameter
    is refused, and the reason names the rule."""
    values = {"ReconcileEveryMinutes": "0.5", "RepairMode": "reload", "RawAuditGraceMinutes": "1"} | {
        name: value
    }

    refusals = sam_app.refused_parameters(values, declared)

    assert len(refusals) == 1 and refusals[0].startswith(f"{name}={value!r}: {why}"), refusals


def test_a_name_the_template_does_not_declare_is_left_to_sam_deploy_which_drops_it(
    declared: dict[str, dict[str, Any]],
) -> None:
    """Given an override the template does not declare (an older template), Then it is no refusal: `sam
    deploy` sends CloudFormation only the template's parameters."""
    assert sam_app.refused_parameters({"NotAParameter": "x"}, declared) == []
