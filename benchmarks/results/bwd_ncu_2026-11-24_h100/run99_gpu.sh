# Run 99 (H100): every kernel of one fwd+bwd call with its duration (Nsight Compute, gpu__time_duration only), ours
# (d64 default: fused fixed point; d128 default: two kernels) and cuDNN at S4k N: how much of the backward is XLA glue.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/.peers/stubs:$PWD
D=benchmarks/results/bwd_ncu_2026-11-24_h100
T0=$SECONDS
for cell in "64 4096 N" "64 4096 C" "128 4096 N" "64 16384 N"; do for impl in ours cudnn; do
  tag=$(echo $cell | tr ' ' _)_$impl
  timeout 100 ncu --clock-control none --target-processes all --metrics gpu__time_duration.sum --csv --page raw \
    python3 $D/ncu_one.py $cell $impl > $OUT/run99_$tag.csv 2> $OUT/run99_$tag.err
  echo "$tag rc $? $((SECONDS-T0)) s"
done; done
python3 - <<'PY'
import csv, glob, os
for path in sorted(glob.glob(os.environ["OUT"] + "/run99_*.csv")):
  rows = list(csv.reader(open(path)))
  start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
  if start is None:
    print(path, "no table"); continue
  head = rows[start]
  ks = [dict(zip(head, r)) for r in rows[start + 2:]]
  tot = sum(float(d["gpu__time_duration.sum"].replace(",", "")) for d in ks)
  print(f"== {os.path.basename(path)}: {len(ks)} kernels, {tot / 1e3:.1f} us")
  for d in ks:
    print(f"   {float(d['gpu__time_duration.sum'].replace(',', '')) / 1e3:9.1f} us  {d['Kernel Name'][:90]}")
PY
