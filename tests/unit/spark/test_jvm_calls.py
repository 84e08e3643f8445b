"""lakehouse.io.jvm: Java maps, observed metrics and classes read from Python without py4j's costly paths (a Java
exception ending every iteration, a class lookup per package), with the same values."""

from __future__ import annotations

from decimal import Decimal

import pytest
from lakehouse.io.jvm import java_class, java_dict, java_list, observed_metrics
from pyspark.errors.exceptions import captured
from pyspark.sql import Observation
from pyspark.sql import functions as F

pytestmark = pytest.mark.spark


@pytest.fixture
def java_exceptions(monkeypatch) -> list[str]:
    """The Java exceptions PySpark converts while the test runs (class names)."""
    seen: list[str] = []
    convert = captured.convert_exception

    def counting(error):
        seen.append(str(error.getClass().getName()))
        return convert(error)

    monkeypatch.setattr(captured, "convert_exception", counting)
    return seen


def test_a_java_map_reads_as_the_same_dict_without_a_java_exception(spark, java_exceptions) -> None:
    """Given a java.util.HashMap of a string, a long and a decimal,
    When it is read with java_dict, and then with dict() (py4j's iteration),
    Then both give the same dict, and only dict() made Java throw (the end of its iteration)."""
    java_map = java_class(spark, "java.util.HashMap")()
    java_map.put("name", "customer")
    java_map.put("rows", 12345678901)
    java_map.put("amount", java_class(spark, "java.math.BigDecimal")("12.50"))

    read = java_dict(java_map)
    assert java_exceptions == []
    assert read == {"name": "customer", "rows": 12345678901, "amount": Decimal("12.50")}

    assert dict(java_map) == read
    assert java_exceptions == ["java.util.NoSuchElementException"]


def test_a_java_list_reads_as_the_same_list_without_a_java_exception(spark, java_exceptions) -> None:
    """Given a java.util.ArrayList of three strings (as a partition spec's fields() is a list),
    When it is read with java_list, and then with list() (py4j's iteration),
    Then both give the same list, in order, and only list() made Java throw."""
    items = java_class(spark, "java.util.ArrayList")()
    for item in ("c", "a", "b"):
        items.add(item)

    read = java_list(items)
    assert java_exceptions == []
    assert read == ["c", "a", "b"]

    assert list(items) == read
    assert java_exceptions == ["java.util.NoSuchElementException"]


def test_observed_metrics_are_what_observation_get_returns_without_a_java_exception(
    spark, java_exceptions
) -> None:
    """Given a DataFrame observed with a count, a sum and a maximum,
    When its action ran and the metrics are read with observed_metrics,
    Then they equal what Observation.get returns, and reading them made Java throw nothing."""
    observation = Observation("figures")
    frame = spark.range(10).observe(
        observation, F.count(F.lit(1)).alias("rows"), F.sum("id").alias("total"), F.max("id").alias("top")
    )
    assert frame.count() == 10
    java_exceptions.clear()

    metrics = observed_metrics(observation)

    assert java_exceptions == []
    assert metrics == {"rows": 10, "total": 45, "top": 9}
    assert metrics == observation.get


def test_a_class_named_in_one_step_is_the_class_the_package_walk_finds(spark) -> None:
    """Given classes the jobs call (Iceberg's Spark3Util, CommitMetadata, Conversions, SnapshotUtil; Java's),
    When each is named with java_class,
    Then the JVM loads it, and it is the class py4j's package-by-package walk resolves."""
    jvm = spark.sparkContext._jvm
    for name in (
        "org.apache.iceberg.spark.Spark3Util",
        "org.apache.iceberg.spark.CommitMetadata",
        "org.apache.iceberg.types.Conversions",
        "org.apache.iceberg.util.SnapshotUtil",
        "java.util.HashMap",
        "java.lang.RuntimeException",
    ):
        walked = jvm
        for part in name.split("."):
            walked = getattr(walked, part)
        loaded = java_class(spark, name)._java_lang_class  # the JVM's Class: fails for a class it lacks
        assert loaded.getName() == walked._java_lang_class.getName() == name
    assert java_class(spark, "java.lang.Integer").MAX_VALUE == jvm.java.lang.Integer.MAX_VALUE


@pytest.fixture
def gateway_calls(spark, monkeypatch) -> list[str]:
    """The commands the session's gateway client sends while the test runs."""
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def counting(command, *args, **kwargs):
        sent.append(command)
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counting)
    return sent


def test_what_pyspark_reaches_on_every_call_is_resolved_once_per_session(spark, gateway_calls) -> None:
    """Given the session's view of the JVM with PySpark's short names and package roots bound anew,
    When `functions.col`, a class by its package path and its static method are reached twice,
    Then the second time sends nothing to the JVM (the first resolved them), the calls still work, and a
    static field is still read from the JVM each time (its value may change)."""
    from lakehouse.io.session import import_short_names

    jvm = import_short_names(spark).sparkContext._jvm  # bound anew: nothing resolved yet

    def reach() -> tuple:
        return (
            jvm.functions.col,
            jvm.org.apache.spark.sql.Observation,
            jvm.py4j.reflection.TypeUtil.isInstanceOf,
        )

    first = reach()
    assert gateway_calls, "the first reach resolves through the JVM"
    gateway_calls.clear()
    assert reach() == first
    assert gateway_calls == []

    assert str(first[0]("a").toString()) == "a"
    assert first[2]("java.lang.String", "text") is True
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    gateway_calls.clear()
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    assert len(gateway_calls) == 1 and "MAX_VALUE" in gateway_calls[0]
