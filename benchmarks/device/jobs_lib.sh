# sourced by the jobs_*.sh scripts on the GPU machine: output under /tmp/r, the environment of env.sh, a timeline
# (log) and a background `selfevolve sweep` whose exit status goes to the timeline (sweep NAME OVERRIDES...)
R=/tmp/r; mkdir -p $R
source benchmarks/device/env.sh
log() { echo "[$(date +%T)] $*" >> $R/timeline.txt; }
sweep() { local name=$1; shift; (python3 -m selfevolve.cli sweep "$@" sweep.out_dir=$R/$name > $R/$name.txt 2>&1; \
  log "$name rc=$?") & }
