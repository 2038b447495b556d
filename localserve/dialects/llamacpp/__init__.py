"""llama-server's own API (its README's "API Endpoints"): /completion, /props, /embedding,
/reranking, the two input_tokens counts, the router's /models and /models/sse, and slot
save/restore/erase; /infill, /tokenize and friends live beside the other dialects."""
