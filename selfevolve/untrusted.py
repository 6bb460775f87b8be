"""Text from a model is untrusted input: bound it, clean it, and parse it in time linear in its length.

A reply can be anything a sampler produces or an attacker types: a megabyte of ``<answer>`` tags, JSON nested
ten thousand levels deep, an integer of five thousand digits, or a lone UTF-16 surrogate (``"\\ud800"`` in a
JSON string decodes to one; it cannot be encoded as UTF-8, so it breaks hashing, SQLite and log files far from
where it came in). Every parser of model output goes through these helpers, so that any string becomes either
a valid action or a penalised invalid one, and never an exception (docs/security.md):

- :data:`MAX_ACTION_CHARS`: an action longer than this is refused as invalid by every built-in environment;
- :func:`clean_text`: lone surrogates replaced by U+FFFD (a valid surrogate pair is joined);
- :func:`loads_json`: ``json.loads`` with bounded nesting (:data:`MAX_JSON_DEPTH`), bounded integers
  (:data:`MAX_INT_DIGITS`), finite numbers only, and every string cleaned. Any failure is a
  ``json.JSONDecodeError``, exactly as for malformed JSON, so callers need one ``except``;
- :func:`load_yaml`: a run folder's ``config.yaml`` read safely (plain data, no aliases).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from selfevolve.errors import SelfEvolveError

# ~8,000 tokens of text: far above any reply budget a run uses (tool calls take 20-60 tokens), and small enough
# that every parser finishes in milliseconds (benchmarks/bench_adversarial.py).
MAX_ACTION_CHARS = 32_768
MAX_JSON_DEPTH = 32  # a tool call's arguments need 3-4 levels; deeper data also overflows json.dumps later
MAX_INT_DIGITS = 32  # no id, count or amount needs more; int() of 4,300+ digits raises (CPython's limit)


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, so that it encodes as UTF-8. Already clean text (the
    usual case) is returned as it is, after one C-speed check."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        # Round trip through UTF-16: a pair of surrogates becomes the character it encodes, a lone one U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def too_long(text: str, limit: int = MAX_ACTION_CHARS) -> str | None:
    """The message refusing ``text`` when it is longer than ``limit`` characters, else None."""
    if len(text) > limit:
        return f"the reply is {len(text):,} characters long; at most {limit:,} are read"
    return None


def _bounded_int(digits: str) -> int:
    n = len(digits.lstrip("-"))
    if n > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {n} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]}... is out of range")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _checked(value: Any, depth: int) -> Any:
    """``value`` with its strings (and keys) cleaned; ValueError past :data:`MAX_JSON_DEPTH` levels."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_checked(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {clean_text(k): _checked(v, depth + 1) for k, v in value.items()}
    return value


def loads_json(text: str) -> Any:
    """``json.loads(text)`` for untrusted text: at most :data:`MAX_JSON_DEPTH` levels, integers of at most
    :data:`MAX_INT_DIGITS` digits, no NaN or Infinity, strings cleaned (:func:`clean_text`). Raises
    ``json.JSONDecodeError`` for all of these and for malformed JSON; linear in ``len(text)``."""
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_float=_finite_float, parse_constant=_refuse_constant)
        return _checked(data, 1)
    except json.JSONDecodeError:
        raise
    except RecursionError:  # the C decoder stops at the interpreter's recursion limit: still a bounded cost
        raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels", text, 0) from None
    except ValueError as e:
        raise json.JSONDecodeError(str(e), text, 0) from None


class PlainLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases: a run's config never uses them, and nested aliases ("billion
    laughs") expand exponentially once the config is copied or dumped."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not allowed here", event.start_mark)
        return super().compose_node(parent, index)


def load_yaml(text: str, source: str | Path) -> dict[str, Any]:
    """A run folder's config: a YAML mapping of plain data, else a SelfEvolveError naming ``source``."""
    try:
        data = yaml.load(text, Loader=PlainLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, RecursionError) as e:
        raise SelfEvolveError(f"{source}: not a valid config ({str(e).splitlines()[0][:200]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SelfEvolveError(f"{source}: a config must be a mapping of sections, got {type(data).__name__}")
    return data
