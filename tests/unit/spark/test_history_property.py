"""Property: any I/U/D stream, cut into any files, delivered in any order, some files twice, in any batches,
leaves the history table equal to the oracle of every change delivered so far (tests/unit/spark/
test_history_rules.py), and its current versions equal to the clean table, after every batch."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lakehouse.apply.cdc import apply_cdc
from lakehouse.apply.full_load import full_load

from tests.support import DmsWriter, manifest, rows_of
from tests.unit.spark.test_history import COLUMNS, SCHEMA, TABLE, history_rows, write_cdc
from tests.unit.spark.test_history_rules import T0, Change, current_rows, oracle_history

pytestmark = pytest.mark.spark

EXAMPLES = int(os.environ.get("HISTORY_PROPERTY_EXAMPLES", "3"))
operation = st.tuples(
    st.sampled_from(["I", "U", "D"]),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=-50, max_value=50),
    st.one_of(st.none(), st.sampled_from(["a", "b c", 'q"t'])),
)


@st.composite
def scenarios(draw):
    loaded = draw(st.dictionaries(st.integers(0, 4), st.integers(0, 9), max_size=3))
    ops = draw(st.lists(operation, min_size=1, max_size=24))
    changes = [Change(n + 1, op, key, price, label) for n, (op, key, price, label) in enumerate(ops)]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(changes) - 1)), max_size=5)))
    files = [changes[a:b] for a, b in itertools.pairwise([0, *cuts, len(changes)]) if changes[a:b]]
    order = list(draw(st.permutations(range(len(files)))))
    for file, at in draw(st.lists(st.tuples(st.integers(0, len(files) - 1), st.integers(0, 20)), max_size=2)):
        order.insert(min(at, len(order)), file)  # a file delivered again
    batch_cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order) - 1)), max_size=3)))
    batches = [order[a:b] for a, b in itertools.pairwise([0, *batch_cuts, len(order)]) if b > a]
    return loaded, files, batches


# Always tried: the newest file first, then a delete's file, then the file its key's older changes are in.
LATE_AROUND_A_DELETE = (
    {1: 5},
    [
        [Change(1, "I", 2, 1, "x"), Change(2, "U", 1, 6, None)],
        [Change(3, "D", 2, 1, "x"), Change(4, "U", 1, 7, "y")],
        [Change(5, "I", 2, 9, "again")],
    ],
    [[2], [1], [0, 2]],
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(scenario=scenarios())
@example(scenario=LATE_AROUND_A_DELETE)
def test_history_equals_the_oracle_after_every_batch_whatever_the_delivery(
    spark, generated_code, base_config, scenario
):
    """Given the product's code generation (the suite's other sessions interpret), loaded rows and a random I/U/D stream cut into random files
    When the files are delivered in any order, some twice, in random batches
    Then after every batch the history equals the oracle of the changes delivered so far and its current
    versions are the clean table."""
    loaded, files, batches = scenario
    root = Path(tempfile.mkdtemp(prefix="history-prop-"))
    config = replace(base_config, clean_database=f"hprop_{root.name.replace('-', '_')}")
    try:
        DmsWriter(root).load(TABLE, COLUMNS, [(k, v, f"l{k}") for k, v in sorted(loaded.items())], moment=T0)
        assert full_load(spark, config, SCHEMA, str(root)).ok
        paths = [write_cdc(root, f) for f in files]
        initial = {k: (v, f"l{k}") for k, v in loaded.items()}
        delivered: set[int] = set()
        for number, batch in enumerate(batches):
            report = apply_cdc(
                spark, config, SCHEMA, manifest(*[paths[i] for i in batch], run_id=f"b{number}")
            )
            assert report.ok, (report.failed, report.error)
            delivered |= set(batch)
            expected = oracle_history(initial, T0, [c for i in sorted(delivered) for c in files[i]])
            assert history_rows(spark, config) == expected, f"after batch {number}"
            assert rows_of(spark, config.clean_table("shop_item")) == current_rows(expected)
    finally:
        for row in spark.sql(f"SHOW TABLES IN {config.catalog_name}.{config.clean_database}").collect():
            spark.sql(f"DROP TABLE {config.catalog_name}.{config.clean_database}.{row['tableName']} PURGE")
        shutil.rmtree(root, ignore_errors=True)
