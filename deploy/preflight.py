"""Refuse a deploy whose optional parts would fail half-way (`make deploy` runs it before `sam deploy`):

    python -m deploy.preflight --stack-name dms-iceberg-lake [--config-env default] [--parameter-overrides "K=V …"]

- `EnableLakeFormation=true`: the principal that deploys (the caller, or `--role-arn`, CloudFormation's service
  role) must be a Lake Formation data lake administrator: the stack registers the warehouses and grants
  permissions, which only an administrator may do. Without it CloudFormation fails at those resources, after
  the buckets, queues and databases exist, and rolls back, leaving the retained ones behind (whose names a new
  attempt then collides with).
- `EnableQuickSight=true`: QuickSight's service role (`aws-quicksight-service-role-v0`) must be allowed Athena
  and the workgroup's results bucket (`<env>-athena-results-<account>-<region>`, read and write), or the data
  source and the dataset fail to create.

No CloudFormation Rule can see either (Rules compare parameter values only), so the check runs here, with the
deploying credentials, before anything is created. The parameters are those `sam deploy` would use: the stack's
current values, then samconfig.toml's `parameter_overrides` of the config env, then `--parameter-overrides`.
Exit 0 with nothing to say when neither option is on; exit 2 with what to do otherwise.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
QUICKSIGHT_SERVICE_ROLE = "aws-quicksight-service-role-v0"
ATHENA_ACTIONS = ("athena:StartQueryExecution", "athena:GetQueryExecution", "athena:GetQueryResults")
RESULTS_BUCKET_ACTIONS = ("s3:GetBucketLocation", "s3:ListBucket")
RESULTS_OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject")


# ---------------------------------------------------------------- pure rules
def parse_overrides(text: str) -> dict[str, str]:
    """`sam deploy --parameter-overrides` text: `Key=Value Key2="a b"` (shell quoting)."""
    values = {}
    for item in shlex.split(text or ""):
        key, separator, value = item.partition("=")
        if not separator:
            raise ValueError(f"not Key=Value: {item!r}")
        values[key] = value
    return values


def samconfig_overrides(text: str, config_env: str) -> dict[str, str]:
    """`[<env>.deploy.parameters] parameter_overrides` of samconfig.toml (a string or a list of them)."""
    section = tomllib.loads(text).get(config_env, {}).get("deploy", {}).get("parameters", {})
    overrides = section.get("parameter_overrides", "")
    return parse_overrides(" ".join(overrides) if isinstance(overrides, list) else overrides)


def iam_principal(caller_arn: str) -> str:
    """The IAM ARN Lake Formation knows a caller by: an assumed role's session is its role."""
    match = re.fullmatch(r"arn:(aws[\w-]*):sts::(\d{12}):assumed-role/([^/]+)/.+", caller_arn)
    if match:
        return f"arn:{match[1]}:iam::{match[2]}:role/{match[3]}"
    return caller_arn


def lake_formation_problems(principal: str, administrators: Iterable[str]) -> list[str]:
    if iam_principal(principal) in {iam_principal(a) for a in administrators}:
        return []
    return [
        f"EnableLakeFormation=true: {iam_principal(principal)} is not a Lake Formation data lake administrator, "
        "and the stack's registrations and grants need one. Add it (Lake Formation console -> Administrative "
        "roles and tasks -> Data lake administrators, or aws lakeformation put-data-lake-settings, keeping the "
        "current administrators), or deploy with EnableLakeFormation=false."
    ]


def quicksight_problems(decisions: Mapping[str, str], role_arn: str, bucket: str) -> list[str]:
    """`decisions`: action (and resource) -> IAM's EvalDecision for QuickSight's service role."""
    denied = sorted(action for action, decision in decisions.items() if decision != "allowed")
    if not denied:
        return []
    return [
        f"EnableQuickSight=true: QuickSight's service role ({role_arn}) is not allowed {', '.join(denied)}. "
        "In QuickSight: Manage QuickSight -> Security & permissions -> AWS resources: allow Amazon Athena and "
        f"S3 access to the results bucket {bucket} with write permission for Athena Workgroup (the stack "
        "creates the bucket: allow its name, or deploy once with EnableQuickSight=false, grant, then enable)."
    ]


