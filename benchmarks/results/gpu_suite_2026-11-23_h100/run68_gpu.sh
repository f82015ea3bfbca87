# Run 68, H100: the whole test suite natively on the GPU, part 1 of 2 (tests/test_mosaic.py), slow cases included.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
timeout -s INT 560 python3 -m pytest -q -rfE -p no:benchmark -p no:cacheprovider -m "slow or not slow" -n 8 \
  --durations=15 tests/test_mosaic.py > $OUT/run68_pytest_mosaic.log 2>&1
echo "pytest rc $?"; grep -E "passed|failed|error" $OUT/run68_pytest_mosaic.log | tail -5
