# started (setsid) by call2.sh: this GPU session's measurements, all output under /tmp/r. Everything at once on the
# one GPU (16 CPU cores, one torch thread per process), so every second here is a shared-GPU figure.
R=/tmp/r; mkdir -p $R
source benchmarks/device/env.sh
log() { echo "[$(date +%T)] $*" >> $R/timeline.txt; }
log start
# the SmolLM2 tests on CUDA (the rest started in call 1)
(python3 -m pytest -q -p no:cacheprovider -n 2 -m slow -rs tests > $R/tests2.txt 2>&1; log "tests2 rc=$?") &
# issue 44: the default run's profile with today's code (beside 2026-11-24's 151 s; here it shares the GPU)
PEAK=$(tail -1 $R/peak.txt)
(python3 benchmarks/bench_profile.py --limit-gflops=$PEAK train.progress=false train.out_dir=$R/profile \
  > $R/profile.txt 2>&1; log "profile rc=$?") &
# issue 39: 10-seed sweeps of the default recipe and of each remedy, on the content-disjoint held-out maps
sweep() { local name=$1; shift; (python3 -m selfevolve.cli sweep "$@" sweep.out_dir=$R/$name > $R/$name.txt 2>&1; \
  log "$name rc=$?") & }
sweep fl-base seeds=0-9 sweep.parallel=10
sweep fl-dyn seeds=0-9 sweep.parallel=10 sampling.dynamic=true
sweep fl-mean seeds=0-9 sweep.parallel=10 algo.norm=mean
sweep fl-learn seeds=0-9 sweep.parallel=10 sampling.tasks=learnability
# Sokoban's default recipe (the baseline of the next issues), behind the FrozenLake runs for the CPU
(nice -n 10 python3 -m selfevolve.cli sweep seeds=0-9 sweep.parallel=10 env.name=sokoban sweep.out_dir=$R/sok-base \
  > $R/sok-base.txt 2>&1; log "sok-base done") &
wait
log done
