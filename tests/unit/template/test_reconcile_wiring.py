"""Reconcile and raw zone audit in production: the deployed stack runs the source <-> lake reconcile and the raw zone audit by
itself (the loop starts them when the history guard says they are due), with the permissions, the source
connection and the alarms they need. The jobs' behaviour is tested in tests/unit/spark; the deployed loop on
the local AWS in tests/integration/pipeline/test_pipeline_reconcile.py."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

import pytest

from tests.unit.template.test_template import CONFIG, LEASE, REPO, _route, _tasks, _walk

SPARK_JOBS = REPO / "spark_jobs"
IDLE_BATCH = {"value": {"has_work": False, "file_count": 0, "moved_aside": [], "reloads_pending": []}}
BUSY_BATCH = {"value": {"has_work": True, "run_id": "r1", "manifest_key": "k", "file_count": 3}}
# sample values of the template's parameters and resources, to turn !Sub/!Ref arguments into run arguments
SAMPLE = {
    "EnvironmentName": "dev",
    "ArtifactsBucket": "artifacts",
    "JobCodePrefix": "glue/code/0123456789abcdef",
    "SchemaFileKey": "config/schema-0123456789abcdef.json",
    "CleanBucket": "clean",
    "RawBucket": "raw",
    "RawPrefix": "dms",
    "SourceEngine": "postgresql",
    "ReconcileSourceSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:source-AbCdEf",
    "ReconcileSourceJdbcUrl": "",
    "ReconcileMaxSourceRows": "0",
    "CdcFilesQueue": "https://sqs.us-east-1.amazonaws.com/123456789012/dev-cdc-files.fifo",
    "RawAuditGraceMinutes": "60",
    "CdcWorkerType": "G.1X",
    "CdcNumberOfWorkers": "2",
}


def _sample_choice(value: Any) -> Any:
    """A value chosen by the sample stack's conditions: no IcebergJarKey (Glue's own Iceberg)."""
    if isinstance(value, dict) and set(value) == {"Fn::If"} and value["Fn::If"][0] == "HasIcebergJar":
        return value["Fn::If"][2]
    return value


def _text(value: Any, values: dict[str, str] = SAMPLE) -> str:
    if isinstance(value, str):
        return value
    if set(value) == {"Ref"}:
        return values.get(value["Ref"], "0")  # other parameters (numbers): any valid value
    if set(value) == {"Fn::Sub"}:
        return re.sub(r"\$\{(\w+)\}", lambda m: values.get(m[1], "0"), value["Fn::Sub"])
    raise AssertionError(f"not an argument value: {value}")


def _job_argv(
    template: dict[str, Any], job: str, run_arguments: dict[str, str], values: dict[str, str] = SAMPLE
) -> list[str]:
    """The job's arguments as Glue passes them to the script: its defaults, then the run's."""
    defaults = template["Resources"][job]["Properties"]["DefaultArguments"]
    defaults = {name: _sample_choice(value) for name, value in defaults.items()}
    merged = {
        name: _text(value, values) for name, value in defaults.items() if value != {"Ref": "AWS::NoValue"}
    } | run_arguments
    return [item for name, value in merged.items() for item in (name, value)]


def _loop(history: dict[str, Any] | None, batch: dict[str, Any]) -> dict[str, Any]:
    document = {
        "config": CONFIG,
        "lease": LEASE,
        "loop": {"batches": 8, "since_refine": 0, "since_maintenance": 8},
        "batch": batch,
    }
    if history is not None:
        document["history"] = {"value": {"rollover": False, **history}}
    return document


def _due(reconcile: bool = False, raw_audit: bool = False, overdue: bool = False) -> dict[str, Any]:
    return {
        "due": {"reconcile": reconcile, "raw_audit": raw_audit},
        "overdue": {"reconcile": overdue, "raw_audit": False},
    }


# ---------------------------------------------------------------- the loop
@pytest.mark.parametrize(
    ("history", "tasks"),
    [
        (None, []),  # the first pass: no guard answer yet
        (_due(), []),
        (_due(reconcile=True), ["RunReconcile"]),
        (_due(raw_audit=True), ["RunRawAudit"]),
        (_due(reconcile=True, raw_audit=True), ["RunReconcile", "RunRawAudit"]),
    ],
)
def test_an_idle_pass_runs_what_is_due_then_waits_and_reaches_the_history_guard(asl, history, tasks):
    """Given the drain found the queue empty (the lake has applied every file whose event arrived: the
    reconcile's recheck can pass without waiting), When the guard's last answer says a job is due, Then
    the pass runs it before the idle wait, and still waits and reaches the history guard."""
    path, after = _walk(asl, "HasWork?", _loop(history, IDLE_BATCH))

    assert _tasks(asl, path) == tasks
    assert path[-2:] == ["Idle", "CheckHistory"]
    assert after["loop"] == {"batches": 8, "since_refine": 0, "since_maintenance": 8}


@pytest.mark.parametrize(
    ("history", "tasks"),
    [
        (_due(reconcile=True), []),  # due only: waits for an empty queue
        (_due(reconcile=True, overdue=True), ["RunReconcile"]),  # a busy source cannot starve it
        (_due(raw_audit=True), ["RunRawAudit"]),
    ],
)
def test_a_pass_that_applied_a_batch_reconciles_only_when_overdue(asl, history, tasks):
    """Given a batch was just applied (the queue may never be found empty), Then the reconcile waits for an
    idle pass until it is overdue by a second period, the raw audit runs when due, and the pass goes
    straight on to the history guard (no idle wait)."""
    path, _ = _walk(asl, "CountBatch", _loop(history, BUSY_BATCH))

    assert _tasks(asl, path) == tasks
    assert path[-1] == "CheckHistory" and "Idle" not in path


@pytest.mark.parametrize("failing", ["RunReconcile", "RunRawAudit"])
@pytest.mark.parametrize("batch", [IDLE_BATCH, BUSY_BATCH])
def test_a_failed_reconcile_or_audit_never_stops_cdc(asl, failing, batch):
    """Given the job fails (source unreachable, a bug: the Glue failure rule alarms), Then the loop goes on
    to the history guard and the next drain, as after a success."""
    history = _due(reconcile=True, raw_audit=True, overdue=True)
    path, _ = _walk(
        asl, "CountBatch" if batch is BUSY_BATCH else "HasWork?", _loop(history, batch), {failing}
    )

    assert failing in path and path[-1] == "CheckHistory"
    assert _route(asl, "RollOver?", {"history": {"value": {"rollover": False}}})[-1] == "CheckDmsTask"


def test_divergence_alarms_instead_of_failing_and_the_recheck_never_waits_for_the_loop(asl, template):
    """The loop's reconcile run: fenced by the lease (it writes dms_divergence and asks DMS for reloads),
    divergence published not failed (exit 0, DivergedRows alarmed), no recheck wait (the loop that would
    apply the files is waiting for this run: a wait could only time out), RepairMode and the task from the
    template; Glue refusing to start it is retried, anything else caught."""
    run = asl["States"]["RunReconcile"]
    arguments = run["Parameters"]["Arguments"]
    assert run["Resource"] == "arn:aws:states:::glue:startJobRun.sync"
    assert run["Parameters"]["JobName"] == "${ReconcileJobName}"
    assert arguments["--fail_on_divergence"] == "false"
    assert arguments["--recheck_wait_seconds"] == "0"
    assert arguments["--repair_mode"] == "${RepairMode}" and arguments["--dms_task_arn"] == "${DmsTaskArn}"
    for lease in ("--lease_uri", "--lease_holder.$", "--lease_epoch.$"):
        assert lease in arguments
    assert [c["ErrorEquals"] for c in run["Catch"]] == [["States.ALL"]]
    assert all("States.ALL" not in r["ErrorEquals"] for r in run["Retry"])  # no second pass over the source
    substitutions = template["Resources"]["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert substitutions["ReconcileJobName"] == {"Ref": "ReconcileJob"}
    assert substitutions["RawAuditJobName"] == {"Ref": "RawAuditJob"}
    assert substitutions["RepairMode"] == {"Ref": "RepairMode"}
    assert substitutions["DmsTaskArn"] == {
        "Fn::If": ["CreateDms", {"Ref": "DmsReplicationTask"}, {"Ref": "DmsReplicationTaskArn"}]
    }


# ---------------------------------------------------------------- the jobs
def _load_raw_audit_parser() -> argparse.ArgumentParser:
    if str(SPARK_JOBS) not in sys.path:
        sys.path.insert(0, str(SPARK_JOBS))
    from lakehouse.jobs.raw_audit import parser

    return parser()


def test_the_jobs_accept_every_argument_the_stack_passes_them(asl, template):
    """Given each job's default arguments and the loop's run arguments, When its entry parses them as on
    Glue (lease arguments taken by the fence, Glue's own passed over), Then nothing is unknown (a typo would
    fail every run) and the values are the stack's: the source secret, the raw zone, the queue, the grace."""
    if str(SPARK_JOBS) not in sys.path:
        sys.path.insert(0, str(SPARK_JOBS))
    from lakehouse.base.config import parse_job_arguments
    from lakehouse.io.fence import fence_from_arguments
    from lakehouse.jobs.reconcile import parser as reconcile_parser

    run = {
        k.removesuffix(".$"): "x" if k.endswith(".$") else v
        for k, v in asl["States"]["RunReconcile"]["Parameters"]["Arguments"].items()
    }
    run |= {"--lease_epoch": "3", "--repair_mode": "reload", "--dms_task_arn": "arn:aws:dms:::task:T"}
    fence, rest = fence_from_arguments(_job_argv(template, "ReconcileJob", run))
    assert fence is not None and fence.epoch == 3
    config, args = parse_job_arguments(rest, reconcile_parser())
    assert args.source_secret_id == SAMPLE["ReconcileSourceSecretArn"] and args.source_engine == "postgresql"
    assert args.raw_path == "s3://raw/dms" and args.metrics_namespace == "DmsIcebergLake"
    assert args.state_uri.startswith("s3://artifacts/manifests/") and args.fail_on_divergence == "false"
    assert (
        config.schema_file == "s3://artifacts/config/schema-0123456789abcdef.json"
        and config.catalog_type == "glue"
    )

    audit_run = {k.removesuffix(".$"): "x" for k in asl["States"]["RunRawAudit"]["Parameters"]["Arguments"]}
    _, args = parse_job_arguments(_job_argv(template, "RawAuditJob", audit_run), _load_raw_audit_parser())
    assert args.queue_url == SAMPLE["CdcFilesQueue"] and args.grace_minutes == 60.0
    assert args.manifest_prefix == "s3://artifacts/manifests" and args.raw_path == "s3://raw/dms"
    for name, job in (("reconcile_job.py", "ReconcileJob"), ("raw_audit_job.py", "RawAuditJob")):
        location = template["Resources"][job]["Properties"]["Command"]["ScriptLocation"]["Fn::Sub"]
        assert location == f"s3://${{ArtifactsBucket}}/${{JobCodePrefix}}/scripts/{name}", location
        assert (SPARK_JOBS / name).exists()


def _emr_reconcile_argv(template: dict[str, Any], values: dict[str, str]) -> list[str]:
    """The EMR Serverless reconcile run's arguments (generated definition), its `${Name}`s replaced by the EMR
    state machine's substitutions (a parameter's value from `values`, else SAMPLE), paths by sample values."""
    from tests.unit.template.test_spark_engine import EMR_ASL, _array_items

    emr = json.loads(EMR_ASL.read_text())
    substitutions = template["Resources"]["EmrPipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]

    def value_of(name: str) -> str:
        given = substitutions[name]
        if name == "RepairMode":
            return "alarm"
        if isinstance(given, dict) and set(given) == {"Ref"}:
            return (SAMPLE | values).get(given["Ref"], "0")
        return "0"  # Number parameters joined as text, resources: any valid value

    spark_submit = emr["States"]["RunReconcile"]["Parameters"]["JobDriver"]["SparkSubmit"]
    argv = []
    for text, dynamic in _array_items(spark_submit["EntryPointArguments.$"]):
        if dynamic:  # $$.Execution.Id, States.Format(…): the lease holder, epoch, run id, report
            argv.append("3" if argv[-1] == "--lease_epoch" else "x")
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: value_of(m[1]), text))
    return argv


