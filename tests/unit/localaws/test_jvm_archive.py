"""The JVM class archive (localaws.jvm_archive) is found by the JDK and the jars it was made for, and only then:
a jar or a JDK that changed gets a new one, never one a JVM would refuse."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localaws import jvm_archive


@pytest.fixture
def jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    made = []
    for name in ("iceberg-spark-runtime.jar", "spark-core.jar"):
        jar = tmp_path / "jars" / name
        jar.parent.mkdir(exist_ok=True)
        jar.write_bytes(b"PK" + name.encode())
        made.append(jar)
    monkeypatch.setattr(jvm_archive, "class_path_jars", lambda: list(made))
    return made


def jdk(root: Path, release: str) -> dict[str, str]:
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "release").write_text(release)
    return {"JAVA_HOME": str(root)}


def test_the_archive_is_named_by_its_jdk_and_each_jar_it_was_made_for(
    tmp_path: Path, jars: list[Path]
) -> None:
    """Given a JDK and the session's jars,
    When the archive's path is asked again, then after a jar changes, the JDK is another or its release changes,
    Then the same facts give the same path and each change gives a new one (the JVM would refuse the old)."""
    environ = jdk(tmp_path / "jdk17", 'JAVA_VERSION="17.0.15"')
    first = jvm_archive.archive_path(tmp_path, environ)
    assert first == jvm_archive.archive_path(tmp_path, environ)
    assert first.parent == tmp_path and first.name.startswith("spark-") and first.suffix == ".jsa"

    jars[1].write_bytes(b"PK a rebuilt spark-core")
    rebuilt = jvm_archive.archive_path(tmp_path, environ)
    other_jdk = jvm_archive.archive_path(tmp_path, jdk(tmp_path / "jdk21", 'JAVA_VERSION="17.0.15"'))
    jdk(tmp_path / "jdk17", 'JAVA_VERSION="17.0.16"')
    updated = jvm_archive.archive_path(tmp_path, environ)
    assert len({first, rebuilt, other_jdk, updated}) == 4


def test_the_option_is_given_only_when_the_archive_was_made(tmp_path: Path, jars: list[Path]) -> None:
    """Given no archive, Then no option (the JVMs load their classes from the jars); Given the archive made,
    Then the option that maps it."""
    environ = jdk(tmp_path / "jdk", "17")
    assert jvm_archive.existing_archive_option(tmp_path, environ) == ""
    archive = jvm_archive.archive_path(tmp_path, environ)
    archive.write_bytes(b"archive")
    assert jvm_archive.existing_archive_option(tmp_path, environ) == f"-XX:SharedArchiveFile={archive}"


def test_a_workload_whose_jvm_cannot_start_makes_no_archive_and_says_why(tmp_path: Path) -> None:
    """Given JVM options the JVM refuses to start with (Spark's launcher ignores unknown ones: a missing archive
    that must be mapped),
    When the archive is made with them,
    Then it fails with the JVM's own words and leaves no archive, nor a draft, behind."""
    archive = tmp_path / "spark-0.jsa"
    with pytest.raises(RuntimeError, match="Specified shared archive not found"):
        jvm_archive.create(archive, f"-Xshare:on -XX:SharedArchiveFile={tmp_path / 'missing.jsa'}")
    assert os.listdir(tmp_path) == []
