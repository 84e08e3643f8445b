"""The Spark tests that matter run with the driver and two executors in separate JVMs (Spark's
`local-cluster[2,1,1024]`), so that whatever works only because they share one process (files staged
on the driver, local paths in closures, broadcasts, driver-side state read from a task) fails here. When
this test is collected with them (`make test`), they run only here, not in the one-JVM run as well
(tests/conftest.py, `run_in_the_multi_jvm_test`): the harsher setting proves their rules, once.

One test per distinct executor-side path (each costs 15-100 s of a 2-core CI machine here):
- CSV full load, CDC MERGE, a reload (full load with reload=True: a row gone, one kept for its newer change)
  and late changes ranked against it: test_a_reload_during_cdc_is_order_independent;
- MERGE with deletes on a bucketed table, tombstones outranking a late insert, the ledger skipping a
  replayed file: test_the_full_load_creates_the_schema_files_layout_and_cdc_rules_hold_on_it;
- schema evolution (a column added, one widened, one missing from a file): test_schema_evolution_...;
- malformed records to the quarantine table: test_malformed_records_are_quarantined_...;
- the Parquet reader (full load and CDC): test_parquet_full_load_then_cdc_...;
- MERGE with deletes on an unpartitioned table (merge-on-read delete files), their compaction and snapshot
  expiry, then a replay and a late file: test_maintenance_compacts_...;
- the refine (a build, then an incremental run over a workload): test_refine_builds_then_follows_...
Not run here, because what they run on executors is in the list above (their own rules run in the one-JVM
suite):
- test_rerunning_the_full_load_keeps_cdc_changes_and_a_reload_takes_the_new_load_files: a full load, a
  CDC apply and a reload, all three in the reload-during-CDC test; the rerun's no-op is decided on the
  driver (the table's load mark);
- test_insert_update_delete_outcomes_for_present_and_missing_keys: the same batch shape (delete then
  re-insert, replayed insert, update and delete of missing keys, insert then delete) is the bucketed test's;
- test_rerun_and_overlapping_manifest_apply_nothing_twice: the ledger's skip of an applied file runs in the
  bucketed test (the batch delivered again) and the maintenance test (a replay after compaction);
- test_a_deleted_row_stays_deleted_when_an_older_change_of_it_arrives_late: a late change older than a
  delete changes nothing in the bucketed test (the late insert of 3) and the reload test (late changes).

One SparkSession per pytest process (tests/conftest.py), so the subset runs in a pytest of its own, with
LAKE_SPARK_MASTER set; the `spark` fixture's session then ships the Iceberg and JDBC jars to the
executors (spark.jars) and the executors' Python workers find the lakehouse package through
PYTHONPATH. `test_the_executors_are_other_jvms` runs only there and proves they are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TEST_JIT_OPTIONS

pytestmark = pytest.mark.spark

MASTER = "local-cluster[2,1,1024]"
ROOT = Path(__file__).resolve().parents[3]
SUBSET = (
    "tests/unit/spark/test_multi_jvm.py::test_the_executors_are_other_jvms",
    "tests/unit/spark/test_cdc_rules.py::test_schema_evolution_adds_widens_and_keeps_dropped_columns",
    "tests/unit/spark/test_real_operations.py::test_a_reload_during_cdc_is_order_independent",
    "tests/unit/spark/test_bad_input.py::test_malformed_records_are_quarantined_with_file_record_and_reason",
    "tests/unit/spark/test_parquet.py::test_parquet_full_load_then_cdc_keeps_every_type_and_null_apart_from_text",
    "tests/unit/spark/test_maintenance.py::test_maintenance_compacts_expires_and_a_replay_and_a_late_file_still_behave",
    "tests/unit/spark/test_partitioned_layout.py::test_the_full_load_creates_the_schema_files_layout_and_cdc_rules_hold_on_it",
    "tests/unit/refine/test_refine.py::test_refine_builds_then_follows_changes_incrementally",
)
IN_CLUSTER = os.environ.get("LAKE_SPARK_MASTER", "").startswith("local-cluster")


@pytest.mark.skipif(IN_CLUSTER, reason="this is the run the test starts")
def test_the_tests_that_matter_pass_with_executors_in_their_own_jvms(tmp_path):
    """Given the chosen Spark tests,
    When they run in a pytest whose session is local-cluster[2,1,1024] (a driver and two executor JVMs),
    Then every one passes (their own assertions: whole tables), none skipped."""
    # this process's driver options without the JVM class archive: the cluster's driver loads Spark's jars
    # alone (its session ships the others), a class path the archive is not for (tests/conftest.py)
    driver_options = os.environ.get("LAKE_SPARK_JAVA_OPTIONS", "").split()
    # and without this process's submit arguments: the cluster's (its executors' JIT too) come from its own
    # pytest_configure
    inherited = {name: value for name, value in os.environ.items() if name != "PYSPARK_SUBMIT_ARGS"}
    env = inherited | {
        "LAKE_SPARK_MASTER": MASTER,
        "LAKE_SPARK_JAVA_OPTIONS": " ".join(
            o for o in driver_options if not o.startswith("-XX:SharedArchiveFile=")
        ),
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(ROOT / "spark_jobs"), str(ROOT / "localaws" / "plugin")]
            + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *SUBSET,
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'run'}",
            f"--junitxml={tmp_path / 'junit.xml'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    tail = (run.stdout + run.stderr)[-8000:]
    assert run.returncode == 0, tail
    assert f"{len(SUBSET)} passed" in run.stdout, tail


@pytest.mark.skipif(not IN_CLUSTER, reason="runs only in the local-cluster run")
def test_the_executors_are_other_jvms(spark):
    """Given the session of the local-cluster run,
    When its tasks run,
    Then two executors other than the driver ran them, each in a JVM whose process is not the driver's and
    which compiles with C1 only, as the driver (tests/conftest.py, TEST_JIT_OPTIONS)."""
    context = spark.sparkContext
    assert context.master == MASTER
    driver_pid = context._jvm.java.lang.ProcessHandle.current().pid()
    jvms = set(context.parallelize(range(8), 8).map(lambda _: _task_jvm()).collect())
    assert driver_pid not in {pid for pid, _ in jvms}
    assert len(jvms) == 2 and {name for _, name in jvms} == {"java"}, jvms
    for pid, _ in jvms:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        assert set(TEST_JIT_OPTIONS.split()) <= set(arguments), (pid, arguments)
    # the driver's block manager and one per executor
    assert context._jsc.sc().getExecutorMemoryStatus().size() == 3


def _task_jvm() -> tuple[int, str]:
    """The JVM that runs this Python task: the first `java` process up the task's parents (Linux /proc)."""
    pid = os.getpid()
    for _ in range(5):
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        if name == "java":
            return pid, name
    return pid, name
