"""Domains: where tasks come from and how submissions are judged (math, ds1000, custom jsonl)."""

from recreate.domains.base import Domain, Evaluation, Split, Task
from recreate.domains.common import DomainDataError
from recreate.domains.registry import UnknownDomainError, get_domain, list_domains
from recreate.domains.splits import LeakageError, SplitPlan, check_no_leakage

__all__ = [
    "Domain",
    "DomainDataError",
    "Evaluation",
    "LeakageError",
    "Split",
    "SplitPlan",
    "Task",
    "UnknownDomainError",
    "check_no_leakage",
    "get_domain",
    "list_domains",
]
