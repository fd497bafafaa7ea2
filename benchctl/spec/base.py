"""The spec's building blocks, shared by its models (:mod:`benchctl.spec.model`, :mod:`benchctl.spec.workloads`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_RE, description="lowercase letters, digits and '-' (max 40)")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
