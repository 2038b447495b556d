"""Ollama's own API (/api/*): chat, generate, embed, and the model endpoints its clients probe."""
