"""What the bench measures of a server against the bare engine: the workload, the bare engine's
runs taken between the server's, and the paired figures (single stream, aggregate, second turn).

Greedy by default; with `sampling` (temperature, top_k, top_p, min_p) the server's requests and
the bare engine's loop use the same settings (the bare side runs llama.cpp's own sampler chain).
"""

from __future__ import annotations

import itertools
import statistics

from .bare import BareEngine
from .client import concurrent_streams, stream_completion

PROMPT = ("The history of computing is a story of people building tools to think with. "
          "From the abacus to the mechanical calculators of the seventeenth century, ") * 3
CONVERSATION = "Conversation {i}: tell me about the rivers, mountains and cities of region {i}. " * 12
FOLLOW_UP = " And now, briefly, what about the weather there in spring and in autumn? " * 2
CONCURRENCY = (1, 2, 4, 8)
SINGLE_PAIRS_PER_ROUND = 3


class Workload:
    """The token sequences every contender gets, tokenized once by the bare engine."""

    def __init__(self, engine: BareEngine, n_conversations: int = 4):
        self.prompt = engine.tokenize(PROMPT)
        self.conversations = [engine.tokenize(CONVERSATION.format(i=i)) for i in range(n_conversations)]
        self.follow_up = engine.tokenize(FOLLOW_UP)[1:]        # no BOS in the middle
        self.ban = engine.eog_tokens()
        self.texts: dict[tuple, str] = {}          # token prompts as text, for servers that take only text
        self._detokenize = engine.detokenize
        self._markers = itertools.count(100)

    def fresh(self, tokens: list[int]) -> list[int]:
        """tokens with a marker never used before spliced in after BOS: no cache can know it."""
        return [tokens[0], next(self._markers)] + tokens[1:]

    def as_text(self, *token_lists: list[int]) -> None:
        for tokens in token_lists:
            self.texts[tuple(tokens)] = self._detokenize(tokens)


class BareRuns:
    """The floor's measurements, taken between the server's so both see the same machine."""

    def __init__(self, engine: BareEngine, work: Workload, args, sampling: dict | None = None):
        self.engine, self.work, self.args, self.sampling = engine, work, args, sampling
        self.runs: list[tuple[float, float]] = []
        engine.run(work.prompt, 8)                                  # warm-up
        self.floors: list[float] = []
        self.rounds: list[dict[int, float]] = []                   # aggregate tokens/s by stream count

    def once(self, prompt: list[int]) -> None:
        self.runs.append(self.engine.run(prompt, self.args.tokens, sampling=self.sampling))

    def first_turns(self, conversations: list[list[int]]) -> None:
        for seq, conv in enumerate(conversations):
            self.engine.resident(seq, conv)

    def floor(self, seq: int, conversation: list[int]) -> float:
        """Seconds to prefill the follow-up on top of the resident conversation in sequence seq."""
        self.floors.append(self.engine.extend(seq, len(conversation), self.work.follow_up))
        return self.floors[-1]

    def aggregate(self, prompts: list[list[int]]) -> float:
        rate = self.engine.aggregate(prompts, self.args.tokens, self.sampling)
        if not self.rounds or len(prompts) in self.rounds[-1]:
            self.rounds.append({})
        self.rounds[-1][len(prompts)] = rate
        return rate

    def result(self) -> dict:
        result = {"prefill": statistics.median(r[0] for r in self.runs),
                  "decode": statistics.median(r[1] for r in self.runs),
                  "second_turn_floor": statistics.median(self.floors) if self.floors else float("nan")}
        for n in (self.rounds[0] if self.rounds else ()):
            result[f"aggregate_{n}"] = statistics.median(r[n] for r in self.rounds)
            result[f"scaling_{n}"] = statistics.median(r[n] / r[1] for r in self.rounds)
        return result