@pytest.mark.parametrize("engine", ["postgresql", "mysql"])
@pytest.mark.parametrize("spark_engine", ["glue", "emr-serverless"])
def test_the_deployed_reconcile_reads_the_source_engine_the_stack_is_given(
    template, asl, engine, spark_engine, monkeypatch
):
    """Given a stack deployed with SourceEngine=<engine> and a source secret holding only host, port and
    dbname (an RDS secret), When the loop's reconcile run starts (the Glue job's defaults and run arguments,
    or the generated EMR Serverless run) and its entry parses them and reads the secret,
    Then it runs with --source_engine <engine> and the secret's host builds a JDBC URL of that engine (a MySQL
    source read as PostgreSQL would fail every run)."""
    import boto3
    from moto import mock_aws

    if str(SPARK_JOBS) not in sys.path:
        sys.path.insert(0, str(SPARK_JOBS))
    from lakehouse.base.config import parse_job_arguments
    from lakehouse.io.fence import fence_from_arguments
    from lakehouse.jobs.reconcile import parser as reconcile_parser
    from lakehouse.jobs.reconcile import source_credentials

    parameter = template["Parameters"]["SourceEngine"]
    assert parameter["Default"] == "postgresql" and parameter["AllowedValues"] == ["postgresql", "mysql"]
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    reconcile_group = next(g["Parameters"] for g in groups if "ReconcileSourceSecretArn" in g["Parameters"])
    assert "SourceEngine" in reconcile_group
    url_pattern = re.compile(template["Parameters"]["ReconcileSourceJdbcUrl"]["AllowedPattern"])
    assert url_pattern.match(f"jdbc:{engine}://db.example:1234/sales")

    if spark_engine == "glue":
        run = {
            k.removesuffix(".$"): "x" if k.endswith(".$") else v
            for k, v in asl["States"]["RunReconcile"]["Parameters"]["Arguments"].items()
        } | {"--lease_epoch": "3", "--repair_mode": "alarm", "--dms_task_arn": ""}
        argv = _job_argv(template, "ReconcileJob", run, SAMPLE | {"SourceEngine": engine})
    else:
        argv = _emr_reconcile_argv(template, {"SourceEngine": engine})
    fence, rest = fence_from_arguments(argv)
    assert fence is not None and fence.epoch == 3
    _, args = parse_job_arguments(rest, reconcile_parser())
    assert args.source_engine == engine

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        secret = boto3.client("secretsmanager").create_secret(
            Name="source",
            SecretString=json.dumps(
                {"username": "lake", "password": "pw", "host": "db.example", "port": 1234, "dbname": "sales"}
                | {"engine": "aurora-mysql" if engine == "mysql" else "postgres"}  # RDS's spelling
            ),
        )
        args.source_secret_id = secret["ARN"]
        url, properties = source_credentials(args)
    assert (url, properties) == (f"jdbc:{engine}://db.example:1234/sales", {"user": "lake", "password": "pw"})


