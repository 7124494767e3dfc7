import json

import httpx
import openai

from recreate.testing import Reply, ScriptedOpenAIServer, text, tool_call


def test_openai_client_gets_tool_calls_usage_and_token_logprobs(openai_server):
    openai_server.enqueue(tool_call("bash", {"command": "ls -la"}))
    client = openai.OpenAI(base_url=openai_server.url, api_key="x")
    resp = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        logprobs=True,
        extra_body={"return_tokens_as_token_ids": True},
    )
    call = resp.choices[0].message.tool_calls[0]
    assert call.function.name == "bash" and json.loads(call.function.arguments) == {"command": "ls -la"}
    assert resp.usage.completion_tokens == len(resp.choices[0].logprobs.content) > 0
    assert all(t.token.startswith("token_id:") for t in resp.choices[0].logprobs.content)


def test_streaming_and_faults():
    with ScriptedOpenAIServer(responder=lambda body: text("a b")) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "x"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "a b"
        assert chunks[-1].usage.completion_tokens == 2
        srv.enqueue(Reply(raw_body="{not json"), tool_call("f", "{bad json"), Reply(content=""))
        raw = httpx.post(f"{srv.url}/chat/completions", json={"messages": []})
        assert raw.text == "{not json"
        bad = client.chat.completions.create(model="m", messages=[])
        assert bad.choices[0].message.tool_calls[0].function.arguments == "{bad json"
        assert client.chat.completions.create(model="m", messages=[]).choices[0].message.content == ""


def test_fault_rate_is_seeded():
    def run() -> int:
        with ScriptedOpenAIServer(fault_rate=0.5, fault_seed=3) as srv:
            for _ in range(20):
                httpx.post(f"{srv.url}/chat/completions", json={"messages": []})
            return srv.faults_served

    first = run()
    assert 0 < first < 20 and run() == first
