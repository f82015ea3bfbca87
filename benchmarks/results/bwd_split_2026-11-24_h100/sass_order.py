import re, sys
# Print, for the 2nd loop body, the sequence of instruction classes between the dP wait and the loop branch.
lines = open(sys.argv[1]).read().splitlines()
ins = []
for l in lines:
    m = re.search(r"/\*([0-9a-f]{4})\*/\s+(.*?);", l)
    if m:
        ins.append((int(m.group(1), 16), m.group(2)))
# find the HGMMA.64x128 groups
idx = [i for i, (_, t) in enumerate(ins) if "HGMMA.64x128" in t]
# second loop: last 8 HGMMA.64x128
last = idx[-8:]
start = last[0] - 150
seq = []
for i in range(start, last[-1] + 3):
    t = ins[i][1]
    op = t.split()[0] if not t.startswith("@") else t.split()[1]
    seq.append(op.split(".")[0] if not op.startswith("HGMMA") else "HGMMA")
# compress
out = []
for op in seq:
    if out and out[-1][0] == op:
        out[-1][1] += 1
    else:
        out.append([op, 1])
print(" ".join(f"{o}x{n}" if n > 1 else o for o, n in out))
