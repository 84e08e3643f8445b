"""Every JVM a test run starts compiles with C1 only (tests/conftest.py, TEST_JIT_OPTIONS, set in the process's
environment by pytest_configure) and its sessions generate no code (TEST_SPARK_CONF): the tests' tables are a
few rows, so C2's compiling, and Janino's, is CPU spent on nothing. Its code cache keeps the tiered default
(240 MB): C1 only would shrink it to 48 MB, which a long session fills. A local driver also maps the JVM class
archive (localaws.jvm_archive) instead of loading its classes from the jars."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from localaws.jvm_archive import archive_path
from tests.conftest import (
    PRODUCT_SPARK_CONF,
    TEST_JIT_OPTIONS,
    TEST_SPARK_CONF,
    jvm_environment,
    session_settings,
)


def vm_option(spark, name: str) -> str:
    jvm = spark._jvm
    bean_class = jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(bean_class)
    return bean.getVMOption(name).getValue()


@pytest.mark.spark
def test_the_tests_session_jvm_compiles_with_c1_only_into_a_full_size_code_cache(spark) -> None:
    """Given the shared session of the tests (whichever test of this process launched its JVM), Then its JVM
    stops at C1 (tier 1), keeps the product's local option (huge generated methods compiled) and has a code
    cache of 240 MB, not the 48 MB C1 only would give it."""
    assert (
        vm_option(spark, "TieredStopAtLevel"),
        vm_option(spark, "DontCompileHugeMethods"),
        vm_option(spark, "ReservedCodeCacheSize"),
    ) == ("1", "false", str(240 * 1024 * 1024))


@pytest.mark.spark
def test_the_tests_sessions_interpret_expressions_instead_of_generating_code(spark) -> None:
    """Given the shared session of the tests (its JVM launched with the submit arguments pytest_configure set,
    as a local AWS's job runs are: localaws_plugin.settings.host_process_base_env),
    Then it runs without whole-stage code generation and with expressions interpreted (TEST_SPARK_CONF), and a
    query still computes its rows."""
    assert {name: spark.conf.get(name) for name in TEST_SPARK_CONF} == TEST_SPARK_CONF
    assert (
        "*("
        not in spark.range(3).selectExpr("id * 2 AS doubled")._jdf.queryExecution().executedPlan().toString()
    )
    assert [r.doubled for r in spark.range(3).selectExpr("id * 2 AS doubled").collect()] == [0, 2, 4]


@pytest.mark.spark
def test_the_oracle_tests_run_the_products_generated_code_and_give_the_session_back(spark) -> None:
    """Given the shared session, which interprets (TEST_SPARK_CONF),
    When a test asks for `generated_code` (the oracle tests of the apply and the history do),
    Then its queries run in whole-stage generated code with Spark's defaults (PRODUCT_SPARK_CONF), as the
    product's do, computing the same rows; and after it the session interprets again."""

    def plan_and_rows() -> tuple[str, list[int]]:
        query = spark.range(3).selectExpr("id * 2 AS doubled")
        return query._jdf.queryExecution().executedPlan().toString(), [r.doubled for r in query.collect()]

    with session_settings(spark, PRODUCT_SPARK_CONF):  # what the `generated_code` fixture does
        generated_plan, generated_rows = plan_and_rows()
        assert {name: spark.conf.get(name) for name in PRODUCT_SPARK_CONF} == PRODUCT_SPARK_CONF
    interpreted_plan, interpreted_rows = plan_and_rows()

    assert "*(" in generated_plan and "*(" not in interpreted_plan
    assert generated_rows == interpreted_rows == [0, 2, 4]
    assert {name: spark.conf.get(name) for name in TEST_SPARK_CONF} == TEST_SPARK_CONF


def test_a_local_session_gets_c1_for_its_driver_and_a_local_cluster_for_its_executors_too() -> None:
    """Given no JVM settings in the environment,
    When the tests' session settings are asked for a local master, then for local-cluster,
    Then the driver gets the product's local options plus C1 only; on local-cluster the executors get C1 too
    (spark-submit's arguments, which pyspark reads when it launches the driver)."""
    options = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    no_generated_code = [
        "--conf",
        "spark.sql.codegen.wholeStage=false",
        "--conf",
        "spark.sql.codegen.factoryMode=NO_CODEGEN",
    ]
    local = jvm_environment({})
    assert local["LAKE_SPARK_JAVA_OPTIONS"] == f"-XX:-DontCompileHugeMethods {options}"
    assert shlex.split(local["PYSPARK_SUBMIT_ARGS"]) == [*no_generated_code, "pyspark-shell"]
    cluster = jvm_environment({"LAKE_SPARK_MASTER": "local-cluster[2,1,1024]"})
    assert cluster["LAKE_SPARK_JAVA_OPTIONS"] == f"-XX:-DontCompileHugeMethods {options}"
    # pyspark splits the submit arguments as a shell would: the executors' options stay one setting
    assert shlex.split(cluster["PYSPARK_SUBMIT_ARGS"]) == [
        *no_generated_code,
        "--conf",
        f"spark.executor.extraJavaOptions={options}",
        "pyspark-shell",
    ]
    assert options == TEST_JIT_OPTIONS


def test_settings_the_caller_made_win() -> None:
    """Given JVM options set by whoever runs the tests (empty: the JVM's defaults) and their own submit
    arguments, Then the tests' session keeps them as they are."""
    environ = {
        "LAKE_SPARK_MASTER": "local-cluster[2,1,1024]",
        "LAKE_SPARK_JAVA_OPTIONS": "",
        "PYSPARK_SUBMIT_ARGS": "--driver-memory 2g pyspark-shell",
    }

    assert jvm_environment(environ) == {
        "LAKE_SPARK_JAVA_OPTIONS": "",
        "PYSPARK_SUBMIT_ARGS": "--driver-memory 2g pyspark-shell",
    }


def test_a_local_driver_maps_the_class_archive_and_a_local_cluster_does_not() -> None:
    """Given the option that maps the JVM class archive,
    When the tests' session settings are asked for a local master, then for local-cluster, then with options
    the caller set,
    Then only the local driver gets it (a local-cluster's JVMs load Spark's jars alone, a class path the archive
    is not for), after C1 only; the caller's options stay as they are."""
    archive = "-XX:SharedArchiveFile=/var/a.jsa"
    local = jvm_environment({}, archive)["LAKE_SPARK_JAVA_OPTIONS"]
    assert local == f"-XX:-DontCompileHugeMethods {TEST_JIT_OPTIONS} {archive}"
    cluster = jvm_environment({"LAKE_SPARK_MASTER": "local-cluster[2,1,1024]"}, archive)
    assert archive not in cluster["LAKE_SPARK_JAVA_OPTIONS"] + cluster["PYSPARK_SUBMIT_ARGS"]
    assert (
        jvm_environment({"LAKE_SPARK_JAVA_OPTIONS": "-Xss4m"}, archive)["LAKE_SPARK_JAVA_OPTIONS"] == "-Xss4m"
    )


@pytest.mark.spark
def test_the_tests_session_jvm_maps_the_class_archive_made_for_its_class_path(spark) -> None:
    """Given the JVM class archive `make test` makes (localaws.jvm_archive) and the tests' shared session,
    Then the session's JVM was given it, and a JVM of the same JDK with the session's class path maps it where
    mapping is required (`-Xshare:on` refuses an archive of another JDK or class path)."""
    archive = archive_path()
    assert archive.is_file(), f"no JVM class archive at {archive}: `make jvm-archive` makes it"
    assert vm_option(spark, "SharedArchiveFile") == str(archive)
    jvm = spark._jvm
    java = Path(jvm.java.lang.System.getProperty("java.home")) / "bin" / "java"
    class_path = jvm.java.lang.System.getProperty("java.class.path")
    mapped = subprocess.run(
        [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", "-cp", class_path, "-version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert mapped.returncode == 0, mapped.stderr
