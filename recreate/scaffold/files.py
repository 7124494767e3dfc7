"""A scaffold as a directory: read it (never executing anything), write it canonically.

```
scaffold.yaml            name, domain, description, system_prompt, instance_template, action_format,
                         limits, tools: [names], rules: [...], examples: [...] (when there are some)
tools/<name>/tool.yaml   description, args (JSON schema), smoke: {args, expect, exit_code} (optional)
tools/<name>/main.py     or main.sh: the tool's code, run inside the sandbox
memory.jsonl             one memory item per line
```
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from recreate.scaffold.errors import Problem, ScaffoldError, ScaffoldValidationError
from recreate.scaffold.model import ENTRY_FILES, MemoryItem, Scaffold, Tool, scaffold_data

SCAFFOLD_FILE = "scaffold.yaml"
MEMORY_FILE = "memory.jsonl"
TOOLS_DIR = "tools"
TOOL_FILE = "tool.yaml"
_SET_BY_LAYOUT = ("name", "language", "code")  # tool fields that come from the directory, not tool.yaml
MAX_FILE_BYTES = 32 * 2**20  # far beyond any scaffold file; a larger one is not read into memory
MAX_YAML_DEPTH = 64  # a scaffold nests a few levels (an imported mini-swe-agent config: up to 50 more)
MAX_MEMORY_ITEMS = 100_000  # lines read from memory.jsonl (validation's own bound is far lower)


# libyaml when present (about 10x faster); both emitters produce YAML that loads to the same content
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Dumper(_BaseDumper):  # type: ignore[misc, valid-type]
    """Block style for multi-line strings so prompts stay readable in diffs."""


_YAML_LINE_BREAKS = ("\r", "\x85", "\u2028", "\u2029")  # PyYAML mangles these outside double quotes


def _str_representer(dumper: yaml.Dumper, value: str) -> yaml.Node:
    if any(ch in value for ch in _YAML_LINE_BREAKS):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def _dump_yaml(data: dict[str, Any]) -> bytes:
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return text.encode("utf-8")


def canonical_files(scaffold: Scaffold) -> dict[str, bytes]:
    """The directory contents (relative path -> bytes) that represent `scaffold` exactly."""
    head = scaffold_data(scaffold, exclude={"tools", "rules", "memory"})
    head["tools"] = [tool.name for tool in scaffold.tools]
    head["rules"] = [rule.model_dump(mode="json") for rule in scaffold.rules]
    files = {SCAFFOLD_FILE: _dump_yaml(head)}
    for tool in scaffold.tools:
        spec = tool.model_dump(mode="json", include={"description", "args", "smoke"})
        if spec["smoke"] is None:
            del spec["smoke"]
        files[f"{TOOLS_DIR}/{tool.name}/{TOOL_FILE}"] = _dump_yaml(spec)
        files[f"{TOOLS_DIR}/{tool.name}/{tool.entry_file}"] = tool.code.encode("utf-8")
    lines = [json.dumps(item.model_dump(mode="json"), ensure_ascii=False) + "\n" for item in scaffold.memory]
    files[MEMORY_FILE] = "".join(lines).encode("utf-8")
    return files


def write_dir(scaffold: Scaffold, dest: str | Path) -> Path:
    """Write the canonical files into `dest`, which must not exist or be empty. Atomic: the files
    appear all at once (written in a sibling temp directory, then renamed)."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ScaffoldError(f"{dest} already exists and is not an empty directory; choose a new path")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        for rel, data in canonical_files(scaffold).items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if dest.exists():
            dest.rmdir()
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def read_dir(path: str | Path) -> Scaffold:
    """Load a scaffold directory. Reads text only (safe YAML, JSON): nothing is executed. Raises
    ScaffoldValidationError listing every schema problem across all files."""
    root = Path(path)
    if not root.is_dir():
        raise ScaffoldError(f"{root}: not a scaffold directory (expected a folder with {SCAFFOLD_FILE})")
    problems: list[Problem] = []
    head = _read_head(root, problems)
    tools = _read_tools(root, head.get("tools"), problems)
    memory = _read_memory(root, problems)
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name in (SCAFFOLD_FILE, MEMORY_FILE, TOOLS_DIR):
            continue
        problems.append(
            Problem(
                entry.name,
                "",
                f"unexpected file; a scaffold holds {SCAFFOLD_FILE}, {MEMORY_FILE} and {TOOLS_DIR}/",
            )
        )
    if problems:
        raise ScaffoldValidationError(problems, source=str(root))
    return Scaffold.model_validate({**head, "tools": tools, "memory": memory})


