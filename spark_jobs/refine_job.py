"""Glue job: bring the refined zone (sales_enriched, daily aggregates) up to date with the clean zone."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # local runs: the lakehouse package beside us

from lakehouse.refine import refine_main

if __name__ == "__main__":
    sys.exit(refine_main(sys.argv[1:]))
