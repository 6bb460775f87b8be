"""One typed configuration tree: defaults here, a YAML file on top, ``dotted.key=value`` overrides on top of that.

Every field has a description (shown by ``selfevolve train --help`` through :func:`describe`). A wrong key or
value raises :class:`~selfevolve.errors.ConfigError` naming the key and what is allowed; the CLI turns that into
a one-line message and exit status 2.

``env`` options beyond ``name`` belong to the chosen environment (e.g. ``env.size=6`` for
FrozenLake); they are checked against that environment's constructor.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from selfevolve.config_sections import (  # noqa: F401 - re-exported: the sections belong to the config
    LoraConfig,
    ModelConfig,
    EnvConfig,
    AgentConfig,
    GigpoConfig,
    PpoConfig,
    SelfAcConfig,
    AlgoConfig,
    SelaurConfig,
    RewardConfig,
    AttributionConfig,
    FilterConfig,
    SamplingConfig,
    RolloutConfig,
    SearchConfig,
    ExperienceConfig,
    QuestioningConfig,
    EvolveConfig,
    LlmApiConfig,
    TrainConfig,
    EvalConfig,
    DistributedConfig,
)
from selfevolve.config_sections.base import _Section
from selfevolve.errors import ConfigError, bounded, short_repr
from selfevolve.untrusted import PlainLoader


# every key naming the model of LLM calls beyond the policy (policy, base, a path or openai:MODEL)
LLM_KEYS = ("reward.judge_llm", "attribution.llm", "experience.llm", "questioning.llm")
# Settings whose default is not what a run saved before the setting existed ran with: a resume compares and
# chooses with these (train/run_folder.py, build.resolve_products, evolve/loop.as_saved)
BEFORE_IT_EXISTED = {"model": {"matmul_dtype": "same"}, "evolve": {"acting_precision": "same"}}

_EXP_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


class Config(_Section):
    # torch's generators take seeds of 64 bits, signed or not (2**64 raised an OverflowError after the model had
    # loaded)
    seed: int = Field(0, ge=-2 ** 63, lt=2 ** 64, description="Global seed: model init (tiny), task order, sampling.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    attribution: AttributionConfig = Field(default_factory=AttributionConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    experience: ExperienceConfig = Field(default_factory=ExperienceConfig)
    questioning: QuestioningConfig = Field(default_factory=QuestioningConfig)
    evolve: EvolveConfig = Field(default_factory=EvolveConfig)
    llm_api: LlmApiConfig = Field(default_factory=LlmApiConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)

    @model_validator(mode="after")
    def _check_experience(self):
        x = self.experience
        if x.navigate and self.agent.context == "self_managed":
            raise ValueError("experience.navigate cannot strip the block from a self_managed context (its "
                             "context calls see the block); use agent.context causal, reasoning or sliding_window")
        if x.train_prompt == "stripped" and x.recall != "seer":
            raise ValueError("experience.train_prompt=stripped strips SEER's recalled examples: it needs "
                             "experience.recall=seer (or leave it at shown)")
        if x.train_prompt == "stripped" and self.agent.context == "self_managed":
            raise ValueError("experience.train_prompt=stripped cannot strip the examples from a self_managed "
                             "context (its context calls see them); use agent.context causal, reasoning or "
                             "sliding_window")
        return self

    @model_validator(mode="after")
    def _check_llm_backends(self):
        # an openai:MODEL backend fails at config time, not after an hour of training, when it cannot work
        for key in LLM_KEYS:
            section, field = key.split(".")
            backend = getattr(getattr(self, section), field)
            if backend.startswith("openai:") and not backend[len("openai:"):].strip():
                raise ValueError(f"{key}={backend!r}: name the served model, e.g. openai:my-run")
            if backend.startswith("openai:") and not self.llm_api.base_url:
                raise ValueError(f"{key}={backend!r} needs llm_api.base_url (e.g. http://127.0.0.1:8000/v1)")
        return self

    @model_validator(mode="after")
    def _check_search(self):
        s = self.search
        if self.rollout.search in ("beam", "lookahead") and s.keep == "all" and self.algo.group_size % s.beams:
            raise ValueError(
                f"search.keep=all keeps search.beams={s.beams} trajectories per search, so algo.group_size "
                f"({self.algo.group_size}) must be a multiple of it"
            )
        needs_value = s.scorer == "value" or (s.scorer == "weighted" and s.w_value > 0)
        if needs_value and self.rollout.search not in ("beam", "lookahead"):
            raise ValueError(f"search.scorer={s.scorer} reads the value head of partial trajectories: it applies "
                             f"to rollout.search=beam or lookahead, not {self.rollout.search}")
        if needs_value and self.algo.name not in ("self_ac", "ppo"):
            raise ValueError(f"search.scorer={s.scorer} needs a value head: algo.name must be self_ac or ppo, "
                             f"not {self.algo.name}")
        if s.scorer == "weighted" and s.w_reward + s.w_progress + s.w_value <= 0:
            raise ValueError("search.scorer=weighted: at least one of w_reward, w_progress, w_value must be > 0")
        return self


def _fmt_loc(loc) -> str:
    return ".".join(str(p) for p in loc)


def _field_at(loc: tuple):
    """The pydantic field at ``loc`` (a path of section and key names), or None."""
    cls: Any = Config
    field = None
    for part in loc:
        if not (inspect.isclass(cls) and issubclass(cls, BaseModel)) or not isinstance(part, str):
            return None
        field = cls.model_fields.get(part)
        if field is None:
            return None
        cls = field.annotation
    return field


def _allowed_for(loc: tuple) -> str:
    """The allowed keys at the parent of ``loc`` (for 'extra fields not permitted' errors)."""
    parent = _field_at(loc[:-1]) if loc[:-1] else None
    cls: Any = Config if not loc[:-1] else getattr(parent, "annotation", None)
    if not (inspect.isclass(cls) and issubclass(cls, BaseModel)):
        return ""
    return ", ".join(cls.model_fields)


def _bound(value: Any) -> str:
    if isinstance(value, int) and abs(value) >= 2 ** 32 and abs(value) & (abs(value) - 1) == 0:
        return f"{'-' if value < 0 else ''}2**{abs(value).bit_length() - 1}"  # 2**64, not 18446744073709551616
    return f"{value:g}" if isinstance(value, float) else str(value)


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _allowed_range(loc: tuple) -> str:
    """'a finite number > 0', 'an integer >= 0 and < 2**64', ... for a numeric field with bounds, else ''."""
    field = _field_at(loc)
    if field is None:
        return ""
    parts = [f"{sign} {_bound(getattr(m, name))}" for m in field.metadata for name, sign in _BOUNDS
             if getattr(m, name, None) is not None]
    if not parts:
        return ""
    kind = "an integer" if "int" in str(field.annotation) else "a finite number"
    return f"{kind} {' and '.join(parts)}" + (" (or null)" if "None" in str(field.annotation) else "")


def _validate(data: dict) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = _fmt_loc(err["loc"])
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"unknown config key {key!r}; allowed here: {_allowed_for(err['loc'])}") from None
        msg = err["msg"]
        if err["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
            raise ConfigError(bounded(msg)) from None
        allowed = _allowed_range(err["loc"])
        raise ConfigError(f"{key}: {msg} (got {short_repr(err.get('input'))})"
                          + (f"; allowed: {allowed}" if allowed else "")) from None


def _parse_value(text: str) -> Any:
    """YAML scalar parsing for overrides: 3 -> int, 0.5 -> float, true -> bool, null -> None, [a,b] -> list."""
    try:
        value = yaml.load(text, Loader=PlainLoader)  # noqa: S506 - safe, and without aliases (see load_config)
    except yaml.YAMLError:
        return text
    # YAML 1.1 reads 1e-2 as a string (it wants 1.0e-2); users mean a number.
    if isinstance(value, str) and _EXP_FLOAT.fullmatch(value.strip()):
        return float(value)
    return value


def apply_override(data: dict, dotted: str) -> None:
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r} must look like key=value (e.g. train.steps=10)")
    key, _, value = dotted.partition("=")
    parts = key.strip().split(".")
    node = data
    for p in parts[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{key}: {p!r} is a value, not a section")
        node = nxt
    node[parts[-1]] = _parse_value(value)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file (if any), then the overrides."""
    data: dict = {}
    if path is not None:
        data = _read_yaml(Path(path))
    for o in overrides or []:
        apply_override(data, o)
    return _validate(data)


