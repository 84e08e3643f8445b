"""What the Spark jobs run, published to the stack's artifacts bucket at the keys the template's parameters name:

    python -m deploy.glue_artifacts --stack-name dms-iceberg-lake [--schema-file schema.json]   # fixed keys
    python -m deploy.glue_artifacts --list                                                     # lakehouse.zip's files

Entry scripts under `<JobCodePrefix>/scripts/`, the `lakehouse` library as `<JobCodePrefix>/lib/lakehouse.zip`
(the jobs' `--extra-py-files`), the refined models (`models/*.sql`) under `<JobCodePrefix>/models/` (the refine
job's `--models_uri`), when asked for, the Iceberg Spark runtime the tests ran on at `IcebergJarKey`
(the jobs' `--extra-jars`; by default they run Glue's own Iceberg) and, when given, the schema file at
`SchemaFileKey` (docs/CONTRACTS.md).

Two layouts. The template's defaults are fixed keys (`glue/scripts/…`, `glue/lib/lakehouse.zip`,
`glue/jars/<jar>`, `config/schema.json`): what the local stack publishes after its deploy. `make deploy`
(deploy.release) publishes a *release*: every key carries a hash of its content (`glue/code/<hash>/…`,
`glue/jars/<hash>/<jar>`, `config/schema-<hash>.json`) and goes to `sam deploy` as the parameters, so the
stack names the code it was deployed with and a rollback of the stack rolls the code back with it.
Honours AWS_ENDPOINT_URL, so the same command publishes to the local AWS.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SPARK_JOBS = REPO / "spark_jobs"
# The contracts the library shares with the Lambdas (their layer's source): the pure ones it imports travel in
# the same zip (lake_contracts.config and .s3 need pydantic and botocore, which the jobs never import).
SHARED = REPO / "functions" / "shared"
MODELS = REPO / "models"  # the refined models (docs/CONTRACTS.md), published beside the code
# The example models' tables, which the BI examples read (bi/queries: the Athena named queries, and the QuickSight
# dataset): the stack creates those only when the folder holds all three (template parameter ExampleModels).
# `IcebergJarKey=pinned` (to the release): publish the Iceberg runtime the tests run on and run the jobs on it.
PINNED_ICEBERG = "pinned"
EXAMPLE_MODELS = ("sales_enriched", "daily_revenue_by_category", "daily_revenue_by_state")
SHARED_CONTRACTS = (
    "__init__.py",
    "dms_files.py",
    "documents.py",
    "layout.py",
    "names.py",
    "resend_horizon.py",
    "run_report.py",
    "times.py",
)
GLUE_SCRIPTS = (
    "full_load_job.py",
    "cdc_job.py",
    "refine_job.py",
    "maintenance_job.py",
    "reconcile_job.py",
    "raw_audit_job.py",
    "reapply_job.py",
)
# The runtime lakehouse.io.session pins (a template test checks they are one jar), found without PySpark.
ICEBERG_WHEEL = "snowpark_connect_deps_iceberg"
ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
# The template's defaults: fixed keys.
FIXED_CODE_PREFIX = "glue"
SCHEMA_KEY = "config/schema.json"
# A zip's entries carry a time: one fixed time makes the same sources the same bytes, and so the same hash.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)
HASH_LENGTH = 16


def lakehouse_zip() -> bytes:
    """The Spark library as `--extra-py-files` wants it: `lakehouse/…` and the contracts it imports
    (`lake_contracts/…`) at the zip's root; the same sources always make the same bytes."""
    files = [
        (p, p.relative_to(SPARK_JOBS).as_posix()) for p in sorted((SPARK_JOBS / "lakehouse").rglob("*.py"))
    ]
    files += [(SHARED / "lake_contracts" / name, f"lake_contracts/{name}") for name in SHARED_CONTRACTS]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, name in files:
            entry = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, path.read_bytes())
    return buffer.getvalue()


def iceberg_runtime_jar() -> Path:
    """The Iceberg Spark runtime every test and benchmark runs on, from its PyPI wheel."""
    jar = Path(str(resources.files(ICEBERG_WHEEL) / "jars" / ICEBERG_RUNTIME_JAR))
    if not jar.is_file():
        raise FileNotFoundError(f"{jar} is missing: install snowpark-connect-deps-iceberg==1.0.2")
    return jar


def iceberg_jar_key() -> str:
    """The pinned runtime's key in the fixed layout (`IcebergJarKey` of a stack that asks for it; the template's
    default is empty: Glue's own Iceberg)."""
    return f"{FIXED_CODE_PREFIX}/jars/{ICEBERG_RUNTIME_JAR}"


@dataclass(frozen=True)
class Artifact:
    """One object to publish: its key, and its bytes or the file holding them (a jar is not read in)."""

    key: str
    body: bytes | None = None
    path: Path | None = None


@dataclass(frozen=True)
class Release:
    """The objects of one deploy and the template parameters that name them."""

    artifacts: tuple[Artifact, ...]
    parameters: Mapping[str, str]


def content_hash(chunks: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(hashlib.sha256(chunk).digest())
    return digest.hexdigest()[:HASH_LENGTH]


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:HASH_LENGTH]


