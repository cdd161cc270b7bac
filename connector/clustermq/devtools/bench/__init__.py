"""Benchmarks (``make bench``): the connector against the raw stomp.py client, side by side."""