def measure_server(server, work: Workload, args, bare: BareRuns | None = None, sampling: dict | None = None,
                   concurrency: tuple[int, ...] = CONCURRENCY) -> dict:
    """The server's figures; each ratio is the median of ratios within one round.

    A shared machine drifts by more than the differences measured here, so each
    figure is paired with a reference taken right before or after it (the bare
    engine's run, or the same round's single stream) and the pairs' ratios count.
    """
    port = server.port
    ban = {str(t): -100 for t in work.ban}
    base = {"max_tokens": args.tokens, "logit_bias": ban, **(sampling or {"temperature": 0})}
    if getattr(server, "text_prompts", False):
        base["text_prompts"] = work.texts
    stream_completion(port, {**base, "prompt": work.prompt, "max_tokens": 8})          # warm-up
    singles = []
    # Single streams are short, so they get three times the pairs, and the pairs alternate
    # which side runs first: a machine speeding up or slowing down favours neither.
    for i in range(SINGLE_PAIRS_PER_ROUND * args.repeat):
        prompt = work.fresh(work.prompt)            # the bare run prefills the same tokens
        if bare is not None and i % 2 == 0:
            bare.once(prompt)
        singles.append(stream_completion(port, {**base, "prompt": prompt}))
        if bare is not None and i % 2 == 1:
            bare.once(prompt)
    result = {"ttft": statistics.median(r.ttft for r in singles),
              "decode": statistics.median(r.decode_rate for r in singles)}
    if bare is not None:
        result["decode_vs_bare"] = statistics.median(r.decode_rate / b[1] for r, b in zip(singles, bare.runs))
        result["ttft_vs_bare"] = statistics.median(r.ttft - b[0] for r, b in zip(singles, bare.runs))
    if args.quick:
        return result
    rounds, vs_bare = [], []
    for _ in range(args.repeat):
        rates = {}
        for n in concurrency:
            prompts = [work.fresh(work.prompt) for _ in range(n)]
            bare_rate = bare.aggregate(prompts) if bare is not None else None
            rates[n] = aggregate_rate(port, base, prompts)
            if bare_rate and n == 4:
                vs_bare.append(rates[n] / bare_rate)
        rounds.append(rates)
    for n in concurrency:
        result[f"aggregate_{n}"] = statistics.median(r[n] for r in rounds)
        result[f"scaling_{n}"] = statistics.median(r[n] / r[1] for r in rounds)
    if vs_bare:
        result["aggregate_4_vs_bare"] = statistics.median(vs_bare)
    result.update(second_turn(port, base, work, args.repeat, bare))
    result["peak_rss_mb"] = server.peak_rss_mb()
    return result


def aggregate_rate(port: int, base: dict, prompts: list[list[int]]) -> float:
    """Total generated tokens per second with a stream per prompt, all at once (prefill included)."""
    results, elapsed = concurrent_streams(port, base, prompts)
    return sum(r.completion_tokens for r in results) / elapsed


def second_turn(port: int, base: dict, work: Workload, rounds: int, bare: BareRuns | None) -> dict:
    """TTFT of each conversation's second turn, four conversations interleaved.

    Each round uses new conversations (a marker token spliced in), so nothing is
    left over from the last. With `bare`, the engine holds the same four
    conversations and each second turn is paired with the floor for the same
    tokens, the two taken back to back, in alternating order.
    """
    ttfts, ratios = [], []
    for _ in range(rounds):
        conversations = [work.fresh(c) for c in work.conversations]
        for conv in conversations:
            stream_completion(port, {**base, "prompt": conv, "max_tokens": 8})
        if bare is not None:
            bare.first_turns(conversations)
        for seq, conv in enumerate(conversations):
            floor = bare.floor(seq, conv) if bare is not None and seq % 2 == 0 else None
            ttfts.append(stream_completion(port, {**base, "prompt": conv + work.follow_up, "max_tokens": 1}).ttft)
            if bare is not None and floor is None:
                floor = bare.floor(seq, conv)
            if floor is not None:
                ratios.append(ttfts[-1] / floor)
    result = {"second_turn": statistics.median(ttfts)}
    if ratios:
        result["second_turn_vs_floor"] = statistics.median(ratios)
    return result


