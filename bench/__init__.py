"""Benchmarks: each module runs with one command and prints ratios against a baseline
measured in the same run (see bench/RESULTS.md)."""
