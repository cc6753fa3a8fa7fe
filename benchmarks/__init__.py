"""Runnable benchmarks; each prints ratios to raw work measured in the same run."""
