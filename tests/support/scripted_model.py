"""Scripted test models: real GGUF weights chosen so that the model's output is a fixed script.

Every attention and feed-forward weight is zero, so each block adds nothing to the residual
stream and the final hidden state is the last token's embedding alone: the logits depend on the
last token only (a bigram model). The embedding of each token the script uses is a one-hot
vector of its own dimension; the output matrix maps that dimension to the token that follows it,
with a margin so large that any ordinary sampler (greedy, temperature 1, top-p) picks it. Every
other token embeds to dimension 0, which the output matrix maps to ``<|im_end|>``: a context the
script does not cover ends the turn at once.

The chat template (ChatML shaped, Hermes tool-call markers) ends the generation prompt with a
control token ``<|step_K|>``, where K counts the tool-result turns since the last user message.
So step 0 of a script is what the model writes when a user has just spoken ("call this tool"),
step 1 what it writes after the first tool result ("final text"), and so on. A summarisation
request (its last user turn ends with localserve's SUMMARY_REQUEST_END: a context compaction)
ends the generation prompt with ``<|summarize|>`` instead, after which the model writes the
``summary`` given to write_scripted_gguf (without one: its end of turn at once). Each step is a list
of pieces; a piece that is not already one token becomes a user-defined token, so a whole tool
call or a whole answer is one piece. The template renders an assistant turn back exactly as it
was generated (``<|step_K|>``, ``<think>`` block, content, tool calls), so a client replaying the
history hits the prompt cache.

Of the tools only their names are rendered (the script does not need them, and agent clients send
long tool lists; a template that showed none would get them written into its system turn by the
server's polyfill); system messages are rendered unless ``render_system=False``.

    path = write_scripted_gguf(dir / "agent.gguf", tool_loop_script(
        "exec_command", {"cmd": "touch made.txt"}, "The file is made."))
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from localserve.prompt.compaction import SUMMARY_HEADING, SUMMARY_REQUEST_END
from tinymodel import tiny_vocab, write_gguf

__all__ = ["MAX_STEPS", "SCRIPTED_TEMPLATE", "SUMMARY_TOKEN", "Script", "step_token", "tool_call_piece",
           "tool_call_pieces", "tool_call_token", "tool_loop_script", "with_step_token", "write_scripted_gguf"]

MAX_STEPS = 8
END_OF_TURN = "<|im_end|>"
SUMMARY_TOKEN = "<|summarize|>"
_MARGIN = 50.0  # output weight: the scripted token leads every other by MARGIN * sqrt(n_embd)

Script = Sequence[Sequence[str]]


def step_token(k: int) -> str:
    return f"<|step_{k}|>"


# Whether the conversation ends with a summarisation request (prompt/compaction.py's last line).
_COMPACTING = """
{%- set scripted_last = messages[-1] if messages else none %}
{%- set compacting = scripted_last is not none and scripted_last.role == "user" and scripted_last.content is string
    and scripted_last.content.endswith(""" + json.dumps(SUMMARY_REQUEST_END) + """) %}
