"""How a Messages request's answer becomes a job: the same sampling, max_tokens, stop
sequences and label, for the conversation as sent (messages.py) or once compacted
(compacting.py), which is known only after the summary is written."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...generation import GenerationRequest, SamplingParams
from ...prompt.build import ChatInput, ChatModel, build_chat_request


@dataclass
class AnswerBuilder:
    """Builds the answer's GenerationRequest for a conversation, as often as it is asked."""
    chat_model: ChatModel
    sampling: SamplingParams
    max_tokens: int
    stop: list[str]
    label: str

    def build(self, chat: ChatInput, text: str | None = None) -> GenerationRequest:
        """`text`: the chat already rendered (render_prompt), to render it once."""
        # a copy: the build writes the grammars it derives into the sampling it is given
        return build_chat_request(self.chat_model, chat, dataclasses.replace(self.sampling), max_tokens=self.max_tokens,
                                  stop=list(self.stop), label=self.label, text=text)
