"""localserve: a local LLM daemon serving GGUF models over the OpenAI, Anthropic, Ollama and llama-server APIs."""

__version__ = "0.1.0"
