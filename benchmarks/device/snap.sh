# wait, then send back what the jobs wrote under /tmp/r (no checkpoints or TensorBoard), in parts of 15 MB
sleep ${1:-0}
cat /tmp/r/timeline.txt 2>/dev/null
tail -3 /tmp/r/tests1.txt /tmp/r/tests2.txt 2>/dev/null
for s in /tmp/r/*/; do echo "$s: $(ls -d $s/seed-*/sweep_done.json 2>/dev/null | wc -l) seeds done; steps: $(for m in $s/seed-*/metrics.jsonl; do tail -1 $m | cut -c1-12; done 2>/dev/null | tr '\n' ' ')"; done
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
cd /tmp/r && tar czf - --exclude=checkpoints --exclude=tensorboard --exclude=trajectories.jsonl . \
  | split -b 15000000 -d - $OUT/snap.tgz.
ls -la $OUT
