"""Which Iceberg the jobs run: the engine's own by default (Glue 5.1's through `--datalake-formats iceberg`, the EMR
release's on EMR Serverless), the runtime jar the tests run on when `IcebergJarKey` names one; and the local
session runs the same Iceberg minor version as the default."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from deploy import glue_artifacts
from tests.unit.template.test_template import REPO
from tools import emr_serverless_asl

NO_VALUE = {"Ref": "AWS::NoValue"}
PINNED_JAR = {"Fn::Sub": "s3://${ArtifactsBucket}/${IcebergJarKey}"}
EMR_OWN_RUNTIME = (
    "/usr/share/aws/iceberg/lib/iceberg-spark3-runtime.jar"  # "Using Apache Iceberg with EMR Serverless"
)
# What each engine bundles (AWS Glue guide, "Using the Iceberg framework in AWS Glue" and "Migrating to AWS Glue
# 5.1"; EMR Release Guide, "Iceberg release history"): the engine version -> (Spark, Iceberg).
GLUE_BUNDLES = {"5.0": ("3.5.4", "1.7.1"), "5.1": ("3.5.6", "1.10.0")}
EMR_BUNDLES = {"emr-7.12.0": ("3.5.6", "1.10.0")}


def _glue_jobs(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Glue::Job"
    }


def _resolved(value: Any, has_jar: bool) -> Any:
    """`value` as CloudFormation makes it for an IcebergJarKey that is set (has_jar) or empty: Fn::If on
    HasIcebergJar taken, AWS::NoValue dropped from maps."""
    if isinstance(value, dict) and set(value) == {"Fn::If"} and value["Fn::If"][0] == "HasIcebergJar":
        return _resolved(value["Fn::If"][1 if has_jar else 2], has_jar)
    if isinstance(value, dict):
        resolved = {key: _resolved(item, has_jar) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item != NO_VALUE}
    return value


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _pinned_version() -> str:
    match = re.fullmatch(
        r"iceberg-spark-runtime-3\.5_2\.12-(\d+\.\d+\.\d+)\.jar", glue_artifacts.ICEBERG_RUNTIME_JAR
    )
    assert match, glue_artifacts.ICEBERG_RUNTIME_JAR
    return match[1]


def test_the_jobs_run_glues_own_iceberg_unless_a_jar_is_named(template):
    """Given the template's default (IcebergJarKey empty), Then every Glue job asks Glue for its own Iceberg
    (`--datalake-formats iceberg`) and names no jar; given a key, Then every job loads that jar first and does not
    ask for Glue's (two runtimes on one classpath: which class wins would depend on the loader)."""
    parameter = template["Parameters"]["IcebergJarKey"]
    assert parameter["Default"] == ""
    assert template["Conditions"]["HasIcebergJar"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "IcebergJarKey"}, ""]}]
    }
    jobs = _glue_jobs(template)
    assert len(jobs) == 7
    for name, job in jobs.items():
        arguments = job["DefaultArguments"]
        own = _resolved(arguments, has_jar=False)
        pinned = _resolved(arguments, has_jar=True)
        assert own["--datalake-formats"] == "iceberg", name
        assert "--extra-jars" not in own and "--user-jars-first" not in own, name
        assert "--datalake-formats" not in pinned, name
        assert (pinned["--extra-jars"], pinned["--user-jars-first"]) == (PINNED_JAR, "true"), name
        own.pop("--datalake-formats")
        assert own == {k: v for k, v in pinned.items() if k not in ("--extra-jars", "--user-jars-first")}, (
            name
        )
        assert not any(key.startswith("--conf") for key in arguments), name  # the session sets the catalog


@pytest.mark.parametrize(
    ("key", "accepted"),
    [
        ("", True),
        ("glue/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar", True),
        ("glue/jars/0123456789abcdef/iceberg-spark-runtime-3.5_2.12-1.10.2.jar", True),
        ("pinned", False),  # make deploy's word for "publish the tests' runtime": never a key
        ("/glue/jars/x.jar", False),
    ],
)
def test_iceberg_jar_key_is_empty_or_a_jar_in_the_bucket(template, key, accepted):
    pattern = template["Parameters"]["IcebergJarKey"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, key)) is accepted


def test_emr_runs_take_the_same_choice_the_release_runtime_or_the_pinned_jar(template):
    """Given the EMR Serverless state machine, Then every run's jars are the `IcebergJars` substitution: the
    release's own Iceberg runtime when IcebergJarKey is empty, the pinned jar when it names one."""
    substitutions = template["Resources"]["EmrPipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert _resolved(substitutions["IcebergJars"], has_jar=False) == EMR_OWN_RUNTIME
    assert _resolved(substitutions["IcebergJars"], has_jar=True) == PINNED_JAR
    emr = json.loads(emr_serverless_asl.EMR_ASL.read_text())
    runs = [s for s in emr["States"].values() if s.get("Resource") == emr_serverless_asl.EMR_SYNC]
    assert runs
    for state in runs:
        submit = state["Parameters"]["JobDriver"]["SparkSubmit"]["SparkSubmitParameters"]
        assert f"--jars {emr_serverless_asl.ICEBERG_JARS} " in submit


def test_the_local_session_runs_the_iceberg_minor_version_of_the_default_engines(template):
    """Given the Glue version and the EMR release label the template runs, Then the Iceberg runtime the tests,
    the demo and the benchmarks load (lakehouse.io.session, from its PyPI wheel) is the same minor version as
    the one those engines bundle (1.10: 1.10.2 here, 1.10.0 there; Maven, where 1.10.0 itself is, is not
    reachable from these machines), built for the same Spark line as the local PySpark; DEPLOY says which
    runs where."""
    import pyspark
    from lakehouse.io.session import iceberg_runtime_jar

    versions = {job["GlueVersion"] for job in _glue_jobs(template).values()}
    assert versions == {"5.1"}
    label = template["Parameters"]["EmrReleaseLabel"]["Default"]
    pinned = _pinned_version()
    assert Path(iceberg_runtime_jar()).name == glue_artifacts.ICEBERG_RUNTIME_JAR
    for spark, iceberg in (GLUE_BUNDLES["5.1"], EMR_BUNDLES[label]):
        assert _minor(iceberg) == _minor(pinned)
        assert _minor(pyspark.__version__) == _minor(spark) == "3.5"
    deploy = (REPO / "docs" / "DEPLOY.md").read_text()
    section = deploy[deploy.index("### Which Iceberg runs where") :]
    section = section[: section.index("\n#")]
    for text in ("Glue 5.1", "1.10.0", "Glue 5.0", "1.7.1", label, pinned, "--datalake-formats iceberg"):
        assert text in section, text
