"""The `jsonl` domain: a custom tasks file judged by an evaluator command or Python function (domain.py)."""

from recreate.domains.jsonl.domain import JsonlDomain

__all__ = ["JsonlDomain"]
