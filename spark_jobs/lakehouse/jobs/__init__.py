"""The jobs' entry points (Glue scripts and local runs share them): arguments, run, report."""
