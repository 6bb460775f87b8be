# started (setsid) by call2.sh on 2026-11-27 (fifth session): the FrozenLake default recipe's four missing seeds
# (issue 39: 10 seeds with 0-4 and 8 from 2026-11-26), dynamic sampling's seven missing ones, and Sokoban
# `evolve` with the random explorer on seeds 1 and 2 (issue 41's diagnostic; seed 0 ran on the CPU). All at once
# on the one GPU, one torch thread per process: shared-GPU seconds. Output under /tmp/r.
source benchmarks/device/jobs_lib.sh
log start
sweep fl-base seeds=5,6,7,9 sweep.parallel=4
sweep fl-dyn seeds=1,3,4,5,7,8,9 sweep.parallel=7 sampling.dynamic=true
(python3 benchmarks/bench_evolve.py --env sokoban --seeds 1 2 --arms evolve --workers 2 --threads 1 \
  --extra evolve.explorer=random questioning.explorations=256 --out $R/bench_rx > $R/rx.txt 2>&1; log "rx rc=$?") &
wait
log done