def _read_yaml(path: Path) -> dict:
    """A config file's sections. Refused: a missing file, one that is not UTF-8 text, malformed YAML, aliases
    (``*a``: nested ones expand exponentially once the config is copied or saved), a top level that is not a
    mapping, and an empty file (a file given on purpose that says nothing is more likely a mistake, such as
    an unsaved editor buffer, than a wish for the defaults; leave the file out for those)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {e.start}); a config is YAML text") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path} ({e.strerror or e})") from None
    try:
        loaded = yaml.load(text, Loader=PlainLoader)  # noqa: S506 - a SafeLoader without aliases
    except yaml.YAMLError as e:
        raise ConfigError(bounded(f"{path}: malformed YAML: {str(e).splitlines()[0]} ({_yaml_where(e)})")) from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a config") from None
    if loaded is None:
        raise ConfigError(f"{path} holds no settings (it is empty or only comments); leave the file out to use "
                          f"the defaults")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections (model:, env:, ...)")
    return loaded


def _yaml_where(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "position unknown"


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def type_name(ann) -> str:
    """A field's type as ``train --help`` shows it: ``int``, ``float | null``, ``grpo | rloo | ...``,
    ``list[str]``."""
    origin, args = get_origin(ann), get_args(ann)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (Union, UnionType):
        return " | ".join("null" if a is type(None) else type_name(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    return "any" if ann is Any else getattr(ann, "__name__", str(ann))


def yaml_value(v) -> str:
    """A default as it is written on the command line (YAML): ``null``, ``true``, ``[q_proj, k_proj]``."""
    if isinstance(v, str):
        return v if v else "''"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(yaml_value(x) for x in v) + "]"
    return json.dumps(v) if v is None or isinstance(v, bool) else repr(v)


def config_sections() -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """Every option, by section (``model``, ``model.lora``, ...): ``[(section, [(key, type, default,
    description), ...])]`` in the order of the config; the environments' own options are rows of ``env`` (key
    ``env.<option>``, type the environment's name, default its options)."""
    sections: list[tuple[str, list]] = []

    def walk(cls: type[BaseModel], prefix: str):
        rows: list[tuple[str, str, str, str]] = []
        sections.append((prefix.rstrip(".") or "top level", rows))
        for name, f in cls.model_fields.items():
            ann = f.annotation
            if inspect.isclass(ann) and issubclass(ann, BaseModel):
                walk(ann, f"{prefix}{name}.")
                continue
            default = f.default if f.default_factory is None else f.default_factory()
            rows.append((f"{prefix}{name}", type_name(ann), yaml_value(default), f.description or ""))
        if cls is EnvConfig:
            from selfevolve.envs import ENVS, env_options
            from selfevolve.envs.suites import adapters

            for env_name, env_cls in [*ENVS.items(), *adapters().items()]:
                opts = ", ".join(f"{k}={yaml_value(v)}" for k, v in env_options(env_cls).items())
                rows.append((f"{prefix}<option>", f"for {env_name}", "", opts))

    walk(Config, "")
    return [(name, rows) for name, rows in sections if rows]


def describe() -> str:
    """Every option with its default and description, as plain text (one line each)."""
    lines = []
    for _, rows in config_sections():
        for key, kind, default, desc in rows:
            lines.append(f"  {key} {kind}: {desc}" if key.endswith("<option>") else f"  {key} = {default}  {desc}")
    return "\n".join(lines)
