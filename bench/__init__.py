"""Benchmarks (``make bench``): every figure next to a floor measured in the same run."""
