import logging
import re
import threading
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from recreate.config import load_settings
from recreate.models import (
    Budget,
    BudgetExceeded,
    LedgerCallback,
    ModelSpecError,
    UsageLedger,
    UsageRecord,
    is_context_overflow,
    is_local_endpoint,
    make_chat_model,
    parse_spec,
    price_call,
    require_prices,
)
from recreate.redact import install_log_redaction
from recreate.testing import Reply, text


def test_parse_spec_forms():
    assert parse_spec("openai:gpt-4.1-mini") == ("openai", "gpt-4.1-mini", None)
    assert parse_spec("qwen3@http://localhost:8000/v1") == (None, "qwen3", "http://localhost:8000/v1")
    assert parse_spec("llama3", "http://h/v1") == (None, "llama3", "http://h/v1")
    with pytest.raises(ModelSpecError):
        parse_spec("  ")


def test_missing_key_names_the_fixes(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(
        ModelSpecError, match="OPENAI_API_KEY.*OPENAI_BASE_URL.*model='PROVIDER:MODEL'"
    ) as caught:
        make_chat_model("openai:gpt-4.1-mini")
    assert "--" not in str(caught.value)  # a Python caller is told its argument; the command line its option
    assert caught.value.for_cli().endswith("pass --model PROVIDER:MODEL")


def test_unknown_provider_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelSpecError, match="cannot build model 'nosuchprovider:model-x'") as caught:
        make_chat_model("nosuchprovider:model-x")
    assert caught.value.for_cli().endswith("or NAME@http://HOST:PORT/v1 for an OpenAI-compatible server")
    assert "pass --model PROVIDER:MODEL with a provider" in caught.value.for_cli()


def test_ledger_records_usage_and_provider_cost(openai_server):
    ledger = UsageLedger()
    openai_server.enqueue(text("a b c", cost=0.25), text("d e"))
    model = make_chat_model("scripted", base_url=openai_server.url, ledger=ledger, role="optimizer")
    model.invoke("hello")
    model.invoke("hello")
    recs = ledger.records()
    assert [r.cost_source for r in recs] == ["provider", "local"]  # a 127.0.0.1 endpoint is free
    assert recs[0].cost_usd == 0.25 and recs[1].cost_usd == 0.0
    assert recs[0].completion_tokens == 3 and recs[1].completion_tokens == 2
    assert ledger.totals("optimizer")["unpriced_calls"] == 0
    assert ledger.by_role().keys() == {"optimizer"}


def test_unknown_price_is_recorded_as_unknown_never_as_zero():
    ledger = UsageLedger()
    callback = LedgerCallback(ledger, "agent", "mystery-model", base_url="https://models.example.com/v1")
    reply = AIMessage("hi", usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12})
    callback.on_llm_end(LLMResult(generations=[[ChatGeneration(message=reply)]]))
    (rec,) = ledger.records()
    assert rec.cost_usd is None and rec.cost_source == "unknown"
    assert ledger.totals()["unpriced_calls"] == 1 and ledger.totals()["cost_usd"] == 0


def test_provider_models_are_priced_from_the_maintained_database():
    # none of these was in the old hand-written table of six OpenAI models
    for spec in (
        "anthropic:claude-sonnet-4-5",
        "google_genai:gemini-2.5-flash",
        "deepseek-chat",
        "gpt-5-mini",
    ):
        usd = price_call(spec, 1000, 0, 1000)
        assert usd is not None and usd > 0, spec
    dated = price_call("openai:gpt-4.1-mini-2025-04-14", 1_000_000, 0, 1_000_000)
    assert dated == pytest.approx(price_call("gpt-4.1-mini", 1_000_000, 0, 1_000_000))


def test_user_prices_override_in_the_recreate_toml_form(tmp_path, monkeypatch):
    (tmp_path / "recreate.toml").write_text(
        '[recreate.prices]\n"my-model" = {input = 1.0, output = 2.0}\n"gpt-4.1-mini" = [0.5, 0.25, 1.0]\n'
    )
    monkeypatch.chdir(tmp_path)
    prices = load_settings().prices
    assert price_call("my-model", 1_000_000, 0, 1_000_000, prices) == pytest.approx(3.0)
    assert price_call("openai:gpt-4.1-mini", 1_000_000, 1_000_000, 0, prices) == pytest.approx(0.25)
    with pytest.raises(ModelSpecError, match=r"'my-model'.*prices=\{'MODEL': \[IN, OUT\]\}") as caught:
        price_call("my-model", 1, 0, 1, {"my-model": {"in": 1}})
    assert "--price MODEL=IN,OUT" in caught.value.for_cli()  # the command line names its option


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:8000/v1", True),
        ("http://127.0.0.1:1234", True),
        ("http://127.0.0.2:1234/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://vllm.localhost/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://10.0.0.5:8000/v1", False),
        ("http://localhost.example.com/v1", False),
        (None, False),
    ],
)
def test_is_local_endpoint(url, local):
    assert is_local_endpoint(url) is local