@pytest.mark.parametrize(
    ("engine", "url"),
    [("mysql", "jdbc:postgresql://db:5432/sales"), ("postgresql", "jdbc:mysql://db:3306/sales")],
)
def test_a_source_url_of_the_other_engine_is_refused_naming_source_engine(engine, url):
    """Given a stack whose SourceEngine does not match its ReconcileSourceJdbcUrl, When the job starts, Then it
    stops at once saying so (not a SQL or driver error on the first table)."""
    if str(SPARK_JOBS) not in sys.path:
        sys.path.insert(0, str(SPARK_JOBS))
    from lakehouse.jobs.reconcile import source_credentials

    args = argparse.Namespace(
        source_engine=engine, source_jdbc_url=url, source_user="u", source_password="", source_secret_id=""
    )
    with pytest.raises(SystemExit, match=f"--source_engine {engine} \\(template: SourceEngine\\)"):
        source_credentials(args)
    args.source_jdbc_url = url.replace(url.split(":")[1], engine)
    assert source_credentials(args) == (args.source_jdbc_url, {"user": "u"})


@pytest.mark.parametrize(
    ("secret_engine", "engine", "wanted"),
    [
        ("aurora-mysql", "postgresql", "mysql"),
        ("mariadb", "postgresql", "mysql"),
        ("postgres", "mysql", "postgresql"),
    ],
)
def test_a_source_secret_of_the_other_engine_is_refused_naming_source_engine(
    secret_engine, engine, wanted, monkeypatch
):
    """Given an RDS secret whose `engine` is not the stack's SourceEngine (a MySQL user who left the default),
    When the job reads it, Then it stops at once naming the SourceEngine the secret needs."""
    import boto3
    from moto import mock_aws

    if str(SPARK_JOBS) not in sys.path:
        sys.path.insert(0, str(SPARK_JOBS))
    from lakehouse.jobs.reconcile import source_credentials

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="source",
            SecretString=json.dumps({"username": "u", "host": "db", "port": 1, "engine": secret_engine}),
        )["ARN"]
        args = argparse.Namespace(
            source_engine=engine, source_jdbc_url="", source_user="", source_password="", source_secret_id=arn
        )
        with pytest.raises(SystemExit, match=f"of a {secret_engine} database.*SourceEngine={wanted}\\)"):
            source_credentials(args)


