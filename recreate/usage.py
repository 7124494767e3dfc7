"""Usage ledger, budgets and prices: every model call recorded with its role, tokens and price; a
`Budget` on the ledger raises `BudgetExceeded` before a call that would start past a limit.

A call's price is the provider's reported cost, else $0 on a local endpoint, else the user's price
(recreate.toml, --price), else the genai-prices database; else unknown (None, never counted as $0).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import LLMResult

from recreate.endpoints import ModelSpecError, is_local_endpoint, parse_spec
from recreate.errors import Arg
from recreate.jsonl import append_jsonl

log = logging.getLogger(__name__)


class BudgetExceeded(RuntimeError):
    """A budget limit was reached. `limit` names which one (usd, tokens, calls)."""

    def __init__(self, limit: str, used: float, allowed: float):
        super().__init__(f"budget exceeded: {limit} used {used:g} of {allowed:g}")
        self.limit, self.used, self.allowed = limit, used, allowed


@dataclass(frozen=True)
class Budget:
    max_usd: float | None = None
    max_tokens: int | None = None
    max_calls: int | None = None

    def __post_init__(self) -> None:
        for limit, allowed in (("usd", self.max_usd), ("tokens", self.max_tokens), ("calls", self.max_calls)):
            if allowed is not None and not 0 < allowed < math.inf:  # nan too
                raise ValueError(f"a {limit} budget must be above 0 (got {allowed:g}); leave it out for none")

    def check(self, ledger: UsageLedger) -> None:
        t = ledger.totals()
        for limit, used, allowed in (
            ("usd", t["cost_usd"], self.max_usd),
            ("tokens", t["prompt_tokens"] + t["completion_tokens"], self.max_tokens),
            ("calls", t["calls"], self.max_calls),
        ):
            if allowed is not None and used >= allowed:
                raise BudgetExceeded(limit, used, allowed)


@dataclass
class UsageRecord:
    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_usd: float | None  # None: unknown price, never recorded as $0
    cost_source: str  # "provider", "price_table", "local" (free by declaration) or "unknown"
    ts: float = field(default_factory=time.time)


Rates = tuple[float, float, float]  # USD per 1M tokens: (input, cached input, output)
_PROVIDER_IDS = {  # LangChain provider name -> genai-prices provider id, where they differ
    "google_genai": "google",
    "google_vertexai": "google",
    "mistralai": "mistral",
    "bedrock": "aws",
    "bedrock_converse": "aws",
    "azure_openai": "azure",
}


def price_overrides(prices: dict[str, Any] | None) -> dict[str, Rates]:
    """User prices (recreate.toml `[recreate.prices]`, `--price`), USD per 1M tokens, per model:
    `{input = 0.4, output = 1.6, cached_input = 0.1}` or `[input, output]` or `[input, cached, output]`."""
    out: dict[str, Rates] = {}
    for model, value in (prices or {}).items():
        try:
            if isinstance(value, dict):
                inp, outp = float(value["input"]), float(value["output"])
                rates = (inp, float(value.get("cached_input", inp)), outp)
            elif len(value) == 2:
                rates = (float(value[0]), float(value[0]), float(value[1]))
            else:
                rates = tuple(float(v) for v in value)  # type: ignore[assignment]
            if len(rates) != 3 or not all(0 <= rate < math.inf for rate in rates):  # no nan either
                raise ValueError(value)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelSpecError(
                f"price of {model!r}: {value!r} is not a price; give USD per 1M tokens as "
                "{input = IN, output = OUT} in recreate.toml or {prices}",
                prices=_prices_arg("MODEL"),
            ) from exc
        out[model] = rates
    return out


def _catalog_price(
    provider: str | None, name: str, prompt: int, cached: int, completion: int
) -> float | None:
    from genai_prices import Usage, calc_price

    usage = Usage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=completion)
    provider_id = _PROVIDER_IDS.get(provider or "", provider)
    for pid in dict.fromkeys((provider_id, None)):  # the named provider first, then any that serves it
        try:
            return float(calc_price(usage, name, provider_id=pid).total_price)
        except LookupError:
            continue
    return None


def price_call(
    model: str,
    prompt: int,
    cached: int,
    completion: int,
    prices: dict | None = None,
    *,
    base_url: str | None = None,
) -> float | None:
    """USD for one call: $0 for the spec `local` or on a local endpoint (reached as `make_chat_model`
    would), else the user's price, else the genai-prices catalog; None when unknown (never $0)."""
    provider, name, url = parse_spec(model, base_url)
    if "local" in (model.strip(), provider) or (provider in (None, "openai") and is_local_endpoint(url)):
        return 0.0
    table = price_overrides(prices)
    rates = table.get(model) or table.get(name)
    if rates is None:
        return _catalog_price(provider, name, prompt, cached, completion)
    inp, cached_rate, out = rates
    return ((prompt - cached) * inp + cached * cached_rate + completion * out) / 1e6


def require_prices(
    models: dict[str, str], budget: Budget | None, prices: dict | None = None, base_url: str | None = None
) -> None:
    """Under a USD budget every model needs a known price: refuse before any call, naming the fixes."""
    if budget is None or budget.max_usd is None:
        return
    for role, spec in models.items():
        if price_call(spec, 1, 0, 1, prices, base_url=base_url) is None:
            name = parse_spec(spec)[1]
            raise ModelSpecError(
                f"no price known for the {role} model {spec!r}, so {{budget}} cannot be enforced: pass "
                "{prices} (USD per 1M input/output tokens, or set it under [recreate.prices] in "
                "recreate.toml), budget tokens with {tokens} instead, or pass {unbounded}",
                budget=Arg(
                    "budget", f"Budget(max_usd={budget.max_usd:g})", f"{budget.max_usd:g}", "--budget-usd"
                ),
                prices=_prices_arg(name),
                tokens=Arg("budget", "Budget(max_tokens=N)", "N", "--max-tokens"),
                unbounded=Arg("budget", "Budget(max_usd=None)", "none", "--budget-usd"),
            )


