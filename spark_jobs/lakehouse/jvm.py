"""Calls into the driver's JVM that avoid py4j's two costly paths (bench/RESULTS.md, "Java collections and
classes from Python").

- **A Java collection iterated from Python ends with a Java exception.** py4j's iterator calls `next()` until
  Java throws NoSuchElementException, and PySpark converts every Java exception on its way out: a dozen
  `isinstance` checks through the gateway, each resolving `py4j.reflection.TypeUtil` again, package by
  package. So `dict(java_map)`, `Observation.get` (it iterates its map) or `for x in java_list` cost some 30
  gateway calls and over a hundred class lookups that search every jar (250 of them). `java_dict` walks the
  map with `hasNext()`, `java_list` a list by index: no exception.
- **A class named by its package path is resolved one package at a time** (`jvm.org.apache.iceberg…`): a
  gateway call per component, and each package is first tried as a class (a miss through every jar; the
  first component also through every star import). `java_class` names the class in one step.
"""

from __future__ import annotations

from typing import Any

from py4j.java_gateway import JavaClass
from pyspark.sql import Observation, SparkSession


def java_class(spark: SparkSession, name: str) -> JavaClass:
    """The JVM class `name` (fully qualified), for its static members and constructors, with no lookup."""
    return JavaClass(name, spark.sparkContext._gateway._gateway_client)  # type: ignore[union-attr]


def java_dict(java_map: Any) -> dict[Any, Any]:
    """A java.util.Map's entries as a Python dict (keys and values converted as py4j converts them)."""
    entries: dict[Any, Any] = {}
    iterator = java_map.entrySet().iterator()
    while iterator.hasNext():
        entry = iterator.next()
        entries[entry.getKey()] = entry.getValue()
    return entries


def java_list(items: Any) -> list[Any]:
    """A java.util.List's items as a Python list (each converted as py4j converts it)."""
    return [items.get(index) for index in range(items.size())]


def observed_metrics(observation: Observation) -> dict[str, Any]:
    """What `observation.get` returns (waiting for the observed action alike), read with `java_dict`.
    PySpark keeps the JVM's Observation in `_jo`, set once the DataFrame is observed."""
    return java_dict(observation._jo.getAsJava())  # type: ignore[union-attr]
