"""The `ds1000` domain: data-science problems judged by their own test context.

domain.py (tasks, prepare, evaluate), judge.py (the checker sandbox), env.py (the pinned evaluation
venv; standard library only, runnable as a script), cli.py (`recreate domain setup ds1000`), checks/
(the scripts that run inside the sandboxes).
"""

from recreate.domains.ds1000.domain import DS1000Domain

__all__ = ["DS1000Domain"]
