import sys, pytest
ids = [l.strip() for l in open(sys.argv[1]) if l.strip()]
args = sys.argv[2:]
for i in ids: args += ["--deselect", i]
sys.exit(pytest.main(args))