def test_the_history_guard_knows_the_jobs_and_their_periods(template):
    """The guard answers 'due' from the jobs' run history: it is told their names and periods (0, never,
    when no source is configured: a reconcile that cannot connect is never started) and may read their runs
    and its execution's start; and the refine's name and minimum interval (0, none, when no model is
    deployed: the loop never refines then)."""
    guard = template["Resources"]["HistoryGuardFunction"]["Properties"]
    variables = guard["Environment"]["Variables"]
    assert variables["RECONCILE_JOB_NAME"] == {"Ref": "ReconcileJob"}
    assert variables["RAW_AUDIT_JOB_NAME"] == {"Ref": "RawAuditJob"}
    assert variables["RECONCILE_EVERY_MINUTES"] == {
        "Fn::If": ["ReconcileConfigured", {"Ref": "ReconcileEveryMinutes"}, "0"]
    }
    assert variables["RAW_AUDIT_EVERY_MINUTES"] == {"Ref": "RawAuditEveryMinutes"}
    assert variables["REFINE_JOB_NAME"] == {"Ref": "RefineJob"}
    assert variables["REFINE_EVERY_MINUTES"] == {
        "Fn::If": ["RefineModelsDeployed", {"Ref": "RefineEveryMinutes"}, "0"]
    }
    assert template["Conditions"]["RefineModelsDeployed"] == {
        "Fn::Equals": [{"Ref": "HasRefineModels"}, "true"]
    }
    assert template["Conditions"]["ReconcileConfigured"] == {
        "Fn::Or": [
            {"Condition": "HasSourceSecret"},
            {"Fn::Not": [{"Fn::Equals": [{"Ref": "ReconcileSourceJdbcUrl"}, ""]}]},
        ]
    }
    statements = guard["Policies"][0]["Statement"]
    runs = next(s for s in statements if isinstance(s, dict) and s.get("Action") == "glue:GetJobRuns")
    assert [r["Fn::Sub"].rsplit("/", 1)[-1] for r in runs["Resource"]] == [
        "${ReconcileJob}",
        "${RawAuditJob}",
        "${RefineJob}",
    ]
    assert any(isinstance(s, dict) and s.get("Action") == "states:DescribeExecution" for s in statements)
    parameters = template["Parameters"]
    assert parameters["ReconcileEveryMinutes"]["Default"] == "360"
    assert parameters["RawAuditEveryMinutes"]["Default"] == "60"
    assert parameters["RefineEveryMinutes"]["Default"] == "15"
    assert parameters["RepairMode"]["Default"] == "alarm"
    assert parameters["RepairMode"]["AllowedValues"] == ["alarm", "reload"]


