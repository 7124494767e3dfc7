"""calc: exact arithmetic. Args: {"expression": "..."}; prints the value (fractions stay exact)."""

import ast
import json
import math
import sys
from fractions import Fraction

ALLOWED = {
    name: getattr(math, name)
    for name in (
        "sqrt",
        "floor",
        "ceil",
        "factorial",
        "comb",
        "perm",
        "gcd",
        "lcm",
        "log",
        "exp",
        "sin",
        "cos",
        "tan",
        "pi",
        "e",
    )
}


def exact_div(a, b):
    if isinstance(a, int | Fraction) and isinstance(b, int | Fraction):
        return Fraction(a) / b
    return a / b


class Exact(ast.NodeTransformer):
    """Float literals become Fractions and `/` between exact numbers stays exact."""

    def visit_Constant(self, node):
        if isinstance(node.value, float):
            return ast.Call(ast.Name("Fraction", ast.Load()), [ast.Constant(repr(node.value))], [])
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Div):
            return ast.Call(ast.Name("exact_div", ast.Load()), [node.left, node.right], [])
        return node


def main():
    args = json.loads(sys.argv[1])
    tree = ast.fix_missing_locations(Exact().visit(ast.parse(args["expression"], mode="eval")))
    namespace = {"__builtins__": {}, "Fraction": Fraction, "exact_div": exact_div, **ALLOWED}
    value = eval(compile(tree, "<expression>", "eval"), namespace)
    if isinstance(value, Fraction) and value.denominator == 1:
        value = value.numerator
    print(value)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # the model reads this and fixes its expression
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
