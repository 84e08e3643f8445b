"""A class-data archive of the local Spark JVM (the JDK's application class-data sharing, a dynamic archive):
the classes a local session loads (Spark's, Iceberg's, the JDBC drivers') parsed, verified and laid out once,
then mapped by every later JVM of the same JDK and class path instead of read from 250 jars again.

    python -m localaws.jvm_archive      # `make test`: makes the archive when it is missing, prints its path

A test run starts about 17 such JVMs (each pytest worker's session, each local AWS's warm Spark worker, the job
runs that start cold); a cold one that runs a small Iceberg workload spends 9.8 CPU-seconds with its classes
from the jars, 6.0 from the archive (bench/RESULTS.md, "Classes loaded once for every JVM of a test run").
The archive changes no behaviour: a JVM whose JDK or class path differs from the archive's (a jar updated,
another JDBC driver installed) ignores it and loads its classes as before (`-Xshare:auto`, the JVM's default),
and the archive's name carries a digest of both, so such a change makes a new one. Only the tests use it
(tests/conftest.py); on Glue and EMR every JVM is the service's own."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ARCHIVE_DIR = REPO_ROOT / "var" / "jvm-archive"
SPARK_JOBS = REPO_ROOT / "spark_jobs"


def java_home(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path | None:
    """The JDK that Spark's launcher runs: $JAVA_HOME, else the one of `java` on PATH (spark-class's rule)."""
    if environ.get("JAVA_HOME"):
        return Path(environ["JAVA_HOME"]).resolve()
    java = shutil.which("java", path=environ.get("PATH"))
    return Path(java).resolve().parent.parent if java else None


def class_path_jars() -> list[Path]:
    """The jars of a local session's class path: the session's own (lakehouse.io.session: the Iceberg runtime, the
    JDBC drivers installed), then Spark's (sorted: the launcher lists its folder, the digest needs one order)."""
    if str(SPARK_JOBS) not in sys.path:
        sys.path.insert(0, str(SPARK_JOBS))
    import pyspark
    from lakehouse.io.session import local_jars

    spark_jars = Path(pyspark.__file__).parent / "jars"
    return [Path(jar) for jar in local_jars()] + sorted(spark_jars.glob("*.jar"))


def archive_path(
    directory: Path | None = None, environ: os._Environ[str] | dict[str, str] = os.environ
) -> Path:
    """Where the archive of this JDK and class path is: its name carries a digest of the JDK (its path and
    release) and of each jar (path, size, modification time), the facts the JVM checks before it maps one."""
    digest = hashlib.sha256()
    home = java_home(environ)
    digest.update(str(home).encode())
    release = home / "release" if home else None
    if release and release.is_file():
        digest.update(release.read_bytes())
    for jar in class_path_jars():
        stat = jar.stat()
        digest.update(f"{jar}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return (directory or ARCHIVE_DIR) / f"spark-{digest.hexdigest()[:16]}.jsa"


def archive_option(path: Path) -> str:
    """The JVM option that maps `path` (ignored by a JVM whose JDK or class path is not the archive's)."""
    return f"-XX:SharedArchiveFile={path}"


def existing_archive_option(
    directory: Path | None = None, environ: os._Environ[str] | dict[str, str] = os.environ
) -> str:
    """`archive_option` of this machine's archive, or "" when it was not made (`make jvm-archive`)."""
    path = archive_path(directory, environ)
    return archive_option(path) if path.is_file() else ""


WORKLOAD = """
import sys, tempfile
sys.path.insert(0, {spark_jobs!r})
from lakehouse.base.config import LakeConfig
from lakehouse.io.session import build_session
with tempfile.TemporaryDirectory(prefix="jvm-archive-") as scratch:
    spark = build_session(LakeConfig(catalog_name="archive", warehouse=scratch), "jvm-archive")
    spark.sql("CREATE TABLE archive.db.t (id BIGINT, v STRING, d DECIMAL(7,2)) USING iceberg")
    spark.sql("INSERT INTO archive.db.t VALUES (1, 'a', 1.50), (2, 'b', NULL)")
    spark.createDataFrame([(2, "c", None), (3, "d", None)], "id BIGINT, v STRING, d DECIMAL(7,2)") \\
        .createOrReplaceTempView("changes")
    spark.sql("MERGE INTO archive.db.t t USING changes c ON t.id = c.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.sql("DELETE FROM archive.db.t WHERE id = 1")
    spark.sql("SELECT v, count(*) FROM archive.db.t GROUP BY v ORDER BY v").collect()
    spark.sql("SELECT * FROM archive.db.t.snapshots").collect()
    print(spark.sparkContext._jvm.java.lang.System.getProperty("java.class.path"))
    spark.stop()
"""


def create(path: Path, java_options: str = "") -> Path:
    """Make the archive at `path`: a local session (with `java_options`; the JIT's options change nothing of
    what a JVM may map, so the JVM's defaults serve every JVM of the tests) runs a small Iceberg workload
    (create, insert, merge, delete, read, a metadata table) and its JVM writes the classes it loaded when it
    exits; a JVM that must map it (`-Xshare:on`) then checks it against the same class path before it takes its
    name. Raises RuntimeError with the JVM's own words when either step fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = Path(tempfile.mkdtemp(prefix=".draft-", dir=path.parent)) / path.name
    try:
        options = f"{java_options} -XX:ArchiveClassesAtExit={draft} -Xlog:cds=off -Xlog:cds+dynamic=off"
        run = subprocess.run(
            [sys.executable, "-c", WORKLOAD.format(spark_jobs=str(SPARK_JOBS))],
            env=os.environ | {"LAKE_SPARK_JAVA_OPTIONS": options.strip(), "LAKE_SPARK_DRIVER_MEMORY": "1g"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        if run.returncode != 0 or not draft.is_file():
            raise RuntimeError(
                f"the archive's workload failed (exit {run.returncode}):\n{run.stderr[-4000:]}"
            )
        class_path = run.stdout.strip().splitlines()[-1]
        home = java_home()
        java = str(home / "bin" / "java") if home else "java"
        check = subprocess.run(
            [java, "-Xshare:on", archive_option(draft), "-cp", class_path, "-version"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check.returncode != 0:
            raise RuntimeError(f"a JVM cannot map the new archive:\n{check.stdout}{check.stderr}")
        os.replace(draft, path)
        return path
    finally:
        shutil.rmtree(draft.parent, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--force", action="store_true", help="make it again even if it exists")
    args = parser.parse_args(argv)
    path = archive_path()
    if path.is_file() and not args.force:
        print(f"JVM class archive ready: {path}")
        return 0
    for stale in path.parent.glob("spark-*.jsa"):
        stale.unlink()
    try:
        create(path)
    except RuntimeError as failed:
        # the tests run as before without it, only slower: said, not fatal
        print(f"WARNING: no JVM class archive, the tests' JVMs load their classes from the jars: {failed}")
        return 0
    print(f"JVM class archive made: {path} ({path.stat().st_size / 2**20:.0f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
