"""localserve: a local LLM daemon speaking OpenAI and Anthropic APIs over llama.cpp."""

__version__ = "0.1.0"
