"""Runs INSIDE an evaluation sandbox: is the submitted answer equivalent to the expected one?

Uses math-verify (its parser can evaluate expression text, so it never runs on the host). Reads
input.json {"gold", "answer"}; prints "<marker> {json verdict}". A rational gold answer (an integer, a
fraction, a decimal) only accepts an answer that is exactly that number (a decimal as written: `2.0` is
2, `0.5000001` is not 1/2; `x = 2` is 2), never a float within math-verify's tolerance.
"""

import json
import os
import sys
from pathlib import Path


def _exact_value(value):
    """The exact number a parsed value stands for (a decimal float as written; `x = v` as v), else None."""
    import sympy

    if not isinstance(value, sympy.Basic):
        return None
    if isinstance(value, sympy.Eq) and isinstance(value.lhs, sympy.Symbol):
        value = value.rhs
    if isinstance(value, sympy.Float):
        return sympy.Rational(str(value))  # its decimal digits, not its binary approximation
    value = sympy.simplify(value)
    return value if value.is_Rational else None


def _exact_match(parsed, gold):
    return any(_exact_value(value) == gold for value in parsed)


def _rational_gold(gold, gold_int):
    """The gold answer as an exact rational when it is one (None: an expression, a set, an irrational)."""
    import sympy

    if gold_int is not None:
        return sympy.Integer(gold_int)
    values = [_exact_value(value) for value in gold[:1]]
    return values[0] if values else None


def main():
    if len(sys.argv) > 1:  # where the host bound math-verify and its dependencies
        sys.path.insert(0, sys.argv[1])
    marker = Path("marker.txt").read_text().strip()
    os.remove("marker.txt")
    task = json.loads(Path("input.json").read_text())
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    answer_text = task["answer"]
    if "$" not in answer_text and "\\boxed" not in answer_text:
        answer_text = "$" + answer_text + "$"
    gold = parse("$" + str(task["gold"]) + "$", extraction_config=configs)
    answer = parse(answer_text, extraction_config=configs)
    exact = _rational_gold(gold, task.get("gold_int"))
    if not answer:
        verdict = {"equivalent": False, "reason": "no mathematical answer could be parsed"}
    elif exact is not None:
        verdict = {"equivalent": _exact_match(answer, exact)}
    else:
        verdict = {"equivalent": bool(verify(gold, answer))}
    verdict["parsed_answer"] = str(answer[0]) if answer else None
    verdict["parsed_gold"] = str(gold[0]) if gold else None
    print(marker, json.dumps(verdict), flush=True)


if __name__ == "__main__":
    sys.exit(main())
