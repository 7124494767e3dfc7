"""Reading a math submission's final answer: its boxes (\\boxed{...}), or the one sentence that states
it, with formatting and decorations (units, `x = `, LaTeX spacing) taken off, and number literals."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

_NUMBER = re.compile(r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)", re.ASCII)
_FORMATTING = re.compile(r"\\(?:text|textbf|mathbf|mathrm|bf|boldsymbol|boxed|fbox|framebox)\s*\{([^{}]*)\}")
_BOX = re.compile(r"\\(?:boxed|fbox|framebox)\s*\{")
MAX_WRAPPERS = 8  # nested formatting unwrapped at most this deep: each level is a pass over the text
MAX_DECORATED = 256  # an answer longer than this is no decorated literal (and is not searched for one)
MAX_STATED = 1000  # nor is a longer submission one sentence stating its answer
# a whole submission that states its answer in words: "The final answer is 42.", "**Answer:** 42"
_STATED = re.compile(  # unambiguous (the answer starts with none of the label's characters): linear
    r"[\s*]*(?:(?:so|thus|hence|therefore),?\s+)?(?:the\s+)?(?:final\s+)?answer\b(?:\s+is)?[\s:*]*"
    r"(?P<answer>[^\s:*][^\n]*)",
    re.IGNORECASE,
)
_BOLD = re.compile(r"\*\*(?P<answer>[^*\n]+)\*\*\.?")
_SPACE = r"(?:\\[,!;: ]|\\q?quad\b|~)"  # LaTeX spacing commands
_UNIT = re.compile(r"(?<=[\d.])\s*(?P<unit>[A-Za-z]{2,}(?:\s+[A-Za-z]{2,}){0,2})(?:\^\{?[23]\}?)?$")
# words after a number that change or hedge its value: never taken for a unit
_NOT_UNIT_WORDS = (
    "or and not nor to than more less least most about approx approximately roughly nearly almost maybe "
    "possibly either plus minus times over pi sqrt squared cubed factorial mod log ln sin cos tan exp inf "
    "infinity hundred hundreds thousand thousands million millions billion billions trillion dozen dozens "
    "score gross choose percent percentage half halves third thirds quarter quarters fourth fourths fifth "
    "fifths sixth sixths seventh sevenths eighth eighths ninth ninths tenth tenths hundredth hundredths "
    "thousandth thousandths millionth millionths"
)
NOT_UNITS = frozenset(_NOT_UNIT_WORDS.split())
# (pattern, replacement) rewrites of a literal's decorations, repeated until none applies
_DECORATIONS = (
    (re.compile(r"^\{([^{}]*)\}$"), r"\1"),  # {42}
    (re.compile(r"^\\(?:displaystyle|textstyle|bf|rm)\b\s*"), ""),
    (re.compile(r"(?<=\d)" + _SPACE + r"\s*(?=\d{3}(?!\d))"), ","),  # 3\,159
    (re.compile(r"(?:" + _SPACE + r"|\s)*,(?:" + _SPACE + r"|\s)*"), ","),  # 3\!,\!159
    (re.compile(r"^(?:" + _SPACE + r"|\s)+|(?:" + _SPACE + r"|\s)+$"), ""),
    (re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree)$"), ""),  # 45^\circ, 45°
    (re.compile(r"\s*(?:\\?%|\bpercent)$"), ""),  # 45\%
    (re.compile(r"^\\?\$\s*"), ""),  # \$45
    (re.compile(r"^\([A-E]\)(?:" + _SPACE + r"|\s)*(?=[+\-\d.])"), ""),  # (C) 45: an AMC choice and its value
    (re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*"), ""),  # x = 45
    (re.compile("\u2212"), "-"),  # the Unicode minus sign
)


def extract_answer(submission: str) -> str:
    """The content of the last \\boxed{...} (or \\fbox{...}), else the submission without $ and spaces
    (or what it states in words: "The final answer is 42.")."""
    boxed = last_boxed(submission)
    text = boxed if boxed is not None else stated_answer(submission)
    return unwrap_formatting(unwrap_math(text))


def unwrap_math(text: str) -> str:
    """`$42$.` and `$42.$` -> `42`: the dollars around one math segment and a final period. Text with
    several segments (`$1$, $2$`) keeps its dollars: stripping the outer ones would turn the text
    between segments into math."""
    for _ in range(2):
        text = text.strip().rstrip(".").strip()
        if "$" not in text.strip("$"):
            text = text.strip("$")
    return text.strip()


def stated_answer(submission: str) -> str:
    """What a submission that is one sentence stating its answer ("The answer is $42$.", "**42**")
    states, else the submission itself."""
    text = submission.strip()
    if len(text) > MAX_STATED:
        return text
    for pattern in (_STATED, _BOLD):
        match = pattern.fullmatch(text)
        if match and "$" not in unwrap_math(match["answer"]):  # one answer, not "$1$, not $2$"
            return match["answer"]
    return text


def unwrap_formatting(text: str) -> str:
    """`\\textbf{(211) }` -> `211`: bold/text wrappers (at most MAX_WRAPPERS deep), and parentheses
    around a lone integer (not an interval like `(1, 2)`)."""
    for _ in range(MAX_WRAPPERS):
        previous = text
        text = _FORMATTING.sub(r"\1", text).strip()
        if text == previous:
            break
    if text.startswith("(") and text.endswith(")") and as_integer(text[1:-1]) is not None:
        text = text[1:-1].strip()
    return text


def boxed_answers(text: str) -> list[str]:
    """The different answers `text`'s boxes hold, in order (`45` and `45.0` are one answer); a box in
    a box is an answer too (`\\boxed{44 \\text{ or } \\boxed{45}}` gives two)."""
    answers: dict[object, str] = {}  # the answer's value, or its text without blanks -> the answer
    for box in _boxes(text):
        inner = _boxes(box)
        for content in [box, inner[-1]] if inner else [box]:
            answer = unwrap_formatting(unwrap_math(content))
            value = as_number(literal_form(answer))
            answers.setdefault(value if value is not None else re.sub(r"\s+", "", answer), answer)
    return list(answers.values())


def last_boxed(text: str) -> str | None:
    boxes = _boxes(text)
    return boxes[-1] if boxes else None


def _boxes(text: str) -> list[str]:
    """The contents of `text`'s outermost \\boxed{...} (\\fbox, \\framebox), in order; a box whose
    brace is never closed holds nothing usable and is left out. `\\{` and `\\}` are no braces. Linear:
    one pass over the braces, and each character is in at most one box."""
    closes: dict[int, int] = {}
    opened: list[int] = []
    for match in re.finditer(r"\\.|[{}]", text, re.DOTALL):
        if match.group() == "{":
            opened.append(match.start())
        elif match.group() == "}" and opened:
            closes[opened.pop()] = match.start()
    boxes: list[str] = []
    end = -1
    for match in _BOX.finditer(text):
        brace = match.end() - 1
        if brace > end and brace in closes:
            end = closes[brace]
            boxes.append(text[brace + 1 : end])
    return boxes


def literal_form(answer: str) -> str:
    """The literal an answer writes with decorations taken off: units (`45^\\circ`, `45\\%`, `\\$45`,
    `45 miles`), LaTeX spacing (`3\\,159`), `x = 45`, an AMC choice before its value (`(C) 45`), the
    Unicode minus. What is left must still be a literal: `45 or 46` and `2 pi` stay as they are."""
    text = answer.strip()
    if len(text) > MAX_DECORATED:
        return text
    for _ in range(len(_DECORATIONS)):
        previous = text
        for pattern, replacement in _DECORATIONS:
            text = pattern.sub(replacement, text).strip()
        unit = _UNIT.search(text)
        if unit and not NOT_UNITS.intersection(unit["unit"].lower().split()):
            text = text[: unit.start()].strip()
        if text == previous:
            break
    return text


def as_number(text: str) -> Fraction | None:
    """The value of a decimal literal ("073", "-3,159", "3{,}159", "0.50", "+.5"), else None: an
    expression, however simple (`88 + 94`, `1e3`, `\\frac{1}{2}`), is not a literal."""
    text = text.strip().replace("{,}", ",")
    if not _NUMBER.fullmatch(text):
        return None
    return Fraction(Decimal(text.replace(",", "")))  # Decimal: no limit on the digits of an int


def as_integer(text: str) -> int | None:
    """The integer an integer-valued decimal literal means ("073", "3,159", "27.0"), else None."""
    value = as_number(text)
    return int(value) if value is not None and value.denominator == 1 else None
