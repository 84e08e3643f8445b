"""Refuse a deploy that would fail half-way, saying what to do (`make deploy` runs it before `sam build`):

    python -m deploy.preflight --stack-name dms-iceberg-lake [--config-env default] [--parameter-overrides "K=V …"]
        [--schema-file schema.json] [--checks names,leftovers,…]

The checks (`--checks`, all by default), each failure printed with its fix:
- `values`: every parameter value is one CloudFormation accepts by the template's own rules (AllowedValues,
  AllowedPattern, Min/MaxLength, Min/MaxValue), said before a build rather than by a failed change set.
- `required`: a first create has what it cannot do without (CreateDmsTask=true, the default: the replication
  instance and the source endpoint; false: the task; and, from `make deploy`, the schema file).
- `names`: every name the template gives a resource (computed for the environment, account and region) fits the
  service's limit: an EnvironmentName of 21 characters makes `<env>-athena-results-<account>-<region>` 64
  characters in a 14-character region, over S3's 63.
- `leftovers`: a stack whose first create failed (ROLLBACK_COMPLETE) must be deleted; the buckets, queues, log
  groups and Glue databases a deleted or rolled-back stack kept (DeletionPolicy Retain) would collide with this
  create.
- `emr-quota`: with SparkEngine=emr-serverless, the account's EMR Serverless vCPU quota (Service Quotas) holds
  EmrMaximumVcpu.
- `dms`: CreateDmsTask=true needs the account's DMS roles (dms-vpc-role, and dms-cloudwatch-logs-role for the
  task's log) and a file cadence within DmsSettleSeconds; CreateDmsTask=false needs the task to write to this stack's raw bucket (its name is known before
  the stack exists).
- `network`: with ReconcileSubnetId, the reconcile reaches S3, Glue, Secrets Manager, CloudWatch (and DMS with
  RepairMode=reload) from that subnet: through a NAT gateway or VPC endpoints.
- `lake-formation`: EnableLakeFormation=true needs the principal that deploys (the caller, or `--role-arn`,
  CloudFormation's service role) to be a Lake Formation data lake administrator: the stack registers the
  warehouses and grants permissions, which only an administrator may do.
- `quicksight`: EnableQuickSight=true needs QuickSight's service role (`aws-quicksight-service-role-v0`) allowed
  Athena and the workgroup's results bucket (`<env>-athena-results-<account>-<region>`, read and write).

No CloudFormation Rule can see any of this (Rules compare parameter values only), so the checks run here, with
the deploying credentials, before anything is created. The parameters are those `sam deploy` would use: the
template's defaults, the stack's current values, samconfig.toml's `parameter_overrides` of the config env, then
`--parameter-overrides`. Exit 0 with nothing to say when all pass; exit 2 with what to do otherwise.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from deploy import glue_artifacts, parameter_rules, preflight_checks, stack_names
from deploy.preflight_checks import Target

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STACK = "dms-iceberg-lake"
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
def describe_stack(cloudformation: Any, stack_name: str) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    try:
        return dict(cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0])
    except ClientError as error:
        if "does not exist" in str(error):
            return None
        raise


def stack_parameters(stack: Mapping[str, Any] | None) -> dict[str, str]:
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in (stack or {}).get("Parameters", [])}


def configured_overrides(samconfig: Path, config_env: str) -> dict[str, str]:
    return samconfig_overrides(samconfig.read_text(), config_env) if samconfig.is_file() else {}


def configured_stack_name(samconfig: Path, config_env: str) -> str:
    """The stack name of a samconfig.toml environment (deploy, then global parameters), else the default."""
    document = tomllib.loads(samconfig.read_text()) if samconfig.is_file() else {}
    section = document.get(config_env, {})
    for command in ("deploy", "global"):
        if name := section.get(command, {}).get("parameters", {}).get("stack_name"):
            return str(name)
    return DEFAULT_STACK


def effective_parameters(stack: Mapping[str, Any] | None, overrides: Mapping[str, str]) -> dict[str, str]:
    """What the stack will be deployed with: the template's defaults, its current values, then the overrides."""
    return stack_names.parameter_defaults() | stack_parameters(stack) | dict(overrides)


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


def _lake_formation(session: Any, target: Target) -> list[str]:
    if not target.on("EnableLakeFormation"):
        return []
    principal = target.role_arn or target.caller_arn
    return lake_formation_problems(principal, lake_administrators(session.client("lakeformation")))