def test_local_models_are_free_by_declaration():
    assert price_call("qwen3@http://localhost:8000/v1", 10**6, 0, 10**6) == 0.0
    assert price_call("local", 10**6, 0, 10**6) == 0.0
    assert price_call("my-model", 10**6, 0, 10**6, base_url="http://127.0.0.1:8080/v1") == 0.0
    assert price_call("my-model", 10**6, 0, 10**6, base_url="http://10.1.2.3:8080/v1") is None


def test_a_usd_budget_needs_every_price_before_any_call():
    budget = Budget(max_usd=5)
    with pytest.raises(ModelSpecError) as caught:
        require_prices({"agent": "gpt-4.1-mini", "optimizer": "remote-x"}, budget)
    python, cli = str(caught.value), caught.value.for_cli()
    assert "optimizer model 'remote-x'" in python and "--" not in python
    for fix in ("budget=Budget(max_usd=5)", "prices={'remote-x': [IN, OUT]}", "budget=Budget(max_tokens=N)"):
        assert fix in python
    assert re.search(r"--budget-usd 5 .*--price remote-x=IN,OUT.*--max-tokens N.*--budget-usd none", cli)
    require_prices({"agent": "remote-x"}, budget, {"remote-x": [1.0, 2.0]})
    require_prices({"agent": "remote-x@http://localhost:8000/v1"}, budget)
    require_prices({"agent": "remote-x"}, Budget(max_tokens=1000))


@pytest.mark.parametrize("limits", [{"max_usd": 0}, {"max_usd": -1.0}, {"max_tokens": 0}, {"max_calls": -2}])
def test_zero_or_negative_budgets_are_refused(limits):
    with pytest.raises(ValueError, match="must be above 0"):
        Budget(**limits)


def test_price_table_and_cached_tokens():
    assert price_call("gpt-4.1-mini", 1_000_000, 0, 1_000_000) == pytest.approx(2.0)
    assert price_call("gpt-4.1-mini", 1_000_000, 1_000_000, 0) == pytest.approx(0.10)
    assert price_call("openai:gpt-4.1-mini-2025-04-14", 1_000_000, 0, 0) == pytest.approx(0.40)
    assert price_call("my-local-model", 10, 0, 10) is None
    assert price_call(
        "my-local-model", 1_000_000, 0, 0, {"my-local-model": (1.0, 0.5, 2.0)}
    ) == pytest.approx(1.0)


def test_ledger_totals_exact_under_concurrent_calls(openai_server, tmp_path: Path):
    ledger = UsageLedger(tmp_path / "ledger.jsonl")
    openai_server.responder = lambda body: text("one two three four", cost=0.001)
    model = make_chat_model("scripted", base_url=openai_server.url, ledger=ledger)
    errors: list[Exception] = []

    def worker():
        try:
            for _ in range(5):
                model.invoke("x")
        except Exception as exc:  # pragma: no cover - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    totals = ledger.totals()
    assert totals["calls"] == 40
    assert totals["completion_tokens"] == 40 * 4
    assert totals["cost_usd"] == pytest.approx(0.04)
    reloaded = UsageLedger(tmp_path / "ledger.jsonl")  # the JSONL file holds every call exactly once
    assert reloaded.totals() == totals


def test_a_ledger_torn_by_a_kill_still_loads_and_keeps_counting(tmp_path: Path, caplog):
    path = tmp_path / "ledger.jsonl"
    ledger = UsageLedger(path)
    for role in ("agent", "agent", "optimizer"):
        ledger.record(UsageRecord(role, "m", 10, 2, 0, 0.5, "provider"))
    with path.open("a") as f:
        f.write('{"role": "agent", "model": "m", "prompt_to')  # the process died mid-write
    with caplog.at_level(logging.WARNING):
        resumed = UsageLedger(path)
    assert "line 4 is not a usage record" in caplog.text
    resumed.record(UsageRecord("agent", "m", 1, 1, 0, None, "unknown"))
    again = UsageLedger(path)  # the new record got a line of its own
    assert again.totals("agent") == {
        "calls": 3,
        "prompt_tokens": 21,
        "completion_tokens": 5,
        "cached_tokens": 0,
        "cost_usd": 1.0,
        "unpriced_calls": 1,
    }
    assert again.totals()["calls"] == 4 and again.by_role()["optimizer"]["cost_usd"] == 0.5


