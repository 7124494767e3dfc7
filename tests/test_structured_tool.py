"""make_tool: the schema the model sees is LangChain's own, built once per (name, description, args)."""

from __future__ import annotations

import pytest
from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field, ValidationError

from recreate import structured_tool
from recreate.structured_tool import make_tool


class CountArgs(BaseModel):
    word: str = Field(description="the word to count")
    times: int = Field(2, ge=1, le=5, description="how many copies")
    tags: dict[str, int] = Field(default_factory=dict)


def repeat(word: str, times: int = 2, tags: dict[str, int] | None = None) -> str:
    return " ".join([word] * times)


def test_the_model_sees_what_langchain_would_show() -> None:
    plain = StructuredTool.from_function(
        repeat, name="repeat", description="Repeat a word.", args_schema=CountArgs
    )
    ours = make_tool(repeat, name="repeat", description="Repeat a word.", args=CountArgs)
    expected = convert_to_openai_tool(plain)
    assert convert_to_openai_tool(ours) == expected
    assert convert_to_openai_tool(ours) == expected  # the cached copy was not changed by the conversion


def test_one_schema_for_many_tool_objects() -> None:
    convert_to_openai_tool(make_tool(repeat, name="repeat_many", description="Repeat.", args=CountArgs))
    size = len(structured_tool._SCHEMAS)
    for _ in range(5):
        convert_to_openai_tool(make_tool(repeat, name="repeat_many", description="Repeat.", args=CountArgs))
    assert len(structured_tool._SCHEMAS) == size


def test_input_is_still_validated_and_coerced() -> None:
    tool = make_tool(repeat, name="repeat", description="Repeat a word.", args=CountArgs)
    assert tool.invoke({"word": "hi", "times": "3"}) == "hi hi hi"
    with pytest.raises(ValidationError):
        tool.invoke({"word": "hi", "times": 9})


def test_a_model_made_per_call_is_not_cached() -> None:
    class LocalArgs(BaseModel):
        word: str

    size = len(structured_tool._SCHEMAS)
    tool = make_tool(lambda word: word, name="echo", description="Echo.", args=LocalArgs)
    assert convert_to_openai_tool(tool)["function"]["parameters"]["required"] == ["word"]
    assert len(structured_tool._SCHEMAS) == size
