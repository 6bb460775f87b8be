# sourced from the repository root (or its copy, /tmp/repo) on the GPU machine: the carried wheels and the tree on
# the path, no hub look-ups (no network there), the converted model in /tmp/cache
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 SELFEVOLVE_CACHE=/tmp/cache
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True OMP_NUM_THREADS=1
