"""Fetch-latency and append benchmarks: chatlayers' stores side by side with the floor and peers.

Run ``python -m benchmarks`` (``--quick`` for a one-minute smoke run). Results go to
``benchmarks/results/latest.md`` and ``benchmarks/results/fetch_latency.png``. Timing lives
here only, never in pass/fail tests.
"""
