# a poll call: wait, then send back everything under /tmp/r but checkpoints (split in 15 MB parts)
sleep ${1:-0}
cat /tmp/r/timeline.txt 2>/dev/null
cd /tmp/r 2>/dev/null && tar czf - --exclude=checkpoints --exclude=tensorboard . | split -b 15000000 -d - $OUT/snap.tgz.
for f in /tmp/r/*.txt; do echo "== $f"; tail -4 $f; done
ls /tmp/r/attr_shop 2>/dev/null; for m in /tmp/r/attr_shop/*/metrics.jsonl; do echo "$m $(wc -l < $m)"; done 2>/dev/null
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
