"""Runs 244-246's A/B script: since run 248 ``benchmarks/config_ab.py``
(cells with ``+drop`` / ``+alibi`` / ``+cap`` against that feature's
backward default), which this calls with the same arguments.

  python3 feat_ab.py d128-4k-N+drop,d128-16k-C+alibi prefetch_rows=True,row_ring=True
"""
from benchmarks import config_ab

config_ab.main()
