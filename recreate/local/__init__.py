"""Local models served behind the OpenAI API on this machine (engines: `vllm`)."""