@pytest.mark.parametrize("parameter", ["ReconcileEveryMinutes", "RawAuditEveryMinutes"])
def test_a_period_takes_whole_minutes_or_a_fraction_and_nothing_the_guard_would_misread(template, parameter):
    """Given the loop's periodic jobs' periods (the history guard reads them with float()), Then the template
    accepts 0 (never), whole minutes and fractions to the hundredth (0.5: a tight reconcile of a small
    source), and refuses what float() would read as something else or not at all: an exponent, a sign,
    nan / inf, a bare point, padding, more than 5 digits of minutes (69 days)."""
    pattern = template["Parameters"][parameter]["AllowedPattern"]
    accepted = ["0", "1", "360", "99999", "0.5", "0.25", "1.5", "90.75"]
    refused = ["", "1e3", "-1", "+5", "nan", "inf", ".5", "5.", "0.125", "05", " 5", "100000", "1,5"]

    assert [v for v in accepted if not re.fullmatch(pattern, v)] == []
    assert [v for v in refused if re.fullmatch(pattern, v)] == []
    assert re.fullmatch(pattern, template["Parameters"][parameter]["Default"])


def _statements(template: dict[str, Any], role: str) -> dict[str, dict[str, Any]]:
    found = {}
    for statement in template["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]:
        if "Fn::If" in statement:
            condition, statement, _ = statement["Fn::If"]
            statement = statement | {"_condition": condition}
        found[statement["Sid"]] = statement
    return found


@pytest.mark.parametrize("role", ["GlueJobRole", "EmrJobRole"])
def test_the_job_role_may_read_the_source_secret_and_reload_only_when_configured(template, role):
    """Least privilege: the source secret only when one is given, dms:ReloadTables on the pipeline's task
    only with RepairMode=reload; FilesRecovered and the reconcile's metrics in the pipeline's namespace; the
    audit re-sends to the pipeline's queue only."""
    statements = _statements(template, role)
    secret = statements["ReconcileReadsTheSourceSecret"]
    assert secret["_condition"] == "HasSourceSecret"
    assert secret["Action"] == "secretsmanager:GetSecretValue"
    assert secret["Resource"] == {"Ref": "ReconcileSourceSecretArn"}
    reload = statements["ReconcileRepairsByReload"]
    assert reload["_condition"] == "RepairByReload" and reload["Action"] == "dms:ReloadTables"
    assert "task:${TaskId}" in reload["Resource"]["Fn::Sub"][0]
    assert statements["RawAuditMetrics"]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "DmsIcebergLake"}
    }
    assert statements["RawAuditReEnqueuesLostFiles"]["Resource"] == {"Fn::GetAtt": ["CdcFilesQueue", "Arn"]}