def _quicksight(session: Any, target: Target) -> list[str]:
    if not target.on("EnableQuickSight"):
        return []
    partition = target.caller_arn.split(":")[1]
    bucket = results_bucket(target.parameters.get("EnvironmentName", "dev"), target.account, target.region)
    role = f"arn:{partition}:iam::{target.account}:role/service-role/{QUICKSIGHT_SERVICE_ROLE}"
    decisions = quicksight_decisions(session.client("iam"), role, f"arn:{partition}:s3:::{bucket}")
    return quicksight_problems(decisions, role, bucket)


def _leftovers(session: Any, target: Target) -> list[str]:
    dead = preflight_checks.dead_stack_problems(target)
    return dead + preflight_checks.leftover_problems(
        target, preflight_checks.existing_leftovers(session, target)
    )


def _network(session: Any, target: Target) -> list[str]:
    return preflight_checks.network_problems(target, preflight_checks.missing_endpoints(session, target))


def _emr_quota(session: Any, target: Target) -> list[str]:
    if target.parameters.get("SparkEngine") != "emr-serverless":
        return []
    return preflight_checks.emr_quota_problems(target, preflight_checks.emr_serverless_vcpu_quota(session))


def _dms(session: Any, target: Target) -> list[str]:
    found = preflight_checks.cadence_problems(target)
    found += preflight_checks.dms_role_problems(target, preflight_checks.missing_dms_roles(session, target))
    if not target.on("CreateDmsTask") and target.parameters.get("DmsReplicationTaskArn"):
        task_target = preflight_checks.task_s3_target(session, target.parameters["DmsReplicationTaskArn"])
        found += preflight_checks.own_task_problems(target, task_target)
    return found


def _values(_session: Any, target: Target) -> list[str]:
    # `pinned` is a word to the release, which passes the published jar's key instead
    sent = {
        name: value
        for name, value in target.parameters.items()
        if (name, value) != ("IcebergJarKey", glue_artifacts.PINNED_ICEBERG)
    }
    return [
        f"{refusal}: CloudFormation refuses it before creating anything; change it in --parameter-overrides "
        "or samconfig.toml (docs/DEPLOY.md, Parameters)"
        for refusal in parameter_rules.refused(sent, parameter_rules.declarations())
    ]


CHECKS: dict[str, Callable[[Any, Target], list[str]]] = {
    "values": _values,
    "required": lambda _session, target: preflight_checks.required_problems(target),
    "names": lambda _session, target: preflight_checks.name_problems(target),
    "leftovers": _leftovers,
    "emr-quota": _emr_quota,
    "network": _network,
    "dms": _dms,
    "lake-formation": _lake_formation,
    "quicksight": _quicksight,
}


def target_of(
    session: Any,
    stack_name: str,
    overrides: Mapping[str, str],
    role_arn: str | None = None,
    schema_file: Path | None = None,
    schema_required: bool = False,
) -> Target:
    stack = describe_stack(session.client("cloudformation"), stack_name)
    identity = session.client("sts").get_caller_identity()
    return Target(
        stack_name=stack_name,
        parameters=effective_parameters(stack, overrides),
        stack=stack,
        account=identity["Account"],
        region=session.region_name,
        caller_arn=identity["Arn"],
        role_arn=role_arn,
        schema_file=schema_file,
        schema_required=schema_required,
    )


def problems(session: Any, target: Target, checks: Iterable[str] = tuple(CHECKS)) -> list[str]:
    """What every check named in `checks` finds, in their order."""
    found: list[str] = []
    for name in checks:
        found += CHECKS[name](session, target)
    return found


def main(argv: Sequence[str] | None = None, session: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack-name", help="default: the config env's stack_name in samconfig.toml")
    parser.add_argument(
        "--config-env", default="default", help="the samconfig.toml environment sam deploy uses"
    )
    parser.add_argument("--samconfig", type=Path, default=REPO / "samconfig.toml")
    parser.add_argument("--parameter-overrides", default="", help="as sam deploy takes them: Key=Value …")
    parser.add_argument("--role-arn", help="CloudFormation's service role, when sam deploy is given one")
    parser.add_argument("--schema-file", type=Path, help="the schema file the deploy publishes")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma list of {', '.join(CHECKS)}")
    args = parser.parse_args(argv)
    checks = [c for c in args.checks.split(",") if c]
    if unknown := set(checks) - set(CHECKS):
        parser.error(f"unknown checks: {', '.join(sorted(unknown))}")
    if session is None:
        import boto3

        session = boto3.Session()
    overrides = configured_overrides(args.samconfig, args.config_env) | parse_overrides(
        args.parameter_overrides
    )
    stack_name = args.stack_name or configured_stack_name(args.samconfig, args.config_env)
    target = target_of(session, stack_name, overrides, args.role_arn, args.schema_file)
    found = problems(session, target, checks)
    for problem in found:
        print(f"preflight: {problem}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
