"""``selfevolve serve RUN``: a trained run behind an OpenAI-compatible HTTP API (docs/serving.md).

- :mod:`selfevolve.serve.protocol`: the request bodies (untrusted input: bounded, refused with a 400 that names
  the field) and the response bodies, token ids and log-probs included;
- :mod:`selfevolve.serve.batcher`: concurrent requests collected into batched ``Policy.generate`` calls in one
  worker thread;
- :mod:`selfevolve.serve.app`: the FastAPI app and the uvicorn server.
"""
