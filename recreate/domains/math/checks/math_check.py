"""Runs INSIDE an evaluation sandbox: is the submitted answer equivalent to the expected one?

Uses math-verify (its parser can evaluate expression text, so it never runs on the host). Reads
input.json {"gold", "answer"}; prints "<marker> {json verdict}". An integer gold answer only accepts an
answer that is exactly that integer: a rational value, never a float within a tolerance.
"""

import json
import os
import sys
from pathlib import Path


def _exact_integer(parsed, gold):
    import sympy

    for value in parsed:
        if isinstance(value, sympy.Basic):
            value = sympy.simplify(value)
            if value.is_Rational and value == sympy.Integer(gold):
                return True
    return False


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
    gold_int = task.get("gold_int")
    if not answer:
        verdict = {"equivalent": False, "reason": "no mathematical answer could be parsed"}
    elif gold_int is not None:
        verdict = {"equivalent": _exact_integer(answer, gold_int)}
    else:
        verdict = {"equivalent": bool(verify(gold, answer))}
    verdict["parsed_answer"] = str(answer[0]) if answer else None
    verdict["parsed_gold"] = str(gold[0]) if gold else None
    print(marker, json.dumps(verdict), flush=True)


if __name__ == "__main__":
    sys.exit(main())
