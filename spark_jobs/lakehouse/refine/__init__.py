"""The refined zone: its tables, what a refine consumed, and the incremental refresh."""
