"""The `repo` domain: fix a repository so its own tests pass (SWE-bench's instance schema).

domain.py (tasks, prepare, evaluate), instance.py (the instance schema), snapshot.py (base trees),
evaluation.py + guard.py + forgeries.py (judging and its defences), env.py (test venvs), build.py +
mutate.py + statement.py (instances made from a package's sdist), cli.py (`recreate domain setup|build
repo`), checks/ (the scripts that run inside the sandbox).
"""

from recreate.domains.repo.domain import RepoDomain

__all__ = ["RepoDomain"]
