"""Test helpers that ship with the package: a scripted OpenAI-compatible server and chat model."""

from recreate.testing.openai_server import Reply, ScriptedOpenAIServer, text, tool_call

__all__ = ["Reply", "ScriptedOpenAIServer", "text", "tool_call"]
