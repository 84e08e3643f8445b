"""A warm Spark worker's heap (localaws_plugin.spark_worker.heap_options): a floor, so that a run does not start
from the few MB an idle worker shrank to, and never above the maximum heap, which would stop the JVM."""

from __future__ import annotations

import pytest
from localaws_plugin.spark_worker import HEAP_FLOOR_MB, IDLE_HEAP_OPTIONS, heap_options


@pytest.mark.parametrize(
    ("driver_memory", "floor_mb"),
    [
        ("4g", HEAP_FLOOR_MB),
        ("4GB", HEAP_FLOOR_MB),
        ("1t", HEAP_FLOOR_MB),
        ("2048", HEAP_FLOOR_MB),
        ("1g", 1024),
        ("512m", 512),
        ("768", 768),
        (" 640M ", 640),
    ],
)
def test_the_heap_has_a_floor_of_1_gb_or_the_whole_heap_where_that_is_less(driver_memory, floor_mb):
    """Given spark.driver.memory as Spark spells it (a unit, or none: MB),
    When the worker's JVM options are made,
    Then they are the idle options and a floor of 1 GB, or of the maximum heap where that is smaller."""
    assert heap_options(driver_memory) == f"{IDLE_HEAP_OPTIONS} -Xms{floor_mb}m"


@pytest.mark.parametrize("driver_memory", ["", "lots", "1.5g", "100k", "-1g"])
def test_a_size_spark_would_refuse_or_below_a_megabyte_gets_no_floor(driver_memory):
    """Given a driver memory Spark refuses (or under 1 MB), When the options are made, Then no -Xms is added:
    Spark's own error names the setting, not a JVM that cannot start."""
    assert heap_options(driver_memory) == IDLE_HEAP_OPTIONS
