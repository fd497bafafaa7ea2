"""The campaign spec's JSON Schema (draft 7, what the YAML language server reads), for editors:
``benchctl schema`` prints it, ``docs/reference/spec.schema.json`` is its checked-in copy (``make docs``)."""

from __future__ import annotations

import json
from typing import Any

SCHEMA_ID = "urn:benchctl:campaign-spec"
# Draft 7: the newest the YAML language server states it supports (pydantic writes 2020-12; see spec_schema)
SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"


def _draft7(node: Any) -> Any:
    """A 2020-12 schema node as draft 7 says it: a tuple's ``prefixItems`` is an ``items`` array there."""
    if isinstance(node, list):
        return [_draft7(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _draft7(v) for k, v in node.items()}
    if "prefixItems" in out:
        out["items"] = out.pop("prefixItems")
    return out


def spec_schema() -> dict[str, Any]:
    """The campaign spec's JSON Schema, draft 7, for editors. What pydantic derives, in draft 7's terms
    (``definitions``, tuple ``items``), with one change: a feature-ladder rung (``base`` + ``change``) inherits
    ``mode`` and ``workers`` from its base, so an experiment needs either those two or ``base`` and ``change``."""
    from benchctl.spec.model import CampaignSpec

    schema = _draft7(CampaignSpec.model_json_schema(ref_template="#/definitions/{model}"))
    schema["definitions"] = schema.pop("$defs")
    experiment = schema["definitions"]["Experiment"]
    experiment["required"] = ["name"]
    experiment["anyOf"] = [{"required": ["mode", "workers"]}, {"required": ["base", "change"]}]
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, **schema, "title": "benchctl campaign spec",
            "description": "A benchctl campaign spec (docs/reference/spec.md). `benchctl validate SPEC` is the "
                           "authority: it also checks the rules that relate fields to each other."}


def schema_text() -> str:
    return json.dumps(spec_schema(), indent=2, ensure_ascii=False) + "\n"