def _read_head(root: Path, problems: list[Problem]) -> dict[str, Any]:
    data = _load_yaml(root / SCAFFOLD_FILE, SCAFFOLD_FILE, problems)
    if data is None:
        return {}
    names = data.get("tools", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        problems.append(Problem(SCAFFOLD_FILE, "tools", "must be a list of tool names"))
        data["tools"] = []
    try:
        Scaffold.model_validate({**data, "tools": [], "memory": []})
    except ValidationError as exc:
        problems.extend(_schema_problems(exc, SCAFFOLD_FILE, skip=("tools", "memory")))
    if "memory" in data:
        problems.append(Problem(SCAFFOLD_FILE, "memory", f"memory items live in {MEMORY_FILE}"))
    return data


def _read_tools(root: Path, listed: Any, problems: list[Problem]) -> list[dict[str, Any]]:
    listed = listed if isinstance(listed, list) and all(isinstance(n, str) for n in listed) else []
    tools_dir = root / TOOLS_DIR
    if tools_dir.is_symlink():
        problems.append(Problem(TOOLS_DIR, "", "is a symlink; scaffold folders must be real directories"))
        return []
    present = (
        sorted(p.name for p in tools_dir.iterdir() if not p.name.startswith("."))
        if tools_dir.is_dir()
        else []
    )
    for name in present:
        if name not in listed:
            problems.append(
                Problem(f"{TOOLS_DIR}/{name}", "", f"tool directory not listed in {SCAFFOLD_FILE} tools")
            )
    tools = []
    for i, name in enumerate(listed):
        if name not in present:
            problems.append(Problem(SCAFFOLD_FILE, f"tools[{i}]", f"no directory {TOOLS_DIR}/{name}/"))
            continue
        folder = tools_dir / name
        if folder.is_symlink() or not folder.is_dir():
            what = "a symlink" if folder.is_symlink() else "not a directory"
            problems.append(Problem(f"{TOOLS_DIR}/{name}", "", f"is {what}; a tool is a directory"))
            continue
        tool = _read_tool(tools_dir / name, f"{TOOLS_DIR}/{name}", problems)
        if tool is not None:
            tools.append(tool)
    return tools


def _read_tool(folder: Path, rel: str, problems: list[Problem]) -> dict[str, Any] | None:
    spec = _load_yaml(folder / TOOL_FILE, f"{rel}/{TOOL_FILE}", problems)
    entries = [lang for lang, file in ENTRY_FILES.items() if (folder / file).exists()]
    known = {TOOL_FILE, *ENTRY_FILES.values()}
    for extra in sorted(
        p.name for p in folder.iterdir() if p.name not in known and not p.name.startswith(".")
    ):
        problems.append(
            Problem(
                f"{rel}/{extra}",
                "",
                f"unexpected file; a tool holds {TOOL_FILE} and one of {', '.join(ENTRY_FILES.values())}",
            )
        )
    if len(entries) != 1:
        found = "both" if entries else "neither"
        problems.append(
            Problem(rel, "", f"needs exactly one of {', '.join(ENTRY_FILES.values())} (found {found})")
        )
    if spec is None or len(entries) != 1:
        return None
    for key in _SET_BY_LAYOUT:
        if key in spec:
            problems.append(Problem(f"{rel}/{TOOL_FILE}", key, "set by the directory layout, remove it"))
    code_path = folder / ENTRY_FILES[entries[0]]
    code = _read_text(code_path, f"{rel}/{code_path.name}", problems)
    if code is None:
        return None
    tool = {**spec, "name": folder.name, "language": entries[0], "code": code}
    try:
        Tool.model_validate(tool)
    except ValidationError as exc:
        for p in _schema_problems(exc, f"{rel}/{TOOL_FILE}"):
            file = f"{rel}/{code_path.name}" if p.field == "code" else p.file
            field = "" if p.field == "code" else p.field
            problems.append(Problem(file, field, p.message))
        return None
    return tool


def _read_memory(root: Path, problems: list[Problem]) -> list[dict[str, Any]]:
    text = _read_text(root / MEMORY_FILE, MEMORY_FILE, problems, missing_ok=True)
    items: list[dict[str, Any]] = []
    for number, line in enumerate((text or "").split("\n"), start=1):
        if not line.strip():
            continue
        if len(items) >= MAX_MEMORY_ITEMS:
            problems.append(
                Problem(MEMORY_FILE, "", f"more than {MAX_MEMORY_ITEMS:,} items; remove the ones not needed")
            )
            break
        where = f"{MEMORY_FILE}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(Problem(where, "", f"malformed JSON ({exc.msg} at column {exc.colno})"))
            continue
        except RecursionError:
            problems.append(Problem(where, "", "JSON nested too deeply; a memory item is a flat object"))
            continue
        try:
            MemoryItem.model_validate(item)
        except ValidationError as exc:
            problems.extend(_schema_problems(exc, where))
            continue
        items.append(item)
    return items


def _read_text(path: Path, rel: str, problems: list[Problem], missing_ok: bool = False) -> str | None:
    if path.is_symlink():
        problems.append(Problem(rel, "", "is a symlink; scaffold files must be regular files"))
        return None
    if not path.exists():
        if not missing_ok:
            problems.append(Problem(rel, "", "missing"))
        return None
    try:
        data = _read_regular(path)
        text = None if data is None or len(data) > MAX_FILE_BYTES else data.decode("utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        problems.append(Problem(rel, "", f"unreadable as UTF-8 text ({exc})"))
        return None
    if data is None:
        problems.append(Problem(rel, "", "is not a regular file (a pipe, device or folder?)"))
    elif text is None:
        problems.append(Problem(rel, "", f"larger than {MAX_FILE_BYTES:,} bytes; trim it"))
    return text


def _read_regular(path: Path) -> bytes | None:
    """At most MAX_FILE_BYTES + 1 bytes of `path`; None when it is no regular file (a FIFO would block
    the read forever, a device never end)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return file.read(MAX_FILE_BYTES + 1)


def _load_yaml(path: Path, rel: str, problems: list[Problem]) -> dict[str, Any] | None:
    text = _read_text(path, rel, problems)
    if text is None:
        return None
    try:
        refused = _refused_yaml(text)
        if refused:
            problems.append(Problem(rel, "", refused))
            return None
        data = yaml.load(text, Loader=_Loader)  # a safe loader: plain data, no tags that build objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problems.append(Problem(rel, "", f"malformed YAML ({where}{getattr(exc, 'problem', None) or exc})"))
        return None
    if not isinstance(data, dict):
        problems.append(Problem(rel, "", f"must be a YAML mapping, got {type(data).__name__}"))
        return None
    return data


def _refused_yaml(text: str) -> str | None:
    """Why `text` is not read (before anything is built), or None: an alias (`*name`) expands, so a few
    hundred bytes can become gigabytes (a billion laughs); deep nesting is composed recursively."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            return "uses a YAML alias (*name), which scaffolds do not expand: write the value out"
        depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
        if depth > MAX_YAML_DEPTH:
            return f"nested deeper than {MAX_YAML_DEPTH} levels; flatten it"
    return None


def _schema_problems(exc: ValidationError, file: str, skip: tuple[str, ...] = ()) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = err["loc"]
        if loc and loc[0] in skip:
            continue
        field = ".".join(f"[{part}]" if isinstance(part, int) else str(part) for part in loc).replace(
            ".[", "["
        )
        message = err["msg"] if err["type"] != "extra_forbidden" else "unknown field"
        problems.append(Problem(file, field, message))
    return problems
