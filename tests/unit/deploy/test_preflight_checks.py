"""deploy.preflight's checks of a first create and of the account: each failure names its fix."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from deploy import preflight, preflight_checks, stack_names
from deploy.preflight_checks import Target
from tests.offline_aws import offline_aws

ACCOUNT = "123456789012"
REGION = "eu-west-1"
TASK = f"arn:aws:dms:{REGION}:{ACCOUNT}:task:MYTASK"


def _target(stack: dict[str, Any] | None = None, region: str = REGION, **parameters: str) -> Target:
    return Target(
        stack_name="lake",
        parameters=stack_names.parameter_defaults() | parameters,
        stack=stack,
        account=ACCOUNT,
        region=region,
        caller_arn=f"arn:aws:iam::{ACCOUNT}:user/alice",
    )


def test_every_named_resource_is_computed_and_a_long_environment_name_is_refused_with_the_room_left() -> None:
    """Given EnvironmentName of 21 characters (the pattern's most) in ap-southeast-4 (14 characters), Then the
    Athena results bucket's name is 64 characters and the check says so and how long a name fits (20); with 20
    characters every name the template gives (the six buckets among them) fits."""
    long = _target(region="ap-southeast-4", EnvironmentName="a" * 21)
    buckets = sorted(r.logical_id for r in long.names() if r.type == "AWS::S3::Bucket")
    assert buckets == sorted(
        [
            "AccessLogsBucket",
            "RawBucket",
            "CleanBucket",
            "RefinedBucket",
            "ArtifactsBucket",
            "AthenaResultsBucket",
        ]
    )
    assert len({r.logical_id for r in long.names()}) > 60  # queues, jobs, functions, log groups, alarms, …

    problems = preflight_checks.name_problems(long)

    assert len(problems) == 1
    assert f"'{'a' * 21}-athena-results-{ACCOUNT}-ap-southeast-4' 64 characters" in problems[0]
    assert "at most 20 characters" in problems[0]
    assert preflight_checks.name_problems(_target(region="ap-southeast-4", EnvironmentName="a" * 20)) == []


def test_a_lambda_log_group_is_named_after_its_function() -> None:
    names = {r.logical_id: r.name for r in _target(EnvironmentName="prod").names()}
    assert names["QueueDrainLogGroup"] == "/aws/lambda/prod-queue-drain"
    assert names["AthenaWorkGroup"] == "lake-bi"


def test_what_a_failed_first_create_kept_is_listed_with_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given no stack, and a bucket, a queue, a log group and a Glue database under this environment's names
    (kept by a rolled-back create), Then the leftovers check lists those four, and nothing else, with the fix."""
    with offline_aws(monkeypatch, region=REGION):
        boto3.client("s3").create_bucket(
            Bucket=f"dev-raw-{ACCOUNT}-{REGION}", CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        boto3.client("sqs").create_queue(QueueName="dev-cdc-files.fifo", Attributes={"FifoQueue": "true"})
        boto3.client("logs").create_log_group(logGroupName="/aws-glue/jobs/dev-lake/error")
        boto3.client("glue").create_database(DatabaseInput={"Name": "dev_clean"})
        boto3.client("glue").create_database(DatabaseInput={"Name": "other_clean"})
        target = _target()

        problems = preflight.problems(boto3.Session(region_name=REGION), target, ["leftovers"])

    assert len(problems) == 1
    listed = problems[0].split("these exist and the create would fail on them: ")[1].split(". Delete")[0]
    assert listed.split("; ") == [
        f"AWS::S3::Bucket dev-raw-{ACCOUNT}-{REGION}",
        "AWS::SQS::Queue dev-cdc-files.fifo",
        "AWS::Glue::Database dev_clean",
        "AWS::Logs::LogGroup /aws-glue/jobs/dev-lake/error",
    ]
    assert "another EnvironmentName" in problems[0] and "Tear down" in problems[0]


def test_the_stacks_own_retained_resources_are_no_leftovers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a stack that owns its raw bucket and queue, Then an update finds no leftover."""
    with offline_aws(monkeypatch, region=REGION):
        template = {
            "Resources": {
                "RawBucket": {
                    "Type": "AWS::S3::Bucket",
                    "Properties": {"BucketName": f"dev-raw-{ACCOUNT}-{REGION}"},
                },
                "Queue": {
                    "Type": "AWS::SQS::Queue",
                    "Properties": {"QueueName": "dev-cdc-files-undelivered"},
                },
            }
        }
        cloudformation = boto3.client("cloudformation")
        cloudformation.create_stack(StackName="lake", TemplateBody=json.dumps(template))
        stack = preflight.describe_stack(cloudformation, "lake")
        assert preflight.problems(boto3.Session(region_name=REGION), _target(stack), ["leftovers"]) == []


def test_a_stack_whose_first_create_rolled_back_must_be_deleted_first() -> None:
    problems = preflight_checks.dead_stack_problems(_target({"StackStatus": "ROLLBACK_COMPLETE"}))
    assert len(problems) == 1 and "sam delete --stack-name lake" in problems[0]
    assert preflight_checks.dead_stack_problems(_target({"StackStatus": "UPDATE_COMPLETE"})) == []


class _Session:
    region_name = REGION

    def __init__(self, client: Any) -> None:
        self._client = client

    def client(self, name: str) -> Any:
        assert name == "service-quotas"
        return self._client


@pytest.mark.parametrize(("quota", "expected_fix"), [(16.0, "EmrMaximumVcpu=16"), (64.0, None)])
def test_the_emr_serverless_vcpu_quota_must_hold_the_configured_maximum(
    quota: float, expected_fix: str | None
):
    """Given SparkEngine=emr-serverless with the default EmrMaximumVcpu 64 and the account's quota (Service
    Quotas, applied value), Then a quota of 16 (a new account's) is refused with the increase request and the
    lower setting that fits; 64 passes."""
    client = boto3.client(
        "service-quotas", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    stub.add_response(
        "list_service_quotas",
        {"Quotas": [{"QuotaName": preflight_checks.EMR_SERVERLESS_VCPU_QUOTA, "Value": quota}]},
        {"ServiceCode": "emr-serverless"},
    )
    with stub:
        problems = preflight.problems(_Session(client), _target(SparkEngine="emr-serverless"), ["emr-quota"])
    if expected_fix is None:
        assert problems == []
    else:
        assert (
            len(problems) == 1
            and expected_fix in problems[0]
            and "request-service-quota-increase" in problems[0]
        )


def test_the_stack_creates_the_dms_task_only_in_an_account_with_the_dms_roles(
    monkeypatch: pytest.MonkeyPatch,
):
    """Given CreateDmsTask=true (the default) with the task's CloudWatch log on, and an account without DMS's
    roles, Then both are named with the commands that create them."""
    with offline_aws(monkeypatch, region=REGION):
        problems = preflight.problems(
            boto3.Session(region_name=REGION), _target(DmsTaskLogging="true"), ["dms"]
        )
    assert [p.split(":")[0] for p in problems] == [
        "the account has no IAM role dms-vpc-role",
        "the account has no IAM role dms-cloudwatch-logs-role",
    ]
    assert "AmazonDMSCloudWatchLogsRole" in problems[1] and "DmsTaskLogging=false" in problems[1]


def test_an_own_task_must_write_to_the_raw_bucket_this_stack_creates() -> None:
    """Given CreateDmsTask=false and a task whose endpoint writes elsewhere, Then the check names the stack's raw
    bucket (known before the stack exists) and the endpoint to modify, or CreateDmsTask=true; a task writing
    there passes."""
    target = _target(CreateDmsTask="false", DmsReplicationTaskArn=TASK)
    endpoint = f"arn:aws:dms:{REGION}:{ACCOUNT}:endpoint:TARGET"
    elsewhere = {"BucketName": "old-bucket", "BucketFolder": "cdc", "EndpointArn": endpoint}
    problems = preflight_checks.own_task_problems(target, elsewhere)
    assert len(problems) == 1
    assert f"BucketName=dev-raw-{ACCOUNT}-{REGION},BucketFolder=dms" in problems[0]
    assert f"--endpoint-arn {endpoint}" in problems[0] and "CreateDmsTask=true" in problems[0]
    there = {"BucketName": f"dev-raw-{ACCOUNT}-{REGION}", "BucketFolder": "dms", "EndpointArn": endpoint}
    assert preflight_checks.own_task_problems(target, there) == []
    assert "no such DMS task" in preflight_checks.own_task_problems(target, None)[0]


def test_a_first_create_names_the_parameters_it_cannot_do_without() -> None:
    """Given no stack: with CreateDmsTask=true (default) the instance and the source endpoint, with false the
    task; an update needs none of them again (sam deploy keeps the stack's values)."""
    create = preflight_checks.required_problems(_target())
    assert len(create) == 1 and "needs DmsReplicationInstanceArn, DmsSourceEndpointArn" in create[0]
    own = preflight_checks.required_problems(_target(CreateDmsTask="false"))
    assert "needs DmsReplicationTaskArn" in own[0]
    assert preflight_checks.required_problems(_target({"StackStatus": "UPDATE_COMPLETE"})) == []


def test_the_deploy_names_the_same_raw_bucket_as_the_template() -> None:
    assert preflight_checks.raw_bucket(_target(EnvironmentName="prod")) == f"prod-raw-{ACCOUNT}-{REGION}"


def test_a_reconcile_subnet_without_a_way_to_the_services_it_calls_is_refused(
    monkeypatch: pytest.MonkeyPatch,
):
    """Given ReconcileSubnetId in a VPC with an S3 gateway endpoint only and no NAT gateway, Then the check names
    the endpoints the reconcile still lacks (Glue, Secrets Manager, CloudWatch; DMS with RepairMode=reload);
    with a NAT gateway route, nothing."""
    with offline_aws(monkeypatch, region=REGION):
        ec2 = boto3.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
        ec2.create_vpc_endpoint(VpcId=vpc, ServiceName=f"com.amazonaws.{REGION}.s3", RouteTableIds=[table])
        session = boto3.Session(region_name=REGION)

        problems = preflight.problems(
            session, _target(ReconcileSubnetId=subnet, RepairMode="reload"), ["network"]
        )
        assert len(problems) == 1
        assert "no endpoint for glue, secretsmanager, monitoring, dms" in problems[0]

        nat = ec2.create_nat_gateway(SubnetId=subnet)["NatGateway"]["NatGatewayId"]
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
        assert preflight.problems(session, _target(ReconcileSubnetId=subnet), ["network"]) == []


def test_a_value_cloudformation_refuses_is_named_before_anything_is_built() -> None:
    """Given the template's defaults, Then the `values` check finds nothing; Given a reconcile cadence finer than
    the template's pattern (0.125 minutes) and a repair mode it does not list, Then it names both, with the rule
    each breaks and where to change it; `IcebergJarKey=pinned` is no refusal (the release sends a key instead)."""
    assert preflight.problems(None, _target(), ["values"]) == []
    assert preflight.problems(None, _target(IcebergJarKey="pinned"), ["values"]) == []  # the release's word

    found = preflight.problems(None, _target(ReconcileEveryMinutes="0.125", RepairMode="fix"), ["values"])

    assert [problem.split(":")[0] for problem in found] == [
        "ReconcileEveryMinutes='0.125'",
        "RepairMode='fix'",
    ]
    assert "does not match" in found[0] and "not one of" in found[1]
    assert all("--parameter-overrides" in problem for problem in found)
    assert next(iter(preflight.CHECKS)) == "values"
