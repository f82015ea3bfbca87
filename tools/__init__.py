"""Kernel developers' tools: register reports, module identity checks, config A/B and sweeps
(``python -m tools.<name>``).  The benchmarks users run against the peers are in ``benchmarks/``."""