"""


def _user_step(summary_step: int) -> str:
    """The step a user turn starts: 0, or summary_step after a compaction's summary (a user turn
    that holds localserve's SUMMARY_HEADING: the server may have merged other turns into it), so a
    script can end after a compaction."""
    heading = json.dumps(SUMMARY_HEADING)
    return f"({summary_step} if message.content is string and {heading} in message.content else 0)"


def _template(render_system: bool, summary_step: int = 0) -> str:
    system = ('{{- "<|im_start|>system\\n" + (message.content or "") + "<|im_end|>\\n" }}'
              if render_system else "")
    return """\
{%- set ns = namespace(step=0) %}
{%- if tools %}
    {{- "<|im_start|>system\\nTools:" }}
    {%- for tool in tools %}{{ " " + tool.function.name }}{% endfor %}
    {{- "<|im_end|>\\n" }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "tool" %}
        {%- if loop.first or loop.previtem.role != "tool" %}{% set ns.step = ns.step + 1 %}{% endif %}
        {{- "<|im_start|>tool\\n" + (message.content or "") + "<|im_end|>\\n" }}
    {%- elif message.role == "assistant" %}
        {{- "<|im_start|>assistant\\n<|step_" + ns.step | string + "|>" }}
        {%- if message.reasoning_content %}
            {{- "<think>" + message.reasoning_content + "</think>" }}
        {%- endif %}
        {{- message.content or "" }}
        {%- for call in message.tool_calls or [] %}
            {%- set call = call.function if call.function is defined else call %}
            {{- '<tool_call>{"name":' + call.name | tojson + ',"arguments":' + call.arguments | string + '}</tool_call>' }}
        {%- endfor %}
        {{- "<|im_end|>\\n" }}
    {%- elif message.role == "system" %}
        """ + system + """
    {%- else %}
        {%- set ns.step = """ + _user_step(summary_step) + """ %}
        {{- "<|im_start|>" + message.role + "\\n" + (message.content or "") + "<|im_end|>\\n" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}""" + _COMPACTING + """
    {{- "<|im_start|>assistant\\n" + ("<|summarize|>" if compacting else "<|step_" + ns.step | string + "|>") }}
{%- endif %}
"""


#: The scripted models' chat template (system messages rendered).
SCRIPTED_TEMPLATE = _template(True)

# Appended to a real model's template: after its generation prompt, the step token (the number of
# tool-result turns since the last user turn), so every turn a client sends is rendered by the
# real template and the script still knows where it is.
_STEP_AFTER_GENERATION_PROMPT = """
{%- if add_generation_prompt %}""" + _COMPACTING + """
    {%- set scripted = namespace(step=0) %}
    {%- for message in messages %}
        {%- if message.role == "user" %}
            {%- set scripted.step = USER_STEP %}
        {%- elif message.role == "tool" and (loop.first or loop.previtem.role != "tool") %}
            {%- set scripted.step = scripted.step + 1 %}
        {%- endif %}
    {%- endfor %}
    {{- "<|summarize|>" if compacting else "<|step_" ~ scripted.step ~ "|>" }}
{%- endif %}
"""


def with_step_token(real_template: str, summary_step: int = 0) -> str:
    """A real chat template with the script's step token after its generation prompt."""
    return real_template + _STEP_AFTER_GENERATION_PROMPT.replace("USER_STEP", _user_step(summary_step))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tool_call_piece(name: str, arguments: dict) -> str:
    """A call's JSON as localserve hands it back (compact), so a replayed history matches."""
    return '{"name":' + _compact(name) + ',"arguments":' + _compact(arguments) + "}"


def tool_call_token(name: str, arguments: dict) -> str:
    """One whole Hermes-style call as a single piece: scripts with several calls need it, since
    every piece of a script is a distinct token."""
    return "<tool_call>" + tool_call_piece(name, arguments) + "</tool_call>"


def tool_call_pieces(name: str, arguments: dict) -> list[str]:
    """One Hermes-style call as three tokens: ``<tool_call>``, the JSON, ``</tool_call>``."""
    return ["<tool_call>", tool_call_piece(name, arguments), "</tool_call>"]


def tool_loop_script(name: str, arguments: dict, final_text: str, *,
                     reasoning: str | None = None, final_reasoning: str | None = None) -> list[list[str]]:
    """Step 0: (think, then) call ``name`` with ``arguments``; step 1: (think, then) say ``final_text``.

    The two steps' think blocks cannot share tokens (a bigram has one successor per token), so
    the second uses its own tag pieces written as ``<think>`` text plus a distinct body."""
    first = ([ "<think>", reasoning, "</think>"] if reasoning else []) + tool_call_pieces(name, arguments)
    second = ([f"<think>{final_reasoning}</think>"] if final_reasoning else []) + [final_text]
    return [first, second]


def _chains(script: Script, summary: Sequence[str] | None = None) -> list[list[str]]:
    if not 0 < len(script) <= MAX_STEPS:
        raise ValueError(f"a script has 1..{MAX_STEPS} steps")
    chains = []
    seen: set[str] = set()
    steps = [[step_token(k), *step] for k, step in enumerate(script)]
    for chain in steps + ([[SUMMARY_TOKEN, *summary]] if summary else []):
        for piece in chain:
            if not isinstance(piece, str) or not piece:
                raise ValueError("script pieces must be non-empty strings")
            if piece in seen or piece == END_OF_TURN:
                # a bigram model has exactly one successor per token
                raise ValueError(f"piece {piece!r} appears twice in the script")
            seen.add(piece)
        chains.append(chain)
    return chains


def write_scripted_gguf(path: str | os.PathLike[str], script: Script, *, render_system: bool = True,
                        context_length: int = 65536, real_template: str | None = None,
                        summary: Sequence[str] | None = None, summary_step: int = 0,
                        words: Sequence[str] = ()) -> Path:
    """Write a model that, with the generation prompt at step K, writes ``script[K]`` then ends
    its turn. Returns the path. ``real_template``: a real model's chat template to serve with
    instead of the scripted one (the step token appended after its generation prompt).
    ``summary``: what it writes when asked for a compaction's summary; ``summary_step``: the step
    it is at after a summary turn (a script that ends once the conversation was compacted).
    ``words``: more vocabulary (tiny_vocab's), so that a long prompt is fewer tokens."""
    chains = _chains(script, summary)
    base = {text for text, _, _ in tiny_vocab(words=words)}
    special: list[Any] = [(step_token(k), "control") for k in range(MAX_STEPS)] + [(SUMMARY_TOKEN, "control")]
    for chain in chains:
        special += [(p, "user_defined") for p in chain[1:] if p not in base and _spm(p) not in base]
    vocab = tiny_vocab(_unique(special), words)
    ids = {text: i for i, (text, _, _) in enumerate(vocab)}
    index = {piece: ids.get(piece, ids.get(_spm(piece))) for chain in chains for piece in chain}
    index[END_OF_TURN] = ids[END_OF_TURN]

    successors: list[tuple[int, int]] = []  # (token, next token)
    for chain in chains:
        ids = [index[p] for p in chain] + [index[END_OF_TURN]]
        successors += list(zip(ids, ids[1:]))

    n_vocab = len(vocab)
    n_embd = 64 * (1 + len(successors) // 64)
    embd = np.zeros((n_vocab, n_embd), dtype=np.float32)
    out = np.zeros((n_vocab, n_embd), dtype=np.float32)
    embd[:, 0] = 1.0
    out[index[END_OF_TURN], 0] = _MARGIN
    for dim, (token, following) in enumerate(successors, start=1):
        embd[token] = 0.0
        embd[token, dim] = 1.0
        out[following, dim] = _MARGIN
    template = with_step_token(real_template, summary_step) if real_template is not None \
        else _template(render_system, summary_step)
    return _write(Path(path), vocab, embd, out, template, context_length)


def _spm(piece: str) -> str:
    return piece.replace(" ", "\u2581")


def _unique(items: list[Any]) -> list[Any]:
    seen, outl = set(), []
    for item in items:
        if item[0] not in seen:
            seen.add(item[0])
            outl.append(item)
    return outl


def _write(path: Path, vocab: list, embd: np.ndarray, out: np.ndarray, template: str,
           context_length: int) -> Path:
    n_vocab, n_embd = embd.shape
    n_head, n_ff = n_embd // 64, 64
    arch = "llama"
    meta: dict[str, Any] = {
        "general.name": "scripted-llama",
        "general.file_type": 0,
        f"{arch}.vocab_size": n_vocab,
        f"{arch}.context_length": context_length,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.block_count": 1,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.rope.dimension_count": 64,
        f"{arch}.rope.freq_base": 10000.0,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [t for t, _, _ in vocab],
        "tokenizer.ggml.scores": [float(s) for _, s, _ in vocab],
        "tokenizer.ggml.token_type": [int(k) for _, _, k in vocab],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_space_prefix": False,
        "tokenizer.chat_template": template,
    }
    zeros = lambda *shape: np.zeros(shape, dtype=np.float32)  # noqa: E731
    ones = np.ones(n_embd, dtype=np.float32)
    tensors = [
        ("token_embd.weight", embd),
        ("output_norm.weight", ones),
        ("blk.0.attn_norm.weight", ones),
        ("blk.0.attn_q.weight", zeros(n_embd, n_embd)),
        ("blk.0.attn_k.weight", zeros(n_embd, n_embd)),
        ("blk.0.attn_v.weight", zeros(n_embd, n_embd)),
        ("blk.0.attn_output.weight", zeros(n_embd, n_embd)),
        ("blk.0.ffn_norm.weight", ones),
        ("blk.0.ffn_gate.weight", zeros(n_ff, n_embd)),
        ("blk.0.ffn_up.weight", zeros(n_ff, n_embd)),
        ("blk.0.ffn_down.weight", zeros(n_embd, n_ff)),
        ("output.weight", out),
    ]
    return write_gguf(path, arch, meta, tensors)
