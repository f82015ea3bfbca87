"""Backward config A/B in one process (runs 174-249): since 2026-11-25
``benchmarks/config_ab.py``, which this calls with the same arguments: for
each cell, the default backward config and each variant (``field=value,...``,
MosaicBackwardConfig fields), each compiled twice as separate executables
and timed interleaved, dQ, dK, dV compared bitwise with the default's.

  python3 cfg_ab.py d256-4k-N,d256-4k-C persistent=True [more variants]
"""
from benchmarks import config_ab

config_ab.main()
