"""Safe to run unattended: what the template and the state machine promise an operator.

Each test names the failure it rules out; the Lambdas' behaviour is tested on moto in tests/unit/functions.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import re
import sys
import tomllib
from typing import Any

import pytest
from lakehouse.base.config import LakeConfig

from tests.unit.template.test_template import REPO, _alarm_metrics, _allowed_actions

FUNCTIONS = REPO / "functions"
ONE_WEEKEND_SECONDS = 4 * 24 * 3600


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


def _published_metrics() -> set[str]:
    """Metric names the Lambdas publish (Powertools add_metric or single_metric, or the acknowledge's run-report
    names)."""
    names = set()
    for app in FUNCTIONS.glob("*/*.py"):
        text = app.read_text()
        names |= set(re.findall(r'(?:add_metric|single_metric)\(name="(\w+)"', text))
        names |= set(re.findall(r'"(\w+)":\s*(?:_count|max|seconds|float|totals\[)', text))
        names |= set(re.findall(r'values\["(\w+)"\]', text))
    return names | set(_job_metrics())


def _job_metrics() -> dict[str, str]:
    """Metric names a Spark job publishes itself (put_metric_data: the raw zone audit's `"Name": report.…`, the
    reconcile's `"Name": totals…` / `len(report…)`), with its service."""
    found: dict[str, str] = {}
    for module in ("audit/raw_zone.py", "reconcile/run.py"):
        text = (REPO / "spark_jobs" / "lakehouse" / module).read_text()
        service = re.findall(r'^METRICS_SERVICE = "([\w-]+)"', text, re.MULTILINE)[0]
        figures = re.findall(r"^    figures = \{\n(.*?)^    \}", text, re.MULTILINE | re.DOTALL)[0]
        found |= dict.fromkeys(re.findall(r'"(\w+)":\s*(?:report\.|totals\[|len\(report)', figures), service)
    return found


# ---------------------------------------------------------------- 1. one pipeline at a time
def test_one_drain_at_a_time_and_one_successor_per_rollover(template, asl):
    """Given two executions (or a hand-started drain), Then the drain is fenced by the lease (its writes,
    tests/unit/functions/test_lambda_fencing.py), reserving concurrency is a parameter off by default (it
    fails stack creation on new accounts), and a retried rollover cannot start a second successor: the
    successor's name derives from this execution and 'already exists' means handed over."""
    drain = template["Resources"]["QueueDrainFunction"]["Properties"]
    assert drain["ReservedConcurrentExecutions"] == {
        "Fn::If": ["ReserveDrainConcurrency", {"Ref": "DrainReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }
    assert template["Parameters"]["DrainReservedConcurrency"]["Default"] == 0
    assert template["Conditions"]["ReserveDrainConcurrency"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "DrainReservedConcurrency"}, 0]}]
    }
    assert asl["States"]["DrainQueue"]["Parameters"]["Payload"] == {"execution_arn.$": "$$.Execution.Id"}
    rollover = asl["States"]["StartNextExecution"]
    assert "$$.Execution.Id" in rollover["Parameters"]["Name.$"]
    already = [
        c for c in rollover["Catch"] if c["ErrorEquals"] == ["StepFunctions.ExecutionAlreadyExistsException"]
    ]
    assert already and asl["States"][already[0]["Next"]]["Type"] == "Succeed"


def test_a_second_execution_exits_cleanly_saying_who_holds_the_lease(asl):
    """Given the lease is held, When a second execution starts, Then it ends in Succeed (not Fail: nothing
    is wrong) and its output names the holder and the reason."""
    states = asl["States"]
    assert states["Configure"]["Next"] == "AcquireLease"
    assert states["AcquireLease"]["Parameters"]["Payload"]["execution_arn.$"] == "$$.Execution.Id"
    refused = states["LeaseAcquired?"]["Default"]
    assert states[refused]["Parameters"]["holder.$"] == "$.lease.value.holder"
    assert states[states[refused]["Next"]]["Type"] == "Succeed"
    assert states["DrainQueue"]["Catch"][0] == {
        "ErrorEquals": ["LeaseLostError"],
        "ResultPath": "$.error",
        "Next": "LeaseLost",
    }


