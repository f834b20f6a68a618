"""Finding and validating the JSON in a model's answer."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from contextkit.errors import OutputValidationError
from contextkit.llm._json import extract_json, parse_output, repair_instruction


class Point(BaseModel):
    x: int
    y: int


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


class TestExtractJson:
    @pytest.mark.parametrize("text", [
        '{"x": 1, "y": 2}',
        '```json\n{"x": 1, "y": 2}\n```',
        '```\n{"x": 1, "y": 2}\n```',
        'Sure! Here is the object: {"x": 1, "y": 2}. Anything else?',
        'Note {not json} then {"x": 1, "y": 2}',
        '  \n{"x": 1, "y": 2}\n  ',
    ])
    def test_tolerates_fences_and_prose(self, text):
        assert extract_json(text) == {"x": 1, "y": 2}

    def test_braces_inside_strings_are_the_parsers_business(self):
        assert extract_json('answer: {"note": "a } inside", "x": 1}') == {"note": "a } inside", "x": 1}

    @pytest.mark.parametrize("text", ["", "no json at all", "{broken: json", "```json\n{oops}\n```"])
    def test_no_json_is_an_error_quoting_the_answer(self, text):
        with pytest.raises(OutputValidationError, match="holds no JSON"):
            extract_json(text)

    @settings(max_examples=60, deadline=None)
    @given(value=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5),
           before=st.sampled_from(["", "Here:\n", "```json\n", "Result -> "]),
           after=st.sampled_from(["", "\n```", " Hope this helps.", "\n"]))
    def test_any_object_survives_the_wrapping(self, value, before, after):
        # The invariant: an object a model wraps in a fence or a sentence comes back unchanged.
        text = before + json.dumps(value) + after
        if before == "```json\n" and after != "\n```":
            text += "\n```"
        assert extract_json(text) == value


class TestParseOutput:
    def test_valid(self):
        assert parse_output('{"x": 3, "y": 4}', Point) == Point(x=3, y=4)

    def test_invalid_names_the_field(self):
        with pytest.raises(OutputValidationError, match=r"does not match Point: y: "):
            parse_output('{"x": 3, "y": "four"}', Point)

    def test_missing_field(self):
        with pytest.raises(OutputValidationError, match="y: Field required"):
            parse_output('{"x": 3}', Point)

    def test_repair_instruction_holds_error_and_schema(self):
        text = repair_instruction("y: Field required", Point)
        assert "y: Field required" in text and json.dumps(Point.model_json_schema(), separators=(",", ":")) in text
