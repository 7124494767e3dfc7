"""Scaffolds: the typed, validated, versioned description of a domain agent (everything but the model)."""

from recreate.scaffold.diff import Change, ScaffoldDiff, diff_scaffolds
from recreate.scaffold.errors import OpError, Problem, ScaffoldError, ScaffoldValidationError
from recreate.scaffold.files import canonical_files, content_hash, read_dir, write_dir
from recreate.scaffold.load import load_scaffold
from recreate.scaffold.model import (
    RESERVED_TOOL_NAMES,
    TOOL_ROOT,
    Limits,
    MemoryItem,
    Rule,
    Scaffold,
    SmokeTest,
    Tool,
)
from recreate.scaffold.ops import (
    AddMemory,
    AddRule,
    AddTool,
    EditOp,
    RemoveMemory,
    RemoveRule,
    RemoveTool,
    ReplaceText,
    SetField,
    UpdateRule,
    UpdateTool,
    Vote,
    apply,
    ops_json_schema,
    ops_to_json,
    parse_ops,
)
from recreate.scaffold.render import render_instance, render_rules, render_system
from recreate.scaffold.store import ScaffoldStore, VersionInfo
from recreate.scaffold.validate import Bounds, install_tools, validate_scaffold

__all__ = [
    "RESERVED_TOOL_NAMES",
    "TOOL_ROOT",
    "AddMemory",
    "AddRule",
    "AddTool",
    "Bounds",
    "Change",
    "EditOp",
    "Limits",
    "MemoryItem",
    "OpError",
    "Problem",
    "RemoveMemory",
    "RemoveRule",
    "RemoveTool",
    "ReplaceText",
    "Rule",
    "Scaffold",
    "ScaffoldDiff",
    "ScaffoldError",
    "ScaffoldStore",
    "ScaffoldValidationError",
    "SetField",
    "SmokeTest",
    "Tool",
    "UpdateRule",
    "UpdateTool",
    "VersionInfo",
    "Vote",
    "apply",
    "canonical_files",
    "content_hash",
    "diff_scaffolds",
    "install_tools",
    "load_scaffold",
    "ops_json_schema",
    "ops_to_json",
    "parse_ops",
    "read_dir",
    "render_instance",
    "render_rules",
    "render_system",
    "validate_scaffold",
    "write_dir",
]
