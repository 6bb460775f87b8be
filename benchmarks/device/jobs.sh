# launched (setsid) by call 2: the GPU session's measurements, all output under /tmp/r
R=/tmp/r; mkdir -p $R
source benchmarks/device/env.sh
export OMP_NUM_THREADS=1
log() { echo "[$(date +%T)] $*" >> $R/timeline.txt; }
log start
python3 benchmarks/device/peak.py > $R/peak.txt 2>&1; PEAK=$(tail -1 $R/peak.txt); log "peak $PEAK GFLOP/s"
# issue 19 on CUDA, alone on the GPU: the profile's rates (a short run) and the rollout engine against the naive loop
timeout 240 python3 benchmarks/bench_profile.py --limit-gflops=$PEAK train.steps=3 eval.episodes=16 \
  train.warm_start_steps=3 train.progress=false train.out_dir=$R/profile_short > $R/profile_short.txt 2>&1
log "profile_short rc=$?"
timeout 150 python3 benchmarks/bench_rollout.py --episodes 32 --dtype bf16 --peak-gflops $PEAK > $R/rollout.txt 2>&1
log "rollout rc=$?"
# issue 15 on the shop: GRPO vs + LLM attribution vs + oracle attribution, 3 seeds, 10 updates each, in parallel
(timeout 1500 python3 benchmarks/bench_attribution.py learn --envs shop --seeds 0 1 2 --steps 10 --tasks-per-step 4 \
  --group-size 8 --eval-every 5 --episodes 32 --workers 9 --threads 1 --extra attribution.steps=10 \
  --out $R/attr_shop > $R/attr_shop.txt 2>&1; log "attr_shop rc=$?") &
# the default run whole, on the shared GPU (learning on CUDA bf16; its shares are contended)
(timeout 1500 python3 benchmarks/bench_profile.py --limit-gflops=$PEAK train.progress=false \
  train.out_dir=$R/profile_full > $R/profile_full.txt 2>&1; log "profile_full rc=$?") &
# the test suite on CUDA
(timeout 1300 python3 -m pytest -q -p no:cacheprovider -n 3 tests > $R/tests.txt 2>&1; log "tests rc=$?") &
wait
log done
