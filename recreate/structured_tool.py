"""LangChain tools whose JSON schema is built once per process, not once per tool object.

LangChain derives what a model sees of a tool (a pydantic subset model and its JSON schema) per tool
object: ~1 ms a tool, more for fields with defaults. The meta-agents get fresh tool objects for every
run they inspect (the tools close over that run's proposal box and sandbox), so with 8 runs at once this
was a quarter of the optimizer's own time, all of it holding the GIL. Input validation is unchanged:
it still goes through the pydantic `args` model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from langchain_core.tools import StructuredTool
from pydantic import BaseModel

_SCHEMAS: dict[tuple[str, str, type[BaseModel]], str] = {}  # bounded: `args` are module-level models


class _SchemaOnceTool(StructuredTool):
    @property
    def tool_call_schema(self) -> Any:
        args = self.args_schema
        if not isinstance(args, type) or "<locals>" in args.__qualname__:
            return super().tool_call_schema  # a per-call model would grow the cache without bound
        key = (self.name, self.description, args)
        text = _SCHEMAS.get(key)
        if text is None:
            text = _SCHEMAS[key] = json.dumps(super().tool_call_schema.model_json_schema())
        return json.loads(text)  # a fresh copy: LangChain's conversion pops keys from it


def make_tool(
    func: Callable[..., Any], *, name: str, description: str, args: type[BaseModel], **options: Any
) -> StructuredTool:
    """A StructuredTool calling `func` with arguments validated by `args` (a module-level model)."""
    return _SchemaOnceTool.from_function(
        func=func, name=name, description=description, args_schema=args, **options
    )