def _prices_arg(name: str) -> Arg:
    return Arg("prices", f"{{{name!r}: [IN, OUT]}}", f"{name}=IN,OUT", "--price")


_TOTALS = ("calls", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "unpriced_calls")


def _well_formed(rec: UsageRecord) -> UsageRecord:
    """`rec` read back from a file, when its counts are numbers (TypeError otherwise)."""
    counts = (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens)
    numbers = all(isinstance(n, int) for n in counts) and isinstance(rec.cost_usd, int | float | None)
    if not (numbers and isinstance(rec.role, str)):
        raise TypeError(f"not a usage record: {rec}")
    return rec


class UsageLedger:
    """Thread-safe record of every model call; optionally appended to a JSONL file. Totals per role are
    kept as calls come in: the budget is checked before every call, and a long run makes many."""

    def __init__(
        self, path: str | Path | None = None, *, budget: Budget | None = None, prices: dict | None = None
    ):
        self.path = Path(path) if path else None
        self.budget = budget
        self.prices = prices or {}
        self._records: list[UsageRecord] = []
        self._sums: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        if self.path and self.path.exists():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        """The records of a ledger file. A line that is not one (torn by a killed process, possibly inside
        a character, or damaged) is skipped: one warning names the file and its lines."""
        skipped = []
        for n, line in enumerate(path.read_bytes().splitlines(), 1):
            try:
                self._add(_well_formed(UsageRecord(**json.loads(line.decode("utf-8")))))
            except (ValueError, TypeError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                skipped.append(n)
        if skipped:
            more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
            which = (
                f"line {skipped[0]} is not a usage record"
                if len(skipped) == 1
                else f"lines {str(skipped[:5])[1:-1]}{more} are not usage records"
            )
            log.warning("%s %s, skipped (their calls are not counted)", path, which)

    def _add(self, rec: UsageRecord) -> None:
        self._records.append(rec)
        sums = self._sums.setdefault(rec.role, dict.fromkeys(_TOTALS, 0))
        sums["calls"] += 1
        sums["prompt_tokens"] += rec.prompt_tokens
        sums["completion_tokens"] += rec.completion_tokens
        sums["cached_tokens"] += rec.cached_tokens
        if rec.cost_usd is None:
            sums["unpriced_calls"] += 1
        else:
            sums["cost_usd"] += rec.cost_usd

    def record(self, rec: UsageRecord) -> None:
        with self._lock:
            self._add(rec)
            if self.path:
                append_jsonl(self.path, [asdict(rec)])

    def check_budget(self) -> None:
        if self.budget:
            self.budget.check(self)

    def records(self, role: str | None = None) -> list[UsageRecord]:
        with self._lock:
            return [r for r in self._records if role is None or r.role == role]

    def totals(self, role: str | None = None) -> dict[str, Any]:
        with self._lock:
            rows = list(self._sums.values()) if role is None else [self._sums.get(role, {})]
            return {key: sum(row.get(key, 0) for row in rows) for key in _TOTALS}

    def by_role(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            roles = sorted(self._sums)
        return {role: self.totals(role) for role in roles}


class LedgerCallback(BaseCallbackHandler):
    """Checks the budget before each call and records usage after it."""

    raise_error = True  # a BudgetExceeded raised in on_chat_model_start must stop the call

    def __init__(
        self,
        ledger: UsageLedger,
        role: str,
        model: str,
        *,
        provider: str | None = None,
        base_url: str | None = None,
    ):
        self.ledger, self.role, self.model = ledger, role, model
        self.provider, self.base_url = provider, base_url

    @classmethod
    def for_model(cls, ledger: UsageLedger, role: str, model: BaseChatModel) -> LedgerCallback:
        """The callback for a chat model built elsewhere: its name and endpoint read from the model."""
        name = getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__
        url = getattr(model, "openai_api_base", None)
        return cls(ledger, role, str(name), base_url=str(url) if url else None)

    def on_chat_model_start(self, serialized: Any, messages: Any, **kw: Any) -> None:
        self.ledger.check_budget()

    def on_llm_end(self, response: LLMResult, **kw: Any) -> None:
        for gens in response.generations:
            for gen in gens:
                msg = getattr(gen, "message", None)
                if msg is not None:
                    self.ledger.record(self._usage(msg))

    def _usage(self, msg: Any) -> UsageRecord:
        um = getattr(msg, "usage_metadata", None) or {}
        meta = getattr(msg, "response_metadata", None) or {}
        raw = meta.get("token_usage") or {}
        prompt = int(um.get("input_tokens", raw.get("prompt_tokens", 0)) or 0)
        completion = int(um.get("output_tokens", raw.get("completion_tokens", 0)) or 0)
        cached = int((um.get("input_token_details") or {}).get("cache_read", 0) or 0)
        model = meta.get("model_name") or self.model
        if isinstance(raw.get("cost"), int | float):
            cost, source = float(raw["cost"]), "provider"
        elif is_local_endpoint(self.base_url):
            cost, source = 0.0, "local"
        else:
            cost = None
            for name in dict.fromkeys((model, self.model)):  # the model answering (a snapshot), the one asked
                spec = f"{self.provider}:{name}" if self.provider else name
                cost = price_call(spec, prompt, cached, completion, self.ledger.prices)
                if cost is not None:
                    break
            source = "unknown" if cost is None else "price_table"
        return UsageRecord(self.role, model, prompt, completion, cached, cost, source)