# ---------------------------------------------------------------- 2. no stuck batch
def test_a_batch_that_keeps_failing_is_moved_aside_after_the_configured_attempts_and_alarmed(template, asl):
    """Given a CDC run that fails deterministically, Then the loop goes on (wait, drain the same manifest
    one attempt more), the drain moves it aside after MaxManifestAttempts (continue or stop, as
    configured), and the move is alarmed."""
    variables = template["Resources"]["QueueDrainFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["MAX_MANIFEST_ATTEMPTS"] == {"Ref": "MaxManifestAttempts"}
    assert variables["ON_STUCK_BATCH"] == {"Ref": "OnStuckBatch"}
    assert template["Parameters"]["OnStuckBatch"]["AllowedValues"] == ["continue", "stop"]
    assert asl["States"]["CdcRunFailed"]["Type"] == "Wait"
    stuck = [
        c["Next"] for c in asl["States"]["DrainQueue"]["Catch"] if c["ErrorEquals"] == ["StuckBatchError"]
    ]
    assert asl["States"][stuck[0]]["Type"] == "Fail"
    alarm = template["Resources"]["BatchesMovedAsideAlarm"]["Properties"]
    assert alarm["MetricName"] == "ManifestsMovedAside" and "ManifestsMovedAside" in _published_metrics()


# ---------------------------------------------------------------- 4. drain hardening (IAM side)
def test_the_acknowledge_can_list_manifests_so_a_retry_sees_404_not_403(template):
    statements = template["Resources"]["AcknowledgeFunction"]["Properties"]["Policies"][0]["Statement"]
    listing = [s for s in statements if s["Action"] == "s3:ListBucket"]
    assert listing and listing[0]["Condition"] == {"StringLike": {"s3:prefix": "manifests/*"}}


def _load_drain_config() -> Any:
    spec = importlib.util.spec_from_file_location(
        "_queue_drain_config_for_iam", FUNCTIONS / "queue_drain" / "drain_config.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_the_drain_can_list_every_key_it_reads_so_a_missing_one_is_404_not_403(template):
    """Given S3 answers a GetObject of a missing key with 403 AccessDenied unless the caller may list that
    key (s3:ListBucket, with s3:prefix matching it), When the drain reads a key that may be missing (no
    full-load marker yet, a pending manifest acknowledged meanwhile, a new reload request, no lease), Then
    its role may list exactly that key, so the read is a 404 the drain handles, not an error that fails it."""
    drain_config = _load_drain_config()
    function = template["Resources"]["QueueDrainFunction"]["Properties"]
    variables = function["Environment"]["Variables"]
    where = drain_config.Locations("queue", "dlq", "artifacts", manifest_prefix=variables["MANIFEST_PREFIX"])
    # every s3.get_object of the drain's modules and of the shared code they call (the lease read:
    # lake_contracts/s3.py; the reload request read: lake_contracts/reload_requests.py): a new read must be
    # added here (and to the role)
    shared = FUNCTIONS / "shared" / "lake_contracts"
    sources = [*(FUNCTIONS / "queue_drain").glob("*.py"), shared / "s3.py", shared / "reload_requests.py"]
    assert sum(source.read_text().count("s3.get_object(") for source in sources) == 6
    read = {
        where.full_load_marker_key,
        where.claim_key,
        where.pending_key("20260101T000000000000Z-0a1b2c3d"),
        where.failed_key("20260101T000000000000Z-0a1b2c3d"),  # a moved-aside batch's oldest file
        where.reload_requests.key("sales.orders"),
        variables["LEASE_KEY"],
    }
    assert where.full_load_marker_key == "manifests/full-load.json"
    statements = function["Policies"][0]["Statement"]
    listing = [
        s
        for s in statements
        if s["Action"] == "s3:ListBucket" and s["Resource"] == {"Fn::GetAtt": ["ArtifactsBucket", "Arn"]}
    ]
    assert len(listing) == 1
    patterns = listing[0]["Condition"]["StringLike"]["s3:prefix"]
    patterns = patterns if isinstance(patterns, list) else [patterns]
    for key in sorted(read):
        assert any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns), key
        readable = [
            r["Fn::Sub"].removeprefix("${ArtifactsBucket.Arn}/")
            for s in statements
            if "s3:GetObject" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
            for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        ]
        assert any(fnmatch.fnmatchcase(key, pattern) for pattern in readable), key
    # and nothing broader than what it reads: not the whole manifests/ folder (reports, done, failed)
    assert not any(fnmatch.fnmatchcase("manifests/done/x.json", pattern) for pattern in patterns)


def test_the_drain_only_accepts_the_raw_bucket_and_the_dms_prefix(template):
    variables = template["Resources"]["QueueDrainFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["RAW_BUCKET"] == {"Ref": "RawBucket"} and variables["RAW_PREFIX"] == {"Ref": "RawPrefix"}


# ---------------------------------------------------------------- 5. alerts that arrive
def test_the_alarm_topic_is_encrypted_with_a_key_cloudwatch_and_eventbridge_can_use(template):
    """Given the AWS-managed alias/aws/sns key, CloudWatch alarms and EventBridge cannot publish; Then the
    topic uses a customer-managed key whose policy lets both services use it, and the topic policy lets
    both publish (scoped to this account and to the rule)."""
    resources = template["Resources"]
    assert resources["AlarmTopic"]["Properties"]["KmsMasterKeyId"] == {"Ref": "PipelineKey"}
    key = resources["PipelineKey"]["Properties"]
    assert key["EnableKeyRotation"] is True
    services = [
        s["Principal"]["Service"]
        for s in key["KeyPolicy"]["Statement"]
        if "Service" in s.get("Principal", {})
    ]
    assert {"cloudwatch.amazonaws.com", "events.amazonaws.com"} <= set(services[0])
    topic_statements = resources["AlarmTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    publishers = {s["Principal"]["Service"] for s in topic_statements if s["Action"] == "sns:Publish"}
    assert publishers == {"cloudwatch.amazonaws.com", "events.amazonaws.com"}
    assert all("Condition" in s for s in topic_statements)


def _key_statement_for(template: dict[str, Any], service: str) -> dict[str, Any]:
    statements = template["Resources"]["PipelineKey"]["Properties"]["KeyPolicy"]["Statement"]
    found = [
        s
        for s in statements
        if service
        in (
            [s["Principal"]["Service"]]
            if isinstance(s.get("Principal", {}).get("Service"), str)
            else s.get("Principal", {}).get("Service", [])
        )
    ]
    assert len(found) == 1, service
    return found[0]


@pytest.mark.parametrize("service", ["cloudwatch.amazonaws.com", "events.amazonaws.com"])
def test_the_key_lets_the_alarm_publishers_encrypt_in_the_documented_shape(template, service):
    """Given an alarm (CloudWatch) or the Glue failure rule (EventBridge) publishing to the encrypted
    topic, When SNS asks KMS for a data key on that service's behalf, Then the key policy allows it in the
    shape SNS documents for AWS service publishers (Service principal, kms:Decrypt and kms:GenerateDataKey*,
    no condition): no document says that call carries aws:SourceAccount, and a condition the call does not
    satisfy would silently drop every alarm. Who may publish is scoped by the topic policy instead."""
    statement = _key_statement_for(template, service)
    assert statement["Effect"] == "Allow"
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    assert sorted(actions) == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert statement["Resource"] == "*"
    assert "Condition" not in statement
    topic = template["Resources"]["AlarmTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    publish = [s for s in topic if s["Principal"] == {"Service": service} and s["Action"] == "sns:Publish"]
    assert len(publish) == 1
    condition = publish[0]["Condition"]
    if service == "events.amazonaws.com":  # only the run failure and DMS task-stopped rules
        assert condition == {
            "ArnEquals": {
                "aws:SourceArn": [
                    {"Fn::GetAtt": ["GlueJobFailedRule", "Arn"]},
                    {"Fn::GetAtt": ["DmsTaskStoppedRule", "Arn"]},
                    {
                        "Fn::If": [
                            "UseEmrServerless",
                            {"Fn::GetAtt": ["EmrJobRunFailedRule", "Arn"]},
                            {"Ref": "AWS::NoValue"},
                        ]
                    },
                ]
            }
        }
    else:  # alarms of this account
        assert condition == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


# ---------------------------------------------------------------- 6. alarm on what loses or delays data
WATCHED = {
    "queue age": ("AWS/SQS", "ApproximateAgeOfOldestMessage"),
    "no execution running": ("DmsIcebergLake", "PipelineExecutionsRunning"),
    "executions timed out": ("AWS/States", "ExecutionsTimedOut"),
    "executions aborted": ("AWS/States", "ExecutionsAborted"),
    "executions failed": ("AWS/States", "ExecutionsFailed"),
    "Lambda errors": ("AWS/Lambda", "Errors"),
    "Lambda throttles": ("AWS/Lambda", "Throttles"),
    "quarantined records": ("DmsIcebergLake", "QuarantinedRecords"),
    "quarantined files": ("DmsIcebergLake", "QuarantinedFiles"),
    "freshness": ("DmsIcebergLake", "LagSeconds"),
    "poison file events": ("AWS/SQS", "ApproximateNumberOfMessagesVisible"),
    "reload failures": ("DmsIcebergLake", "ReloadRunsFailed"),
    "CDC files whose event was lost, re-enqueued by the raw zone audit": ("DmsIcebergLake", "FilesRecovered"),
}


@pytest.mark.parametrize("what", sorted(WATCHED))
def test_what_loses_or_delays_data_is_alarmed_to_the_topic(template, what):
    namespace, metric = WATCHED[what]
    alarms = [
        alarm["Properties"]
        for alarm in _resources(template, "AWS::CloudWatch::Alarm").values()
        if any(
            m["Namespace"] == namespace and m["MetricName"] == metric
            for m in _alarm_metrics(alarm["Properties"])
        )
    ]
    assert alarms, what
    assert all({"Ref": "AlarmTopic"} in a["AlarmActions"] for a in alarms)


def test_every_alarm_watches_a_metric_someone_publishes(template):
    """An alarm on a metric no function publishes never fires: every custom metric alarmed or charted is
    published by a Lambda (Powertools' namespace DmsIcebergLake, dimension service)."""
    namespace = template["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
    published = _published_metrics()
    services = {
        f["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
        for f in _resources(template, "AWS::Serverless::Function").values()
    } | set(_job_metrics().values())
    for name, alarm in _resources(template, "AWS::CloudWatch::Alarm").items():
        for metric in _alarm_metrics(alarm["Properties"]):
            if metric["Namespace"] == namespace:
                assert metric["MetricName"] in published, name
                assert metric["Dimensions"][0]["Name"] == "service", name
                assert metric["Dimensions"][0]["Value"] in services, name
    body = template["Resources"]["PipelineDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0]
    charted = set(re.findall(r'\["DmsIcebergLake", "(\w+)"', body))
    assert charted and charted <= published


def test_the_dashboard_is_valid_json_and_shows_the_pipeline(template):
    body = template["Resources"]["PipelineDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0]
    rendered = json.loads(re.sub(r"\$\{[^}]+\}", "x", body))
    titles = " ".join(w["properties"].get("title", "") for w in rendered["widgets"]).lower()
    for shown in ("queued", "changes applied", "lag", "quarantine", "duration", "executions", "alarms"):
        assert shown in titles, shown
    alarmed = re.findall(r"\$\{(\w+)\.Arn\}", body)
    # the DMS CDC latency alarms exist only with DmsReplicationInstanceIdentifier: not on the dashboard
    always = {n for n, r in _resources(template, "AWS::CloudWatch::Alarm").items() if "Condition" not in r}
    assert set(alarmed) == always


def test_a_scheduled_watchdog_counts_running_executions(template):
    watchdog = template["Resources"]["WatchdogFunction"]["Properties"]
    assert watchdog["Events"]["EveryFiveMinutes"]["Properties"]["Schedule"] == "rate(5 minutes)"
    alarm = template["Resources"]["NoExecutionRunningAlarm"]["Properties"]
    assert alarm["TreatMissingData"] == "breaching"  # a dead watchdog alarms too


# ---------------------------------------------------------------- 7. Glue jobs a user can debug
GLUE_JOBS = ("FullLoadJob", "CdcJob", "RefineJob", "MaintenanceJob")


GLUE_LOG_PREFIX = "/aws-glue/jobs/${EnvironmentName}-lake"


@pytest.mark.parametrize("job", GLUE_JOBS)
def test_glue_jobs_publish_metrics_spark_ui_and_logs_with_retention(template, job):
    properties = template["Resources"][job]["Properties"]
    arguments = properties["DefaultArguments"]
    assert arguments["--enable-metrics"] == arguments["--enable-observability-metrics"] == "true"
    assert arguments["--enable-spark-ui"] == "true"
    assert arguments["--spark-event-logs-path"] == {"Fn::Sub": "s3://${ArtifactsBucket}/glue/spark-events/"}
    assert properties["SecurityConfiguration"] == {"Ref": "GlueSecurityConfiguration"}
    role = template["Resources"]["GlueJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    writes = next(s for s in role if s.get("Sid") == "WriteRunReportsAndSparkEvents")
    assert {"Fn::Sub": "${ArtifactsBucket.Arn}/glue/spark-events/*"} in writes["Resource"]
    metrics = next(s for s in role if s.get("Sid") == "JobMetrics")
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "Glue"}}


def _log_groups_named(template: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (logical, group)
        for logical, group in _resources(template, "AWS::Logs::LogGroup").items()
        if group["Properties"]["LogGroupName"] == {"Fn::Sub": name}
    ]


@pytest.mark.parametrize("job", GLUE_JOBS)
def test_glue_5_job_logs_go_to_groups_the_stack_made_with_a_retention(template, job):
    """Given Glue 5.x, which logs every job in real time to /aws-glue/jobs/error and /output (never
    expiring) unless --custom-logGroup-prefix names <prefix>/error and <prefix>/output, and ignores the
    Glue 4.0 options --enable-continuous-cloudwatch-log / --continuous-log-logGroup; When a job runs, Then
    it logs under the stack's prefix, to two groups the stack created (before the job, so Glue never creates
    them first) with LogRetentionDays, kept like the rest when the stack goes, which the role may write."""
    properties = template["Resources"][job]["Properties"]
    arguments = properties["DefaultArguments"]
    assert arguments["--custom-logGroup-prefix"] == {"Fn::Sub": GLUE_LOG_PREFIX}
    assert not [a for a in arguments if a.startswith(("--continuous-log-", "--enable-continuous-"))]
    role = template["Resources"]["GlueJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    logs = next(s for s in role if s.get("Sid") == "JobLogs")
    assert {"logs:CreateLogStream", "logs:PutLogEvents"} <= set(logs["Action"])
    for stream in ("error", "output"):
        found = _log_groups_named(template, f"{GLUE_LOG_PREFIX}/{stream}")
        assert len(found) == 1, stream
        logical, group = found[0]
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
        assert group.get("DeletionPolicy") == group.get("UpdateReplacePolicy") == "Retain", logical
        assert logical in template["Resources"][job].get("DependsOn", []), (job, logical)
        arn = (
            "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:"
            f"{GLUE_LOG_PREFIX}/{stream}:log-stream:run-driver"
        )
        assert fnmatch.fnmatchcase(arn, logs["Resource"]["Fn::Sub"]), (arn, logs["Resource"])


# ---------------------------------------------------------------- 8. nothing deleted by a stack update
def test_state_survives_a_stack_update_or_delete(template):
    kept = ("AWS::S3::Bucket", "AWS::Glue::Database", "AWS::SQS::Queue", "AWS::KMS::Key")
    for kind in kept:
        for name, resource in _resources(template, kind).items():
            assert resource.get("DeletionPolicy") == "Retain", name
            assert resource.get("UpdateReplacePolicy") == "Retain", name
    for bucket in ("RawBucket", "ArtifactsBucket"):
        assert template["Resources"][bucket]["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}


# ---------------------------------------------------------------- 10. parameters a guided deploy can't get wrong
def test_every_parameter_is_described_and_grouped_once(template):
    parameters = template["Parameters"]
    assert all(p.get("Description") for p in parameters.values()), [
        n for n, p in parameters.items() if not p.get("Description")
    ]
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [name for group in groups for name in group["Parameters"]]
    assert sorted(grouped) == sorted(parameters)


def test_parameters_reject_what_would_break_the_pipeline(template):
    parameters = template["Parameters"]
    assert "G.025X" not in parameters["CdcWorkerType"]["AllowedValues"]
    assert parameters["QueueRetentionSeconds"]["MinValue"] >= ONE_WEEKEND_SECONDS
    for name in (
        "DmsReplicationTaskArn",
        "DmsReplicationInstanceArn",
        "DmsSourceEndpointArn",
        "AnalystRoleArn",
        "QuickSightPrincipalArn",
        "AlarmEmail",
        "RawPrefix",
    ):
        pattern = parameters[name]["AllowedPattern"]
        assert re.fullmatch(pattern, parameters[name]["Default"]), name
        assert not re.fullmatch(pattern, "not an arn/ @"), name
    assert re.fullmatch(
        parameters["DmsReplicationTaskArn"]["AllowedPattern"],
        "arn:aws:dms:eu-west-1:123456789012:task:ABC123",
    )
    assert re.fullmatch(parameters["AlarmEmail"]["AllowedPattern"], "ops@example.com")
    rule = template["Rules"]["ATaskToReadFrom"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "CreateDmsTask"}, "false"]}
    assert rule["Assertions"][0]["Assert"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "DmsReplicationTaskArn"}, ""]}]
    }


def test_samconfig_has_a_prod_environment():
    config = tomllib.loads((REPO / "samconfig.toml").read_text())
    assert config["prod"]["deploy"]["parameters"]["confirm_changeset"] is True
    assert 'EnvironmentName="prod"' in config["prod"]["deploy"]["parameters"]["parameter_overrides"]


def test_full_load_cost_is_bounded_and_raw_files_are_archived(template, asl):
    run = asl["States"]["RunFullLoad"]
    # at most two runs of FullLoadTimeoutMinutes; Glue refusing to start one (a run still going) costs nothing
    refusals = {
        "Glue.ConcurrentRunsExceededException",
        "Glue.ThrottlingException",
        "Glue.InternalServiceException",
    }
    assert sum(r["MaxAttempts"] for r in run["Retry"] if not set(r["ErrorEquals"]) <= refusals) <= 1
    assert template["Resources"]["FullLoadJob"]["Properties"]["Timeout"] == {"Ref": "FullLoadTimeoutMinutes"}
    assert (
        template["Resources"]["FullLoadJob"]["Properties"]["DefaultArguments"]["--enable-auto-scaling"]
        == "true"
    )
    rules = template["Resources"]["RawBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    archive = next(r for r in rules if r.get("Transitions"))
    assert archive["ObjectSizeGreaterThan"] >= 128 * 1024  # smaller objects cost more once archived


# ---------------------------------------------------------------- 11. least privilege
def test_service_trust_is_scoped_to_this_account(template):
    for name, role in _resources(template, "AWS::IAM::Role").items():
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            assert statement["Condition"] == {
                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
            }, name


def test_the_jobs_cannot_drop_tables_or_create_databases_and_the_state_machine_invokes_exact_functions(
    template,
):
    glue = {action for name, action in _allowed_actions(template) if name == "GlueJobRole"}
    assert not {"glue:CreateDatabase", "glue:DeleteDatabase"} & glue
    # A table is dropped only by the one-time move of an older release's records, and only by those names.
    policies = template["Resources"]["GlueJobRole"]["Properties"]["Policies"]
    drops = [
        s
        for p in policies
        for s in p["PolicyDocument"]["Statement"]
        if isinstance(s, dict) and "glue:DeleteTable" in str(s.get("Action"))
    ]
    assert [s["Sid"] for s in drops] == ["MoveOlderReleasesRecordsOnce"]
    tables = [r["Fn::Sub"].rsplit(":table/", 1)[1] for r in drops[0]["Resource"] if ":table/" in r["Fn::Sub"]]
    assert tables == [f"${{EnvironmentName}}_clean/{name}" for name in LakeConfig().record_names]
    policies = template["Resources"]["PipelineStateMachine"]["Properties"]["Policies"]
    assert not any("LambdaInvokePolicy" in p for p in policies)  # SAM's grants function:* (every version)
    invoke = next(
        s for p in policies for s in p.get("Statement", []) if s["Action"] == "lambda:InvokeFunction"
    )
    assert all(list(r) == ["Fn::GetAtt"] and r["Fn::GetAtt"][1] == "Arn" for r in invoke["Resource"])


def test_the_functions_pin_powertools():
    """Given the libraries layer every function runs on, Then it pins Powertools to one release."""
    requirements = FUNCTIONS / "libraries" / "requirements.txt"
    assert re.search(r"^aws-lambda-powertools\[[a-z,]+\]==\d+\.\d+\.\d+$", requirements.read_text(), re.M)


@pytest.mark.parametrize("function", sorted(p.name for p in FUNCTIONS.iterdir() if (p / "app.py").exists()))
def test_every_function_is_deployed_with_a_log_group_that_expires(template, function):
    code_uris = {
        r["Properties"]["CodeUri"].rstrip("/"): name
        for name, r in _resources(template, "AWS::Serverless::Function").items()
    }
    logical = code_uris[f"functions/{function}"]
    groups = [g["Properties"] for g in _resources(template, "AWS::Logs::LogGroup").values()]
    assert any(
        g["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/${{{logical}}}"} and g["RetentionInDays"]
        for g in groups
    )


def test_lake_formation_grants_what_the_jobs_do_when_enabled(template):
    """With EnableLakeFormation the jobs create tables (database CREATE_TABLE) and write under the
    warehouses, which are registered data locations the Glue role may use."""
    resources = template["Resources"]
    lake_formation = {n: r for n, r in resources.items() if r["Type"].startswith("AWS::LakeFormation::")}
    assert all(
        r["Condition"] == "UseLakeFormation" or r["Condition"] == "HasAnalyst"
        for r in lake_formation.values()
    )
    permissions = [
        r["Properties"] for r in lake_formation.values() if r["Type"].endswith("PrincipalPermissions")
    ]
    databases = {
        p["Resource"]["Database"]["Name"]["Ref"]
        for p in permissions
        if "Database" in p["Resource"] and "CREATE_TABLE" in p["Permissions"]
    }
    assert databases == {"CleanDatabase", "HistoryDatabase", "RecordsDatabase", "RefinedDatabase"}
    locations = [p for p in permissions if "DataLocation" in p["Resource"]]
    registered = [
        r["Properties"]["ResourceArn"]
        for r in lake_formation.values()
        if r["Type"] == "AWS::LakeFormation::Resource"
    ]
    assert len(locations) == 2 and sorted(
        str(p["Resource"]["DataLocation"]["ResourceArn"]) for p in locations
    ) == sorted(map(str, registered))


def test_every_maintenance_setting_is_a_parameter_with_the_jobs_default(template):
    """Given the maintenance job's tuning arguments (lakehouse.jobs.maintenance.parser), When the stack
    deploys, Then each one is set in the job's DefaultArguments from a described parameter of the Table
    maintenance group whose default is the job's own: a guided deploy can tune every one, and an untouched
    deploy behaves as the job does when run by hand (bench/RESULTS.md's measured settings)."""
    from lakehouse.jobs.maintenance import parser as maintenance_parser

    defaults = vars(maintenance_parser().parse_args([]))
    tuning = sorted(set(defaults) - {"run_id", "report_uri"})
    assert {"min_input_files", "delete_file_threshold", "tombstone_retention_days"} <= set(tuning)
    arguments = template["Resources"]["MaintenanceJob"]["Properties"]["DefaultArguments"]
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    maintenance_group = next(g for g in groups if g["Label"]["default"] == "Table maintenance")["Parameters"]
    for name in tuning:
        value = arguments[f"--{name}"]
        parameter = re.fullmatch(r"\$\{(\w+)\}", value["Fn::Sub"])[1]
        declared = template["Parameters"][parameter]
        assert declared["Type"] == "Number" and declared["Description"], parameter
        assert float(declared["Default"]) == float(defaults[name]), parameter
        assert parameter in maintenance_group, parameter
        assert declared.get("MinValue", float("-inf")) <= float(declared["Default"]), parameter


def test_every_function_is_alarmed_on_errors_and_throttles_within_cloudwatchs_limit(template):
    """Given the pipeline's Lambdas (a failing DMS-progress read or history guard fails the execution too),
    When any of them errs or is throttled, Then an alarm on the topic sums that function's metric; each
    such alarm stays within CloudWatch's hard limit of 10 metrics per metric-math alarm, and its
    expression adds every metric it lists (a listed metric left out of the sum never alarms)."""
    functions = set(_resources(template, "AWS::Serverless::Function"))
    assert {"DmsProgressFunction", "HistoryGuardFunction", "WatchdogFunction"} <= functions
    alarms = [a["Properties"] for a in _resources(template, "AWS::CloudWatch::Alarm").values()]
    for metric_name in ("Errors", "Throttles"):
        watched = set()
        for alarm in alarms:
            queries = alarm.get("Metrics", [])
            lambda_ids = {
                q["Id"]: q["MetricStat"]["Metric"]
                for q in queries
                if "MetricStat" in q and q["MetricStat"]["Metric"]["Namespace"] == "AWS/Lambda"
            }
            mine = {i: m for i, m in lambda_ids.items() if m["MetricName"] == metric_name}
            if not mine:
                continue
            assert len([q for q in queries if "MetricStat" in q]) <= 10
            assert {"Ref": "AlarmTopic"} in alarm["AlarmActions"]
            summed = next(q["Expression"] for q in queries if q.get("ReturnData"))
            assert all(re.search(rf"\b{i}\b", summed) for i in lambda_ids), summed
            watched |= {m["Dimensions"][0]["Value"]["Ref"] for m in mine.values()}
        assert watched == functions, metric_name


def test_the_freshness_threshold_promises_only_what_the_stale_alarm_does(template):
    """Given the stale alarm watches LagSeconds, which only a CDC run's report publishes, and treats
    missing data as not breaching (a quiet source must not page anyone), Then the FreshnessAlarmMinutes
    description promises no alarm when no run reports and says a quiet source raises none; a dead pipeline
    is the not-running alarm's (missing data breaching)."""
    stale = template["Resources"]["FreshnessAlarm"]["Properties"]
    assert stale["TreatMissingData"] == "notBreaching"
    assert [m["MetricName"] for m in _alarm_metrics(stale)] == ["LagSeconds"]
    description = " ".join(template["Parameters"]["FreshnessAlarmMinutes"]["Description"].lower().split())
    assert not re.search(r"no (cdc )?run reported", description), description
    assert "quiet" in description and "not-running" in description, description
    assert template["Resources"]["NoExecutionRunningAlarm"]["Properties"]["TreatMissingData"] == "breaching"
