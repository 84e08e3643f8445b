"""deploy.preflight: a deploy with EnableLakeFormation or EnableQuickSight whose
prerequisites are missing is refused before anything is created, saying what to do (the other checks:
tests/unit/deploy/test_preflight_checks.py)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from deploy import preflight

ACCOUNT = "123456789012"
CALLER = f"arn:aws:sts::{ACCOUNT}:assumed-role/Deployer/alice"
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/Deployer"
QUICKSIGHT_ROLE = f"arn:aws:iam::{ACCOUNT}:role/service-role/aws-quicksight-service-role-v0"
BUCKET = f"prod-athena-results-{ACCOUNT}-eu-west-1"


class Session:
    """A boto3 session whose clients answer what the test stubbed (Stubber: unexpected calls fail)."""

    region_name = "eu-west-1"

    def __init__(self) -> None:
        self.clients: dict[str, Any] = {}
        self.stubs: dict[str, Stubber] = {}

    def client(self, name: str) -> Any:
        if name not in self.clients:
            client = boto3.client(
                name, region_name=self.region_name, aws_access_key_id="x", aws_secret_access_key="x"
            )
            self.clients[name], self.stubs[name] = client, Stubber(client)
            self.stubs[name].activate()
        return self.clients[name]

    def stub(self, name: str) -> Stubber:
        self.client(name)
        return self.stubs[name]


def _session(stack_parameters: dict[str, str] | None, admins: list[str] | None, decisions=None) -> Session:
    session = Session()
    if stack_parameters is None:
        session.stub("cloudformation").add_client_error(
            "describe_stacks", "ValidationError", "Stack with id lake does not exist"
        )
    else:
        parameters = [{"ParameterKey": k, "ParameterValue": v} for k, v in stack_parameters.items()]
        session.stub("cloudformation").add_response(
            "describe_stacks",
            {
                "Stacks": [
                    {
                        "StackName": "lake",
                        "CreationTime": "2026-01-01T00:00:00Z",
                        "StackStatus": "UPDATE_COMPLETE",
                        "Parameters": parameters,
                    }
                ]
            },
        )
    session.stub("sts").add_response(
        "get_caller_identity", {"UserId": "AROA:alice", "Account": ACCOUNT, "Arn": CALLER}
    )
    if admins is not None:
        session.stub("lakeformation").add_response(
            "get_data_lake_settings",
            {"DataLakeSettings": {"DataLakeAdmins": [{"DataLakePrincipalIdentifier": a} for a in admins]}},
        )
    if decisions is not None:
        for actions in (
            preflight.ATHENA_ACTIONS,
            preflight.RESULTS_BUCKET_ACTIONS,
            preflight.RESULTS_OBJECT_ACTIONS,
        ):
            session.stub("iam").add_response(
                "simulate_principal_policy",
                {
                    "EvaluationResults": [
                        {"EvalActionName": a, "EvalDecision": decisions.get(a, "allowed")} for a in actions
                    ]
                },
            )
    return session


def _run(session: Session, tmp_path, samconfig: str = "", overrides: str = "") -> int:
    config = tmp_path / "samconfig.toml"
    config.write_text(samconfig)
    code = preflight.main(
        [
            *("--stack-name", "lake", "--samconfig", str(config), "--parameter-overrides", overrides),
            *("--checks", "lake-formation,quicksight"),  # the account checks: tests/unit/deploy
        ],
        session=session,
    )
    for stub in session.stubs.values():
        stub.assert_no_pending_responses()
    return code


def test_nothing_optional_nothing_to_check(tmp_path, capsys):
    assert _run(_session(None, None), tmp_path) == 0
    assert capsys.readouterr().err == ""


def test_lake_formation_without_being_its_administrator_is_refused_before_the_deploy(tmp_path, capsys):
    """Given EnableLakeFormation=true in samconfig.toml and a deploying role no administrator, Then exit 2 saying
    which principal to make an administrator and how."""
    samconfig = (
        '[default.deploy.parameters]\nparameter_overrides = "EnableLakeFormation=true EnvironmentName=prod"\n'
    )
    session = _session(None, [f"arn:aws:iam::{ACCOUNT}:role/Admin"])
    assert _run(session, tmp_path, samconfig) == 2
    error = capsys.readouterr().err
    assert f"{DEPLOYER} is not a Lake Formation data lake administrator" in error
    assert "put-data-lake-settings" in error


def test_lake_formation_with_the_deploying_role_an_administrator_passes(tmp_path, capsys):
    session = _session({"EnableLakeFormation": "true"}, [DEPLOYER])
    assert _run(session, tmp_path) == 0
    assert capsys.readouterr().err == ""


def test_the_overrides_win_over_the_stack_and_samconfig(tmp_path):
    """Given the stack and samconfig with EnableLakeFormation=true, When the command line turns it off, Then
    nothing is checked (the stub would fail on an unexpected Lake Formation call)."""
    samconfig = '[default.deploy.parameters]\nparameter_overrides = ["EnableLakeFormation=true"]\n'
    session = _session({"EnableLakeFormation": "true"}, None)
    assert _run(session, tmp_path, samconfig, overrides="EnableLakeFormation=false") == 0


def test_quicksight_without_access_to_the_results_bucket_is_refused(tmp_path, capsys):
    session = _session(
        {"EnableQuickSight": "true", "EnvironmentName": "prod"},
        None,
        decisions={"s3:PutObject": "implicitDeny"},
    )
    assert _run(session, tmp_path) == 2
    error = capsys.readouterr().err
    assert f"s3:PutObject on arn:aws:s3:::{BUCKET}/*" in error
    assert QUICKSIGHT_ROLE in error and f"results bucket {BUCKET}" in error


def test_quicksight_allowed_athena_and_the_results_bucket_passes(tmp_path, capsys):
    session = _session({"EnableQuickSight": "true", "EnvironmentName": "prod"}, None, decisions={})
    assert _run(session, tmp_path) == 0
    assert capsys.readouterr().err == ""


def test_quicksight_not_set_up_is_refused(tmp_path, capsys):
    session = _session({"EnableQuickSight": "true"}, None)
    session.stub("iam").add_client_error("simulate_principal_policy", "NoSuchEntity", "no role")
    assert _run(session, tmp_path) == 2
    assert "sign up for QuickSight" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arn", "principal"),
    [
        (CALLER, DEPLOYER),
        (f"arn:aws:iam::{ACCOUNT}:user/bob", f"arn:aws:iam::{ACCOUNT}:user/bob"),
        (f"arn:aws-cn:sts::{ACCOUNT}:assumed-role/R/s", f"arn:aws-cn:iam::{ACCOUNT}:role/R"),
    ],
)
def test_a_caller_is_known_to_lake_formation_by_its_iam_arn(arn, principal):
    assert preflight.iam_principal(arn) == principal


def test_overrides_are_parsed_as_sam_takes_them():
    assert preflight.parse_overrides('A=1 B="two words" C=') == {"A": "1", "B": "two words", "C": ""}
    with pytest.raises(ValueError):
        preflight.parse_overrides("A")
