"""The preflight's checks of a first create and of the account (deploy.preflight runs them): each returns what
would fail, with the fix, before anything is created. Pure rules first, then the AWS reads they need."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import stack_names

# A stack in one of these holds no resources but its name: sam deploy cannot update it.
DEAD_STACK_STATUSES = ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED")
DMS_LOGS_ROLE = "dms-cloudwatch-logs-role"
DMS_VPC_ROLE = "dms-vpc-role"
EMR_SERVERLESS_VCPU_QUOTA = "Max concurrent vCPUs per account"


@dataclass(frozen=True)
class Target:
    """What is deployed where: the parameters sam deploy will use (template defaults, the stack's current
    values, samconfig's and the command line's overrides), the stack as it is (None: not created yet)."""

    stack_name: str
    parameters: Mapping[str, str]
    stack: Mapping[str, Any] | None
    account: str
    region: str
    caller_arn: str
    role_arn: str | None = None
    schema_file: Path | None = None
    schema_required: bool = False

    @property
    def creates(self) -> bool:
        return self.stack is None

    def on(self, name: str) -> bool:
        return self.parameters.get(name, "false") == "true"

    def names(self) -> list[stack_names.NamedResource]:
        return stack_names.named_resources(self.parameters, self.account, self.region, self.stack_name)


# ---------------------------------------------------------------- pure rules
def required_problems(target: Target) -> list[str]:
    """What a first create cannot do without (every other parameter has a default)."""
    if not target.creates:
        return []
    p = target.parameters
    if target.on("CreateDmsTask"):
        missing = [n for n in ("DmsReplicationInstanceArn", "DmsSourceEndpointArn") if not p.get(n)]
        why = "the stack creates the DMS task (CreateDmsTask=true, the default) on your instance, from your source endpoint"
    else:
        missing = [] if p.get("DmsReplicationTaskArn") else ["DmsReplicationTaskArn"]
        why = "CreateDmsTask=false: the pipeline follows your own DMS task"
    found = []
    if missing:
        found.append(
            f'a first deploy needs {", ".join(missing)}: {why}. Pass them: make deploy PARAMS="'
            + " ".join(f"{n}=arn:aws:dms:…" for n in missing)
            + '" (docs/DEPLOY.md, "First deploy").'
        )
    if target.schema_required and target.schema_file is None:
        found.append(
            "a first deploy needs the schema file the jobs read: generate it from the source's catalog "
            "(python -m tools.schema_gen --url … --schema … --out schema.json) and pass SCHEMA_FILE=schema.json."
        )
    return found


def name_problems(target: Target) -> list[str]:
    found = []
    for resource in stack_names.too_long(target.names()):
        room = resource.limit - (len(resource.name) - len(target.parameters.get("EnvironmentName", "")))
        found.append(
            f"EnvironmentName={target.parameters.get('EnvironmentName')!r} makes {resource.logical_id}'s name "
            f"{resource.name!r} {len(resource.name)} characters in {target.region}, over the {resource.limit} "
            f"a {resource.type} may have: choose an EnvironmentName of at most {max(room, 0)} characters."
        )
    return found


def leftover_problems(target: Target, existing: Iterable[stack_names.NamedResource]) -> list[str]:
    existing = list(existing)
    if not existing:
        return []
    listed = "; ".join(f"{r.type} {r.name}" for r in existing)
    return [
        f"kept from an earlier stack with EnvironmentName={target.parameters.get('EnvironmentName')!r} (deleted "
        f"or rolled back; DeletionPolicy Retain), these exist and the create would fail on them: {listed}. "
        'Delete them if they hold nothing you need (docs/DEPLOY.md, "Tear down": buckets with their object '
        "versions, queues, log groups, Glue databases), or deploy with another EnvironmentName."
    ]


def dead_stack_problems(target: Target) -> list[str]:
    status = (target.stack or {}).get("StackStatus", "")
    if status not in DEAD_STACK_STATUSES:
        return []
    return [
        f"stack {target.stack_name} is {status} (its first create failed): it cannot be updated. Delete it "
        f"(sam delete --stack-name {target.stack_name}), then deploy again; the preflight then lists what the "
        "failed create kept."
    ]


def emr_quota_problems(target: Target, quota: float | None) -> list[str]:
    if target.parameters.get("SparkEngine") != "emr-serverless" or quota is None:
        return []
    wanted = int(target.parameters.get("EmrMaximumVcpu", "64"))
    if quota >= wanted:
        return []
    allowed = [v for v in (16, 32, 64, 128, 256, 512) if v <= quota]
    lower = f", or deploy with EmrMaximumVcpu={allowed[-1]}" if allowed else ""
    return [
        f"EmrMaximumVcpu={wanted} but this account's EMR Serverless quota ({EMR_SERVERLESS_VCPU_QUOTA}) in "
        f"{target.region} is {quota:g}: runs would wait for capacity they can never get. Ask for more "
        "(Service Quotas console -> Amazon EMR Serverless, or aws service-quotas request-service-quota-increase "
        f"--service-code emr-serverless --quota-code <its code> --desired-value {wanted}){lower}."
    ]


def dms_role_problems(target: Target, missing_roles: Iterable[str]) -> list[str]:
    found = []
    for role in missing_roles:
        policy = "AmazonDMSCloudWatchLogsRole" if role == DMS_LOGS_ROLE else "AmazonDMSVPCManagementRole"
        why = (
            "the task's CloudWatch log (DmsTaskLogging=true) needs it"
            if role == DMS_LOGS_ROLE
            else "DMS needs it for any replication instance"
        )
        found.append(
            f"the account has no IAM role {role}: {why}. Create it once per account: aws iam create-role "
            f'--role-name {role} --assume-role-policy-document \'{{"Version":"2012-10-17","Statement":'
            '[{"Effect":"Allow","Principal":{"Service":"dms.amazonaws.com"},"Action":"sts:AssumeRole"}]}\' '
            f"&& aws iam attach-role-policy --role-name {role} --policy-arn "
            f"arn:aws:iam::aws:policy/service-role/{policy}"
            + (", or deploy with DmsTaskLogging=false." if role == DMS_LOGS_ROLE else ".")
        )
    return found


def cadence_problems(target: Target) -> list[str]:
    """The lake assumes a change is in a file within DmsSettleSeconds: the task must write files more often."""
    if not target.on("CreateDmsTask"):
        return []
    interval = int(target.parameters.get("DmsCdcMaxBatchIntervalSeconds", "60"))
    settle = int(target.parameters.get("DmsSettleSeconds", "300"))
    if settle > interval:
        return []
    return [
        f"DmsCdcMaxBatchIntervalSeconds={interval} but DmsSettleSeconds={settle}: DMS may hold a change longer "
        "than the lake waits for it, and the reconcile would report DMS's delay as divergence. Raise "
        f"DmsSettleSeconds above {interval} (plus the capture latency) or lower DmsCdcMaxBatchIntervalSeconds."
    ]


def raw_bucket(target: Target) -> str:
    return next(r.name for r in target.names() if r.logical_id == "RawBucket")


def own_task_problems(target: Target, task_target: Mapping[str, str] | None) -> list[str]:
    """CreateDmsTask=false: the task the pipeline follows must write to the raw bucket this stack creates
    (its name is known before the stack exists: DMS checks the bucket only when the task runs)."""
    if target.on("CreateDmsTask") or not target.parameters.get("DmsReplicationTaskArn"):
        return []
    arn = target.parameters["DmsReplicationTaskArn"]
    if task_target is None:
        return [f"DmsReplicationTaskArn {arn}: no such DMS task in {target.region} (or no S3 target)."]
    bucket, folder = raw_bucket(target), target.parameters.get("RawPrefix", "dms")
    if task_target.get("BucketName") == bucket and task_target.get("BucketFolder", "").strip("/") == folder:
        return []
    return [
        f"the DMS task {arn} writes to s3://{task_target.get('BucketName')}/{task_target.get('BucketFolder', '')}, "
        f"not to this stack's raw zone s3://{bucket}/{folder}. Point its target endpoint there (aws dms "
        f"modify-endpoint --endpoint-arn {task_target.get('EndpointArn')} --s3-settings "
        f"BucketName={bucket},BucketFolder={folder}; the bucket need not exist yet, start the task after the "
        "deploy), or let the stack create the endpoint and the task: CreateDmsTask=true with "
        "DmsReplicationInstanceArn and DmsSourceEndpointArn."
    ]


def reconcile_endpoints(target: Target) -> tuple[str, ...]:
    """What the reconcile calls from the connection's subnet: the code and the lake (S3), its catalog, the
    source's secret, its metrics, and DMS when it repairs by reload."""
    wanted = ["s3", "glue", "secretsmanager", "monitoring"]
    if target.parameters.get("RepairMode") == "reload":
        wanted.append("dms")
    return tuple(wanted)