def test_a_ledger_with_bytes_that_are_not_text_still_loads_and_says_which_lines_it_skipped(
    tmp_path: Path, caplog
):
    """A kill can tear a line inside a character, and a resume then appends after it: the run resumed
    with "'utf-8' codec can't decode ..." and nothing else. Such lines are skipped like any torn line."""
    path = tmp_path / "ledger.jsonl"
    ledger = UsageLedger(path)
    ledger.record(UsageRecord("agent", "modèle", 10, 2, 0, 0.5, "provider"))
    torn = path.read_bytes()[:-30] + b"\n"  # a second record, torn inside the "è" ...
    path.write_bytes(path.read_bytes() + torn[: torn.index("è".encode()) + 1] + b"\n")
    path.write_bytes(
        path.read_bytes() + b"\x89PNG\r\n\x1a\n\x00\xff binary\n" + b'{"role": ["x"]}\n'
    )  # damaged
    resumed_bytes = path.read_bytes()
    with caplog.at_level(logging.WARNING):
        resumed = UsageLedger(path)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "recreate.usage"]
    assert warning.startswith(f"{path} lines 2, ") and "not usage records, skipped" in warning
    assert resumed.totals()["calls"] == 1 and resumed.totals()["cost_usd"] == 0.5
    resumed.record(UsageRecord("agent", "m", 1, 1, 0, None, "unknown"))
    assert UsageLedger(path).totals()["calls"] == 2
    assert path.read_bytes().startswith(resumed_bytes)  # nothing it skipped was removed


@pytest.mark.parametrize(
    "fault", [Reply(status=429), Reply(status=500), Reply(status=503), Reply(delay_s=1.5)]
)
def test_retries_recover_from_faults(openai_server, fault):
    openai_server.enqueue(fault, fault, text("recovered"))
    ledger = UsageLedger()
    model = make_chat_model("scripted", base_url=openai_server.url, ledger=ledger, timeout=0.5, max_retries=4)
    assert model.invoke("x").content == "recovered"
    assert len(openai_server.requests) == 3
    assert ledger.totals()["calls"] == 1  # failed attempts are not billed


def test_retries_give_up_after_max(openai_server):
    openai_server.responder = lambda body: Reply(status=500)
    model = make_chat_model("scripted", base_url=openai_server.url, max_retries=1)
    with pytest.raises(Exception, match="500"):
        model.invoke("x")
    assert len(openai_server.requests) == 2


@pytest.mark.parametrize(
    ("budget", "limit"),
    [(Budget(max_calls=2), "calls"), (Budget(max_usd=0.15), "usd"), (Budget(max_tokens=20), "tokens")],
)
def test_budget_exceeded_raises_before_the_next_call(openai_server, budget, limit):
    openai_server.responder = lambda body: text("a b c d e", cost=0.1)
    ledger = UsageLedger(budget=budget)
    model = make_chat_model("scripted", base_url=openai_server.url, ledger=ledger)
    with pytest.raises(BudgetExceeded) as info:
        for _ in range(10):
            model.invoke("x")
    assert info.value.limit == limit
    served = len(openai_server.requests)
    assert served == ledger.totals()["calls"] <= 3


def test_api_key_never_reaches_logs_or_ledger(openai_server, secret_env, tmp_path, caplog):
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        install_log_redaction()
        ledger = UsageLedger(tmp_path / "ledger.jsonl")
        model = make_chat_model("scripted", base_url=openai_server.url, ledger=ledger)
        openai_server.enqueue(text("fine"))
        model.invoke("hello")
        logging.getLogger("recreate.test").warning("calling with key %s", secret_env)
    finally:
        root.removeHandler(handler)
    assert openai_server.headers[0]["authorization"] == f"Bearer {secret_env}"  # it did reach the endpoint
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret_env not in path.read_text(errors="replace"), path
    assert "calling with key ***" in log_file.read_text()


@pytest.mark.parametrize(
    "error",
    [  # each endpoint's own words (from its error body), as the agent records them
        "BadRequestError: Error code: 400 - {'type': 'error', 'error': {'type': 'invalid_request_error', "
        "'message': 'input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease "
        "input length or `max_tokens` and try again'}}",  # Anthropic: prompt plus max_tokens
        "BadRequestError: Error code: 400 - {'error': {'message': 'The decoder prompt (length 2136) is "
        "longer than the maximum model length of 2048. Make sure that `max_model_len` is no smaller than "
        "the number of text tokens.'}}",  # vLLM's engine (its server's check: "maximum context length")
        "ChatGoogleGenerativeAIError: Invalid argument provided to Gemini: 400 The input token count "
        "(1200293) exceeds the maximum number of tokens allowed (1048576).",
        "BadRequestError: Error code: 400 - {'type': 'error', 'error': {'type': 'invalid_request_error', "
        "'message': 'prompt is too long: 215000 tokens > 200000 maximum'}}",  # Anthropic: the prompt alone
    ],
)
def test_every_endpoints_refusal_of_an_overlong_conversation_is_a_context_overflow(error: str) -> None:
    assert is_context_overflow(error)


def test_refusals_for_other_reasons_are_not_context_overflows() -> None:
    for error in (
        "BadRequestError: Error code: 400 - invalid 'messages'",
        "RateLimitError: Error code: 429 - Rate limit reached for gpt-4o on tokens per min (TPM): "
        "Limit 30000, Used 29000, Requested 2000.",
        "InternalServerError: Error code: 503 - the model is overloaded, try again later",
    ):
        assert not is_context_overflow(error)
