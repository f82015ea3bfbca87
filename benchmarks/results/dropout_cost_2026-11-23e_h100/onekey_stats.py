import sys
from pallas_flash import dropout
from benchmarks import dropout_stats
dropout.keep = lambda rk, c, t: (rk[0] ^ c) * (rk[0] | 1) >= t
sys.argv = [sys.argv[0], *sys.argv[1:]]
dropout_stats.main()
