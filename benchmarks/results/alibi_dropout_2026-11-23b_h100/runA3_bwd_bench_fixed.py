"""benchmarks/bwd_bench.py with forward._SPLIT_FIXED_AXIS from argv[1]."""
import sys
from pallas_flash.mosaic import forward
forward._SPLIT_FIXED_AXIS = int(sys.argv.pop(1))
from benchmarks import bwd_bench
bwd_bench.main()