def results_bucket(environment: str, account: str, region: str) -> str:
    return f"{environment}-athena-results-{account}-{region}"  # template.yaml, AthenaResultsBucket


# ---------------------------------------------------------------- AWS
def stack_parameters(cloudformation: Any, stack_name: str) -> dict[str, str]:
    from botocore.exceptions import ClientError

    try:
        stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    except ClientError as error:
        if "does not exist" in str(error):
            return {}
        raise
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}


def lake_administrators(lakeformation: Any) -> list[str]:
    settings = lakeformation.get_data_lake_settings()["DataLakeSettings"]
    return [admin["DataLakePrincipalIdentifier"] for admin in settings.get("DataLakeAdmins", [])]


def quicksight_decisions(iam: Any, role_arn: str, bucket_arn: str) -> dict[str, str]:
    from botocore.exceptions import ClientError

    decisions: dict[str, str] = {}
    checks = (
        (ATHENA_ACTIONS, ["*"]),
        (RESULTS_BUCKET_ACTIONS, [bucket_arn]),
        (RESULTS_OBJECT_ACTIONS, [f"{bucket_arn}/*"]),
    )
    for actions, resources in checks:
        try:
            results = iam.simulate_principal_policy(
                PolicySourceArn=role_arn, ActionNames=list(actions), ResourceArns=resources
            )["EvaluationResults"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "NoSuchEntity":
                return {
                    "QuickSight itself (its service role does not exist: sign up for QuickSight)": "denied"
                }
            raise
        for result in results:
            decisions[f"{result['EvalActionName']} on {resources[0]}"] = result["EvalDecision"]
    return decisions


def problems(session: Any, parameters: Mapping[str, str], role_arn: str | None = None) -> list[str]:
    found: list[str] = []
    sts = session.client("sts")
    identity = sts.get_caller_identity()
    if parameters.get("EnableLakeFormation", "false") == "true":
        principal = role_arn or identity["Arn"]
        found += lake_formation_problems(principal, lake_administrators(session.client("lakeformation")))
    if parameters.get("EnableQuickSight", "false") == "true":
        account, region = identity["Account"], session.region_name
        partition = identity["Arn"].split(":")[1]
        bucket = results_bucket(parameters.get("EnvironmentName", "dev"), account, region)
        role = f"arn:{partition}:iam::{account}:role/service-role/{QUICKSIGHT_SERVICE_ROLE}"
        decisions = quicksight_decisions(session.client("iam"), role, f"arn:{partition}:s3:::{bucket}")
        found += quicksight_problems(decisions, role, bucket)
    return found


def main(argv: Sequence[str] | None = None, session: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack-name", default="dms-iceberg-lake")
    parser.add_argument(
        "--config-env", default="default", help="the samconfig.toml environment sam deploy uses"
    )
    parser.add_argument("--samconfig", type=Path, default=REPO / "samconfig.toml")
    parser.add_argument("--parameter-overrides", default="", help="as sam deploy takes them: Key=Value …")
    parser.add_argument("--role-arn", help="CloudFormation's service role, when sam deploy is given one")
    args = parser.parse_args(argv)
    if session is None:
        import boto3

        session = boto3.Session()
    parameters = stack_parameters(session.client("cloudformation"), args.stack_name)
    if args.samconfig.is_file():
        parameters |= samconfig_overrides(args.samconfig.read_text(), args.config_env)
    parameters |= parse_overrides(args.parameter_overrides)
    found = problems(session, parameters, args.role_arn)
    for problem in found:
        print(f"preflight: {problem}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
