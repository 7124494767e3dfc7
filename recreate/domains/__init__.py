"""Domains: where tasks come from and how submissions are judged (math, ds1000, custom jsonl).

    domain = get_domain("ds1000", data="ds1000_dev.jsonl", seed=0)
    for task in domain.tasks("train"):           # deterministic, groups kept whole
        ...                                       # the agent works on task.prompt
        evaluation = domain.evaluate(task, submission, get_sandbox("bwrap"))  # fresh sandbox; never raises
    check_no_leakage(test_ids, evolved_on_ids)    # LeakageError if they overlap

`recreate domain selftest NAME --data PATH` checks an evaluation setup before any money is spent.
"""

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
