# for call2.sh in a GPU session (issue 39): the default recipe since 2026-11-27 (4 optimizer steps per warm-start
# step) on 10 seeds, beside the recipe before (train.warm_start_minibatches=1) on the same 10 seeds, on the same
# card at once: the CPU's 10-seed table of 2026-11-27/28 again, in bf16 on a GPU. 20 trainings of 3-4 GB GPU memory
# each fit an H100 (80 GB) or an H200; one torch thread per process: shared-GPU seconds. Output under /tmp/r.
source benchmarks/device/jobs_lib.sh
log start
sweep fl-warm4 seeds=0-9 sweep.parallel=10
sweep fl-warm1 seeds=0-9 sweep.parallel=10 train.warm_start_minibatches=1
wait
log done