def network_problems(target: Target, missing: Iterable[str]) -> list[str]:
    missing = list(missing)
    if not missing:
        return []
    subnet, region = target.parameters.get("ReconcileSubnetId"), target.region
    return [
        f"ReconcileSubnetId={subnet}: the reconcile job runs there, and its route table has no NAT gateway and its "
        f"VPC no endpoint for {', '.join(missing)}: the job would hang on those calls until its timeout. Add a "
        "NAT gateway route, or the endpoints (aws ec2 create-vpc-endpoint --vpc-id <its VPC> --service-name "
        f"com.amazonaws.{region}.<service>: --vpc-endpoint-type Gateway --route-table-ids <its route table> for "
        "s3, --vpc-endpoint-type Interface --subnet-ids <subnet> --security-group-ids <group> "
        "--private-dns-enabled for the others)."
    ]


# ---------------------------------------------------------------- AWS reads
def existing_leftovers(session: Any, target: Target) -> list[stack_names.NamedResource]:
    """The stack's retained names that exist and that the stack (if any) does not own."""
    from botocore.exceptions import ClientError

    owned: set[str] = set()
    if target.stack is not None and target.stack.get("StackStatus") not in DEAD_STACK_STATUSES:
        cloudformation = session.client("cloudformation")
        resources = cloudformation.describe_stack_resources(StackName=target.stack_name)["StackResources"]
        owned = {r.get("PhysicalResourceId", "").rsplit("/", 1)[-1] for r in resources}
    found = []
    for resource in target.names():
        if not resource.retained or resource.name.rsplit("/", 1)[-1] in owned or resource.name in owned:
            continue
        try:
            if _exists(session, resource):
                found.append(resource)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in (
                "403",
                "AccessDenied",
                "AccessDeniedException",
            ):
                found.append(resource)  # a bucket of another account, or one we may not see: taken either way
            else:
                raise
    return found


