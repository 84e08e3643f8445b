"""The size rule holds for the whole product, not only the Spark library: no Python file of the jobs, the
Lambdas, the local AWS, the tools, the deploy scripts or the benchmarks is over 500 lines (a file one can read;
a larger one mixes concerns and is split by them). The checker itself is tested in test_library_layout.py.
Pure: nothing is imported."""

from __future__ import annotations

from tests.unit.spark.test_library_layout import MAX_LINES, REPO, oversized

PRODUCT_FOLDERS = ("spark_jobs", "functions", "localaws", "tools", "lakectl", "deploy", "bench")
# Files allowed over MAX_LINES, each with its reason (path relative to the repository). An entry that gets
# under the limit fails the test too, so the list only shrinks.
OVERSIZED: dict[str, str] = {}


def test_no_product_file_is_over_500_lines_but_the_listed_ones():
    """Given every Python file of the product's folders, When their lines are counted, Then none is over
    500 lines except those listed with a reason in OVERSIZED, and each listed one is still over."""
    found = {
        f"{folder}/{name}": lines
        for folder in PRODUCT_FOLDERS
        for name, lines in oversized(REPO / folder, MAX_LINES).items()
    }
    assert {path: n for path, n in found.items() if path not in OVERSIZED} == {}
    assert sorted(set(OVERSIZED) - set(found)) == []