def code_artifacts(prefix: str, models: Path | None = None) -> list[Artifact]:
    scripts = [Artifact(f"{prefix}/scripts/{s}", body=(SPARK_JOBS / s).read_bytes()) for s in GLUE_SCRIPTS]
    refined = [Artifact(f"{prefix}/models/{p.name}", body=p.read_bytes()) for p in model_files(models)]
    return [*scripts, Artifact(f"{prefix}/lib/lakehouse.zip", body=lakehouse_zip()), *refined]


def model_files(models: Path | None = None) -> list[Path]:
    """The refined models the refine job reads (`<JobCodePrefix>/models/`: its --models_uri)."""
    folder = models or MODELS
    return sorted(folder.glob("*.sql")) if folder.is_dir() else []


def has_example_models(models: Iterable[Path]) -> bool:
    """Whether the models include the example models the BI examples read (template parameter ExampleModels)."""
    return set(EXAMPLE_MODELS) <= {p.stem for p in models}


def release(schema_file: Path | None = None, iceberg_jar: Path | None = None) -> Release:
    """The versioned layout: the code (six scripts and the library) under `glue/code/<hash of them>/`, an
    Iceberg runtime jar when one is given under `glue/jars/<its hash>/` (without one, no jar and no
    IcebergJarKey parameter), the schema file as `config/schema-<its hash>.json` (without one, the stack keeps
    the schema file it has: no SchemaFileKey parameter)."""
    unversioned = code_artifacts("")
    code_prefix = f"glue/code/{content_hash([a.key.encode() + (a.body or b'') for a in unversioned])}"
    artifacts = code_artifacts(code_prefix)
    # no model: the loop starts no refine run (HasRefineModels)
    parameters = {
        "JobCodePrefix": code_prefix,
        "HasRefineModels": "true" if model_files() else "false",
        "ExampleModels": "true" if has_example_models(model_files()) else "false",
    }
    if iceberg_jar is not None:
        jar_key = f"glue/jars/{file_hash(iceberg_jar)}/{iceberg_jar.name}"
        artifacts.append(Artifact(jar_key, path=iceberg_jar))
        parameters["IcebergJarKey"] = jar_key
    if schema_file is not None:
        body = schema_file.read_bytes()
        schema_key = f"config/schema-{content_hash([body])}.json"
        artifacts.append(Artifact(schema_key, body=body))
        parameters["SchemaFileKey"] = schema_key
    return Release(tuple(artifacts), parameters)


def fixed(
    schema_file: Path | None = None, iceberg_jar: bool = True, models: Path | None = None
) -> list[Artifact]:
    """The fixed layout (the template's defaults), as the local stack publishes it."""
    artifacts = code_artifacts(FIXED_CODE_PREFIX, models)
    if iceberg_jar:
        artifacts.append(Artifact(iceberg_jar_key(), path=iceberg_runtime_jar()))
    if schema_file is not None:
        artifacts.append(Artifact(SCHEMA_KEY, body=schema_file.read_bytes()))
    return artifacts


def publish(s3: Any, bucket: str, artifacts: Iterable[Artifact], overwrite: bool) -> list[str]:
    """Put each artifact; `overwrite=False` skips a key that exists (a versioned key is its content)."""
    keys = []
    for artifact in artifacts:
        if overwrite or not _exists(s3, bucket, artifact.key):
            if artifact.path is not None:
                s3.upload_file(str(artifact.path), bucket, artifact.key)
            else:
                s3.put_object(Bucket=bucket, Key=artifact.key, Body=artifact.body or b"")
        keys.append(artifact.key)
    return keys


def upload_glue_artifacts(
    s3: Any, bucket: str, iceberg_jar: bool = True, models: Path | None = None
) -> list[str]:
    """The fixed layout's code, models (`models`: that folder instead of the checkout's) and jar (the local Glue
    runs the jobs with the project's own copy of the jar, so the local stack skips it: `iceberg_jar=False`);
    the jar is uploaded once (its name is its version)."""
    code = publish(s3, bucket, fixed(iceberg_jar=False, models=models), overwrite=True)
    delete_unpublished_models(s3, bucket, FIXED_CODE_PREFIX, code)
    jar = publish(s3, bucket, fixed(models=models)[len(code) :], overwrite=False) if iceberg_jar else []
    return code + jar


def delete_unpublished_models(s3: Any, bucket: str, prefix: str, published: Iterable[str]) -> list[str]:
    """Delete what `<prefix>/models/` holds beyond the keys just published: the fixed layout publishes over the
    same keys, so a model removed from the folder would stay, and the refine job would go on refreshing it."""
    kept = set(published)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/models/")
    stale = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"] not in kept]
    for key in stale:
        s3.delete_object(Bucket=bucket, Key=key)
    return stale


def _exists(s3: Any, bucket: str, key: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stack-name", default="dms-iceberg-lake")
    parser.add_argument("--schema-file", help="the schema file generated by python -m tools.schema_gen")
    parser.add_argument("--list", action="store_true", help="print the files of lakehouse.zip and stop")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(zipfile.ZipFile(io.BytesIO(lakehouse_zip())).namelist()))
        return 0
    import boto3

    stack = boto3.client("cloudformation").describe_stacks(StackName=args.stack_name)["Stacks"][0]
    bucket = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}["ArtifactsBucketName"]
    s3 = boto3.client("s3")
    keys = upload_glue_artifacts(s3, bucket)
    if args.schema_file:
        keys += publish(s3, bucket, [Artifact(SCHEMA_KEY, body=Path(args.schema_file).read_bytes())], True)
    for key in keys:
        print(f"s3://{bucket}/{key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
