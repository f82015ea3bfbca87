#!/usr/bin/env bash
# Restart first call: ours with JAX's cache + module tier, ours with JAX's cache only, tokamax with JAX's cache.
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/wheels/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD:/tmp/site:$PWD/.peers/stubs
log=$OUT/restart.log
for cell in d64_4k_C d64_16k_N d128_4k_N d256_1k_N; do
  for who in ours tok; do
    dir=/tmp/cache_${cell}_$who; rm -rf $dir
    impl=""; [ $who = tok ] && impl=tokamax-mosaic
    for run in write read; do
      timeout 120 python3 tools/cache_probe.py $cell $dir $impl 2>&1 | grep RESULT | sed "s/^/$run /" >> $log
    done
    if [ $who = ours ]; then  # JAX's cache only (the module tier off): the state before
      PALLAS_FLASH_MODULE_CACHE=0 timeout 120 python3 tools/cache_probe.py $cell $dir 2>&1 | grep RESULT | sed "s/^/jaxonly /" >> $log
    fi
  done
  ls /tmp/cache_${cell}_ours/pallas_flash_modules | wc -l >> $log
done
cat $log
