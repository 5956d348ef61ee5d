"""Benchmarks (``make bench``): production settings with the floor endpoints under /_bench/.

The floors are measured on the same server as the product's own endpoints, so the stack runs
as in production; only these settings mount them (``config.settings.production`` refuses to
start with ``BENCH_ENDPOINTS`` on). Never deploy with this module.
"""

from .production import *  # noqa: F403

BENCH_ENDPOINTS = True
