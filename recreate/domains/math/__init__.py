"""The `math` domain: competition problems judged by their final answer (domain.py); the expression
checker that runs inside the sandbox is checks/math_check.py."""

from recreate.domains.math.domain import MathDomain

__all__ = ["MathDomain"]
