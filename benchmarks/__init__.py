"""Benchmarks of pallas_flash against its peers (``python -m benchmarks.run``)."""
