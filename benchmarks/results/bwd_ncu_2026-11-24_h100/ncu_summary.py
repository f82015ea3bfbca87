"""Key counters and warp stall reasons of every kernel in ncu --page raw --csv files."""
import csv
import glob
import sys

KEYS = ["gpu__time_duration.sum", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed",
        "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed", "smsp__issue_active.avg.per_cycle_active",
        "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
        "lts__throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.per_cycle_active",
        "launch__grid_size", "launch__block_size", "launch__shared_mem_per_block_dynamic"]
for path in sorted(p for pat in sys.argv[1:] for p in glob.glob(pat)):
  rows = list(csv.reader(open(path)))
  start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
  if start is None:
    print("==", path, "no table")
    continue
  head = rows[start]
  for r in rows[start + 2:]:
    d = dict(zip(head, r))
    print("==", path.split("/")[-1], d["Kernel Name"][:70])
    for k in KEYS:
      if k in d:
        print(f"   {k:70s} {d[k]}")
    st = sorted(((k.split("stalled_")[1].split("_per")[0], float(v.replace(",", "")))
                 for k, v in d.items()
                 if "issue_stalled" in k and k.endswith("per_issue_active.ratio")), key=lambda x: -x[1])
    print("   stalls/issue:", ", ".join(f"{a} {b:.2f}" for a, b in st if b >= 0.05))
