"""A model's answer as a validated pydantic object: JSON found in the text, then validated.

Models wrap JSON in code fences, prefix it with a sentence ("Here is the JSON:") or add a
remark after it. We take, in order: the text itself, the body of the first fenced block,
then the first balanced ``{...}`` or ``[...]`` that ``json`` can decode (found with
``json.JSONDecoder.raw_decode`` from each opening bracket, so braces inside strings are
handled by the JSON parser, not by us). Validation is pydantic's; its message, shortened,
is what the repair prompt shows the model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from contextkit.core.errors import OutputValidationError

__all__ = ["extract_json", "parse_output", "repair_instruction"]

_FENCE = re.compile(r"```[ \t]*(?:json[c5]?|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The JSON value in ``text`` (fences and surrounding prose tolerated); OutputValidationError if none."""
    stripped = text.strip()
    candidates = [stripped]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        return value
    snippet = stripped[:80] + ("..." if len(stripped) > 80 else "")
    raise OutputValidationError(f"the answer holds no JSON value: {snippet!r}")


def parse_output(text: str, output: type[BaseModel]) -> BaseModel:
    """``text`` as an instance of ``output``; OutputValidationError saying what is wrong."""
    value = extract_json(text)
    try:
        return output.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ())) or '(root)'}: {e.get('msg', '')}"
            for e in exc.errors()[:8]
        )
        raise OutputValidationError(f"the JSON does not match {output.__name__}: {problems}") from None


def repair_instruction(error: str, output: type[BaseModel]) -> str:
    """What the model is told after an invalid answer: the error and the schema to follow."""
    schema = json.dumps(output.model_json_schema(), separators=(",", ":"))
    return (f"Your previous answer could not be used: {error}\n"
            f"Answer again with only a JSON object that matches this JSON schema, and nothing else:\n{schema}")