def test_on_aws_the_reconcile_reaches_the_source_through_a_glue_connection_in_its_vpc(template):
    """Given ReconcileSubnetId (with a secret and security groups), Then a JDBC Glue connection with the
    secret as SECRET_ID is created and attached to the reconcile job; without it, neither (a source Glue
    reaches directly, or the local stack)."""
    resources = template["Resources"]
    connection = resources["ReconcileSourceConnection"]
    assert connection["Type"] == "AWS::Glue::Connection" and connection["Condition"] == "HasSourceConnection"
    definition = connection["Properties"]["ConnectionInput"]
    assert definition["ConnectionType"] == "JDBC"
    assert definition["ConnectionProperties"]["SECRET_ID"] == {"Ref": "ReconcileSourceSecretArn"}
    assert definition["ConnectionProperties"]["JDBC_CONNECTION_URL"] == {"Ref": "ReconcileSourceJdbcUrl"}
    assert definition["PhysicalConnectionRequirements"]["SubnetId"] == {"Ref": "ReconcileSubnetId"}
    assert resources["ReconcileJob"]["Properties"]["Connections"] == {
        "Fn::If": [
            "HasSourceConnection",
            {"Connections": [{"Ref": "ReconcileSourceConnection"}]},
            {"Ref": "AWS::NoValue"},
        ]
    }
    assert "Connections" not in resources["RawAuditJob"]["Properties"]
    needs = template["Rules"]["SourceConnectionNeeds"]["Assertions"]
    assert {a["Assert"]["Fn::Not"][0]["Fn::Equals"][0]["Ref"] for a in needs} == {
        "ReconcileSourceSecretArn",
        "ReconcileSecurityGroupIds",
        "ReconcileSourceJdbcUrl",
    }


def test_divergence_repairs_recovered_files_and_failed_runs_reach_the_alarm_topic(template):
    """An operator learns of each: DivergedRows and Repairs (service reconcile) and FilesRecovered (service
    raw-audit) alarm on the topic; a failed run of either job is a Glue failure event on the topic; a new
    lease holder stops reconcile runs another execution started (they write under the lease)."""
    resources = template["Resources"]
    for alarm, metric, service in (
        ("SourceDivergedAlarm", "DivergedRows", "reconcile"),
        ("DivergenceRepairsAlarm", "Repairs", "reconcile"),
        ("FilesRecoveredAlarm", "FilesRecovered", "raw-audit"),
    ):
        properties = resources[alarm]["Properties"]
        assert properties["MetricName"] == metric and properties["Namespace"] == "DmsIcebergLake"
        assert properties["Dimensions"] == [{"Name": "service", "Value": service}]
        assert properties["Threshold"] == 0 and properties["ComparisonOperator"] == "GreaterThanThreshold"
        assert properties["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    failed = resources["GlueJobFailedRule"]["Properties"]["EventPattern"]
    assert {"Ref": "ReconcileJob"} in failed["detail"]["jobName"]
    assert {"Ref": "RawAuditJob"} in failed["detail"]["jobName"]
    lease_jobs = resources["LeaseFunction"]["Properties"]["Environment"]["Variables"]["GLUE_JOB_NAMES"]
    assert "${ReconcileJob}" in lease_jobs["Fn::Sub"]
