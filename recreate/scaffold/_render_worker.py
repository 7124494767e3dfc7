"""The process that renders untrusted Jinja templates for `recreate.scaffold.bounded` (run as a script).

It reads one JSON request per line on stdin: {"source", "variables", "max_chars"} to render,
{"source", "names": true} for the names a template reads (jinja2.meta evaluates constant expressions
while it looks), or {"schema", "instance"} to check tool arguments against a JSON schema whose regular
expressions (`pattern`) may backtrack for hours. It answers one JSON line: {"text"}, {"names"},
{"errors"} or {"error", "line", "bounded"}. Its
address space is capped (RLIMIT_AS) and it dies with its parent, so a template that allocates gigabytes
fails here, and one that loops forever is killed by the parent's timeout, never the parent itself.
Started with `python -P` (no script folder on sys.path).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from functools import lru_cache

from jinja2 import StrictUndefined, Template, TemplateError, meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

_env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)


class OutputTooLarge(Exception):
    pass


@lru_cache(maxsize=256)
def _compiled(source: str) -> Template:
    return _env.from_string(source)


def render(source: str, variables: dict, max_chars: int) -> str:
    chunks, size = [], 0
    for chunk in _compiled(source).generate(**variables):
        size += len(chunk)
        if size > max_chars:
            raise OutputTooLarge(f"renders to more than {max_chars:,} characters")
        chunks.append(chunk)
    return "".join(chunks)


def schema_errors(schema: dict, instance: object) -> list[list]:
    """[path, message] of every way `instance` fails `schema` (JSON Schema 2020-12), the best match
    first (jsonschema.exceptions.best_match). Also run in the host process for schemas without regexes."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    errors = list(Draft202012Validator(schema).iter_errors(instance))
    best = best_match(errors)
    ordered = [best, *(e for e in errors if e is not best)] if best is not None else errors
    return [[list(e.absolute_path), e.message] for e in ordered]


def answer(request: dict) -> dict:
    try:
        if "schema" in request:
            return {"errors": schema_errors(request["schema"], request["instance"])}
        if request.get("names"):
            return {"names": sorted(meta.find_undeclared_variables(_env.parse(request["source"])))}
        return {"text": render(request["source"], request["variables"], request["max_chars"])}
    except TemplateError as exc:
        return {"error": str(exc), "line": getattr(exc, "lineno", None)}
    except OutputTooLarge as exc:
        return {"error": str(exc), "bounded": True}
    except MemoryError:
        return {"error": "needs more memory than templates are given", "bounded": True}
    except RecursionError:
        return {"error": "recursion too deep", "bounded": True}
    except Exception as exc:  # raised by an expression of the template
        return {"error": f"{type(exc).__name__}: {exc}"}


def _exit_with(parent: int) -> None:
    """A parent killed mid-render leaves no worker spinning (prctl's PDEATHSIG would follow the parent's
    thread that started us, not the parent)."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def main(memory_bytes: int, parent: int) -> None:
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    sys.stdout.write('{"ready": true}\n')  # started: from here on renders are timed
    sys.stdout.flush()
    for line in sys.stdin:
        reply = answer(json.loads(line))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if reply.get("bounded"):
            return  # after a MemoryError the process is best replaced


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
