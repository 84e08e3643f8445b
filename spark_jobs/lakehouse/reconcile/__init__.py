"""Source <-> lake reconciliation: plans, the source and lake sides, bisection, reports and repairs."""