def _exists(session: Any, resource: stack_names.NamedResource) -> bool:
    from botocore.exceptions import ClientError

    missing = {
        "404",
        "NoSuchBucket",
        "NotFound",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
    }
    missing |= {"EntityNotFoundException"}
    try:
        if resource.type == "AWS::S3::Bucket":
            session.client("s3").head_bucket(Bucket=resource.name)
        elif resource.type == "AWS::SQS::Queue":
            session.client("sqs").get_queue_url(QueueName=resource.name)
        elif resource.type == "AWS::Glue::Database":
            session.client("glue").get_database(Name=resource.name)
        elif resource.type == "AWS::Logs::LogGroup":
            groups = session.client("logs").describe_log_groups(logGroupNamePrefix=resource.name)["logGroups"]
            return any(g["logGroupName"] == resource.name for g in groups)
        else:
            return False
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in missing:
            return False
        raise
    return True


def missing_endpoints(session: Any, target: Target) -> list[str]:
    """The services the reconcile needs that the connection's subnet reaches neither through a NAT gateway
    nor through a VPC endpoint."""
    subnet = target.parameters.get("ReconcileSubnetId")
    if not subnet:
        return []
    ec2 = session.client("ec2")
    vpc = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["VpcId"]
    tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet]}])
    if not tables["RouteTables"]:  # the subnet follows its VPC's main route table
        tables = ec2.describe_route_tables(
            Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "association.main", "Values": ["true"]}]
        )
    routes = [route for table in tables["RouteTables"] for route in table.get("Routes", [])]
    if any(
        route.get("NatGatewayId") and route.get("DestinationCidrBlock") == "0.0.0.0/0" for route in routes
    ):
        return []
    endpoints = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["VpcEndpoints"]
    services = {
        e["ServiceName"].rsplit(".", 1)[-1] for e in endpoints if e.get("State", "available") == "available"
    }
    return [service for service in reconcile_endpoints(target) if service not in services]


def emr_serverless_vcpu_quota(session: Any) -> float | None:
    """The account's applied quota, else its default; None when Service Quotas does not say."""
    quotas = session.client("service-quotas")
    for call in (quotas.list_service_quotas, quotas.list_aws_default_service_quotas):
        for page in quotas.get_paginator(call.__name__).paginate(ServiceCode="emr-serverless"):
            for quota in page.get("Quotas", []):
                if quota.get("QuotaName") == EMR_SERVERLESS_VCPU_QUOTA:
                    return float(quota["Value"])
    return None


def missing_dms_roles(session: Any, target: Target) -> list[str]:
    from botocore.exceptions import ClientError

    if not target.on("CreateDmsTask"):
        return []
    wanted = [DMS_VPC_ROLE] + ([DMS_LOGS_ROLE] if target.on("DmsTaskLogging") else [])
    missing = []
    for role in wanted:
        try:
            session.client("iam").get_role(RoleName=role)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
                raise
            missing.append(role)
    return missing


def task_s3_target(session: Any, task_arn: str) -> dict[str, str] | None:
    """The S3 settings of the task's target endpoint (BucketName, BucketFolder, EndpointArn), or None."""
    from botocore.exceptions import ClientError

    dms = session.client("dms")
    try:
        tasks = dms.describe_replication_tasks(
            Filters=[{"Name": "replication-task-arn", "Values": [task_arn]}], WithoutSettings=True
        ).get("ReplicationTasks", [])
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundFault":
            return None
        raise
    if not tasks:
        return None
    endpoint_arn = tasks[0]["TargetEndpointArn"]
    endpoints = dms.describe_endpoints(Filters=[{"Name": "endpoint-arn", "Values": [endpoint_arn]}])[
        "Endpoints"
    ]
    settings = endpoints[0].get("S3Settings") if endpoints else None
    if not settings:
        return None
    return {
        "BucketName": settings.get("BucketName", ""),
        "BucketFolder": settings.get("BucketFolder", ""),
        "EndpointArn": endpoint_arn,
    }
