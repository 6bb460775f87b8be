"""What every section of the configuration is: a pydantic model that refuses unknown keys, validates every
assignment and takes no infinite or NaN float."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    # allow_inf_nan=False: no option means anything at .inf or .nan (algo.lr=.inf made every adapter tensor NaN
    # after one step), so every float of every section must be finite
    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True,
                              allow_inf_nan=False)
