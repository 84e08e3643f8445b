"""Calls into the driver's JVM that avoid py4j's two costly paths (bench/RESULTS.md, "Java collections and
classes from Python").

- **A Java collection iterated from Python ends with a Java exception.** py4j's iterator calls `next()` until
  Java throws NoSuchElementException, and PySpark converts every Java exception on its way out: a dozen
  `isinstance` checks through the gateway, each resolving `py4j.reflection.TypeUtil` again, package by
  package. So `dict(java_map)`, `Observation.get` (it iterates its map) or `for x in java_list` cost some 30
  gateway calls and, on a view that does not remember names (`remember_names`), over a hundred class lookups
  that search every jar (250 of them). `java_dict` walks the map with `hasNext()`, `java_list` a list by
  index: no exception.
- **A class named by its package path is resolved one package at a time** (`jvm.org.apache.iceberg…`): a
  gateway call per component, and each package is first tried as a class (a miss through every jar; the
  first component also through every star import). `java_class` names the class in one step.
- **py4j remembers nothing it resolved.** PySpark reaches `sc._jvm.functions` for every `F.col`, `F.lit`…: a
  gateway call that first tries `functions` as a class of the default package (a miss through every jar, even
  for a name imported singly), then a second call for the method (the JVM copies all 600 of the class's public
  methods to find it), then the call itself. `remember_names` binds such names on the gateway's view as
  objects that keep what they resolved: a class, package or static method is asked for once per session.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView
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


class _RememberedClass(JavaClass):
    """A JVM class whose static methods and nested classes are resolved once (a static field's value is read
    each time: it may change)."""

    def __getattr__(self, name: str) -> Any:
        member = super().__getattr__(name)
        if isinstance(member, JavaClass):
            member = _RememberedClass(member._fqn, self._gateway_client)
        elif not isinstance(member, JavaMember):
            return member
        self.__dict__[name] = member
        return member


class _RememberedPackage(JavaPackage):
    """A JVM package whose subpackages and classes are resolved once (a name that is neither is asked again)."""

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if isinstance(found, JavaClass):
            found = _RememberedClass(found._fqn, self._gateway_client)
        elif isinstance(found, JavaPackage):
            found = _RememberedPackage(found._fqn, self._gateway_client, self._jvm_id)
        else:
            return found
        self.__dict__[name] = found
        return found


def remember_names(view: JVMView, classes: Iterable[str], packages: Iterable[str]) -> None:
    """Bind on `view` each class of `classes` (fully qualified) under its short name and each top-level
    package of `packages`, as objects that resolve what is reached through them once."""
    client = view._gateway_client
    for name in classes:
        setattr(view, name.rsplit(".", 1)[1], _RememberedClass(name, client))
    for package in packages:
        setattr(view, package, _RememberedPackage(package, client, view._id))
