"""What a request may carry, checked as each dialect reads it (400 naming the limit)."""

from __future__ import annotations

MAX_INT_PARAM = 2**31 - 1          # counts (max_tokens, top_k, repeat_last_n, ...): llama.cpp's int32
MAX_PREDICTION_TOKENS = 65536      # OpenAI's prediction content, tokenized: the longest taken
MAX_PROMPT_ITEMS = 4096            # Responses input items with their stored context (chain, conversation), at most
MAX_CONTEXT_EDITS = 8              # Anthropic context_management.edits in one request (each may cost a tokenize)
MAX_CHOICES = 16                   # OpenAI's n: choices of one request, each a sequence of its own
MAX_DETOKENIZE_TOKENS = 1 << 20    # /detokenize's tokens: each piece is held, then the text (5M took 530 MB)
