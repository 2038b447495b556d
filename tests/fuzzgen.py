"""Request generators for tests/fuzz.py: JSON values of every type, GBNF grammars, JSON schemas,
and one valid-looking request per endpoint, then mutated (a field's type swapped, a field
removed or added, a value pushed to an extreme, or the whole body replaced by random JSON);
images with lying headers (sizes, depths, scan and frame counts, truncations) on every route
that takes them.

Everything is drawn from one random.Random, so a seed replays a run. Nothing here talks to a
server: a generator returns (method, path, body) where body is bytes, a JSON value or None.
"""

from __future__ import annotations

import base64
import json
import random
import string
import struct
import zlib
from typing import Any
from urllib.parse import quote

import hostile_images  # tests/support/ (conftest puts it on the path)
import imagefiles

ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
EXTREME_NUMBERS = [0, -1, 1, 2, 2**31, 2**40, 2**63 - 1, 2**63, 2**64 + 1, -2**63 - 1, 10**30, 1e308, -1e308,
                   0.5, -0.0, 1e-300, 3.7, 99999999999999999999999999]
ODD_STRINGS = ["", "x", "hi", "5", "true", "null", "é\u2028\ud7ff", "\u0000", "\x01\x1f", "<|im_end|>", "</s>",
               "<tool_call>", "{", "]]", "%s%n", "a" * 3000, "🙂" * 50]
SPECIAL_TEXTS = ["<|im_start|>", "<|im_end|>", "</s>", "<s>", "<tool_call>", "</tool_call>", "<think>"]


class Gen:
    def __init__(self, rng: random.Random, n_vocab: int = 400, ids: dict[str, list[str]] | None = None):
        self.r = rng
        self.n_vocab = n_vocab
        self.ids = ids if ids is not None else {"response": [], "conversation": [], "item": []}

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    # ---- JSON values ---------------------------------------------------------------------------

    def scalar(self) -> Any:
        kind = self.r.randrange(5)
        if kind == 0:
            return self.r.choice([None, True, False])
        if kind in (1, 2):
            return self.r.choice(EXTREME_NUMBERS) if self.chance(0.6) else self.r.randint(-5, 50)
        return self.r.choice(ODD_STRINGS) if self.chance(0.6) else self.word()

    def word(self, n: int = 6) -> str:
        return "".join(self.r.choice(string.ascii_letters + string.digits + " _-") for _ in range(self.r.randint(1, n)))

    def value(self, depth: int = 0) -> Any:
        if self.chance(0.02):
            return self.deep(self.r.choice([50, 200, 600, 1200]))
        if depth >= 3 or self.chance(0.5):
            return self.scalar()
        if self.chance(0.5):
            return [self.value(depth + 1) for _ in range(self.r.randint(0, 4))]
        return {self.word(): self.value(depth + 1) for _ in range(self.r.randint(0, 4))}

    def deep(self, n: int) -> Any:
        value: Any = self.scalar()
        for _ in range(n):
            value = [value] if self.chance(0.5) else {"a": value}
        return value

    def other_type(self, value: Any) -> Any:
        for _ in range(20):
            candidate = self.value(1)
            if type(candidate) is not type(value) or candidate == value and not isinstance(value, (dict, list)):
                return candidate
        return None

    # ---- grammars and schemas ------------------------------------------------------------------

    def gbnf(self) -> str:
        if self.chance(0.1):
            return self.r.choice(["", "root ::=", "root ::= (", "root ::= [", "x ::= \"a\"", "root ::= undefined",
                                  'root ::= "a" root', "root ::= <|im_end|>", "root ::= </s>",
                                  "root ::= <[2]>", 'root ::= "\\x00"', 'root ::= [^\\x00-\\U0010FFFF]',
                                  "root ::= " + "[ -~]? " * self.r.randint(10, 400)])
        names = [f"r{i}" for i in range(self.r.randint(0, 3))]
        rules = [f"root ::= {self.gbnf_expr(names, 0)}"]
        rules += [f"{name} ::= {self.gbnf_expr(names, 1)}" for name in names]
        return "\n".join(rules)

    def gbnf_expr(self, names: list[str], depth: int) -> str:
        alternatives = [self.gbnf_seq(names, depth) for _ in range(self.r.randint(1, 3))]
        return " | ".join(alternatives)

    def gbnf_seq(self, names: list[str], depth: int) -> str:
        items = []
        for _ in range(self.r.randint(1, 3)):
            kind = self.r.randrange(6)
            if kind == 0:
                item = json.dumps(self.word(4))
            elif kind == 1:
                item = self.r.choice(["[a-z]", "[0-9]", "[^\"\\n]", "[ -~]", "[abc]", "[\\u00e9-\\u00ff]"])
            elif kind == 2 and names:
                item = self.r.choice(names)
            elif kind == 3 and depth < 3:
                item = f"({self.gbnf_expr(names, depth + 1)})"
            elif kind == 4:
                item = self.r.choice(["<[3]>", f"<[{self.r.randrange(self.n_vocab)}]>", "<tool_call>", "<think>"])
            else:
                item = json.dumps(self.r.choice(["{", "}", "\"", " ", "yes", "no"]))
            if self.chance(0.3):
                item += self.r.choice(["?", "*", "+", "{2}", "{0,3}", "{1,}", f"{{0,{self.r.choice([5, 50, 2000])}}}"])
            items.append(item)
        return " ".join(items)

    def schema(self, depth: int = 0) -> Any:
        if self.chance(0.05):
            return self.r.choice([True, False, {}, [], "string", None, {"type": "nonsense"},
                                  {"$ref": "#/$defs/missing"}, self.deep_schema(self.r.choice([40, 300, 600]))])
        kind = self.r.choice(["string", "number", "integer", "boolean", "null", "array", "object", "enum",
                              "const", "anyOf", "oneOf", "allOf", "multi", "ref"] if depth < 4 else
                             ["string", "integer", "boolean", "enum"])
        if kind == "string":
            schema: dict[str, Any] = {"type": "string"}
            if self.chance(0.3):
                schema["maxLength"] = self.r.choice([0, 1, 5, -1, 10**6, 2.5])
            if self.chance(0.2):
                schema["minLength"] = self.r.choice([0, 2, 7, -3])
            if self.chance(0.2):
                schema["pattern"] = self.r.choice(["^a+$", "^[0-9]{2,4}$", "(a|b)*c", "^(a{0,20}){0,20}$", "[",
                                                   "^\\d{3}-\\w+$", ".*", "^$", "a{5,2}", "\\p{L}"])
            if self.chance(0.2):
                schema["format"] = self.r.choice(["date", "time", "date-time", "uuid", "email", "bogus"])
            return schema
        if kind in ("number", "integer"):
            schema = {"type": kind}
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if self.chance(0.2):
                    schema[key] = self.r.choice(EXTREME_NUMBERS + ["5"])
            return schema
        if kind in ("boolean", "null"):
            return {"type": kind}
        if kind == "array":
            schema = {"type": "array", "items": self.schema(depth + 1)}
            if self.chance(0.3):
                schema["minItems"] = self.r.choice([0, 1, 3, -1, 2**40])
            if self.chance(0.3):
                schema["maxItems"] = self.r.choice([0, 1, 2, 5, 10**9])
            return schema
        if kind == "object":
            props = {self.word(5): self.schema(depth + 1) for _ in range(self.r.randint(0, 3))}
            schema = {"type": "object", "properties": props}
            if props and self.chance(0.6):
                schema["required"] = self.r.sample(list(props), self.r.randint(0, len(props)))
            if self.chance(0.3):
                schema["additionalProperties"] = self.r.choice([False, True, {"type": "integer"}])
            return schema
        if kind == "enum":
            return {"enum": [self.scalar() for _ in range(self.r.randint(0, 4))]}
        if kind == "const":
            return {"const": self.value(2)}
        if kind in ("anyOf", "oneOf", "allOf"):
            return {kind: [self.schema(depth + 1) for _ in range(self.r.randint(0, 3))]}
        if kind == "multi":
            return {"type": self.r.sample(["string", "integer", "null", "boolean"], 2)}
        return {"$defs": {"a": self.schema(depth + 1)}, "$ref": self.r.choice(["#/$defs/a", "#/$defs/b", "#"])}

    def deep_schema(self, n: int) -> dict:
        schema: dict[str, Any] = {"type": "string"}
        for _ in range(n):
            schema = self.r.choice([{"type": "array", "items": schema},
                                    {"type": "object", "properties": {"a": schema}, "required": ["a"]},
                                    {"anyOf": [schema]}])
        return schema

    # ---- pieces of requests --------------------------------------------------------------------

    def text(self) -> str:
        if self.chance(0.1):
            return self.r.choice(ODD_STRINGS + SPECIAL_TEXTS)
        return self.word(20)

    def chat_message(self) -> dict:
        role = self.r.choice(ROLES) if self.chance(0.9) else self.scalar()
        message: dict[str, Any] = {"role": role, "content": self.text()}
        if self.chance(0.15):
            message["content"] = [{"type": "text", "text": self.text()}]
        if role == "assistant" and self.chance(0.3):
            message["tool_calls"] = [{"id": "call_1", "type": "function",
                                      "function": {"name": "f", "arguments": json.dumps({"a": 1})}}]
        if role == "tool":
            message["tool_call_id"] = "call_1"
        return message

    def logit_bias(self) -> dict:
        return {str(self.r.choice([2, 3, 4, self.r.randrange(self.n_vocab)])): self.r.choice([-100, 100, 5])
                for _ in range(self.r.randint(1, 3))}

    def function(self) -> dict:
        return {"name": self.r.choice(["f", "get_weather", self.word(8)]), "description": self.text(),
                "parameters": self.schema() if self.chance(0.5) else {"type": "object", "properties": {}}}

    def sampling(self, body: dict) -> None:
        """The llama.cpp extensions and sampling fields every dialect takes, some of them."""
        extras = {"temperature": lambda: self.r.choice([0, 0.7, 2]), "top_p": lambda: 0.9,
                  "top_k": lambda: self.r.choice([0, 1, 40]), "min_p": lambda: 0.05, "seed": lambda: 7,
                  "repeat_penalty": lambda: 1.1, "logit_bias": self.logit_bias, "grammar": self.gbnf,
                  "chat_template_kwargs": lambda: {"enable_thinking": self.chance(0.5)},
                  "keep_alive": self.keep_alive}
        for name, make in extras.items():
            if self.chance(0.12):
                body[name] = make()

    def keep_alive(self) -> Any:
        """Ollama's durations, at their edges: negative is forever, past 292 years a 400 (/api/ps must
        answer whatever was taken)."""
        return self.r.choice([-1, "-1m", -1e308, "5m", 30, 0.5, "2562047h", 9223372036.85, 1e18, 1e308,
                              "99999999999h", "2562048h", "1e18", "NaN", "inf", "", "1h30m", True, [], "9" * 400])

    # ---- one request per endpoint ----------------------------------------------------------------

    def chat(self) -> tuple[str, str, Any]:
        body: dict[str, Any] = {"model": "tiny", "messages": [self.chat_message() for _ in range(self.r.randint(1, 3))],
                                "max_tokens": self.r.randint(1, 4)}
        if self.chance(0.3):
            body["stream"] = True
            if self.chance(0.5):
                body["stream_options"] = {"include_usage": True}
        if self.chance(0.15):
            body["response_format"] = self.r.choice([{"type": "json_object"}, {"type": "text"}, {
                "type": "json_schema", "json_schema": {"name": "x", "schema": self.schema()}}])
        if self.chance(0.15):
            body["tools"] = [{"type": "function", "function": self.function()} for _ in range(self.r.randint(1, 2))]
            body["tool_choice"] = self.r.choice(["auto", "none", "required",
                                                 {"type": "function", "function": {"name": "f"}}])
        if self.chance(0.1):
            body["logprobs"] = True
            body["top_logprobs"] = self.r.choice([0, 2, 20, 21])
        if self.chance(0.1):
            body["stop"] = self.r.choice(["a", ["\n", "x"], [""], []])
        self.sampling(body)
        return "POST", "/v1/chat/completions", body

    def completion(self) -> tuple[str, str, Any]:
        prompt: Any = self.text() if self.chance(0.8) else [self.r.randrange(self.n_vocab) for _ in range(3)]
        body: dict[str, Any] = {"model": "tiny", "prompt": prompt, "max_tokens": self.r.randint(1, 4)}
        if self.chance(0.3):
            body["stream"] = True
        if self.chance(0.1):
            body["logprobs"] = self.r.choice([0, 3, 20])
        self.sampling(body)
        if self.chance(0.3):
            return self.llama_completion(body)
        return "POST", "/v1/completions", body

    def llama_completion(self, body: dict) -> tuple[str, str, Any]:
        """The same work through llama-server's own /completion, in its own words."""
        body["n_predict"] = body.pop("max_tokens")
        if self.chance(0.2):        # a mixed prompt: token ids and text
            body["prompt"] = [self.r.randrange(self.n_vocab), self.text(), self.r.randrange(self.n_vocab)]
        for name, make in {"n_probs": lambda: self.r.choice([0, 2, 20, 21]), "return_tokens": lambda: True,
                           "ignore_eos": lambda: True, "post_sampling_probs": lambda: True,
                           "json_schema": self.schema,
                           "logit_bias": lambda: [[self.r.randrange(self.n_vocab), False]],
                           "typical_p": lambda: self.r.choice([0.5, 1, 2])}.items():
            if self.chance(0.1):
                body[name] = make()
        return "POST", self.r.choice(["/completion", "/completions"]), body

    def responses(self) -> tuple[str, str, Any]:
        body: dict[str, Any] = {"model": "tiny", "max_output_tokens": self.r.randint(1, 4)}
        body["input"] = self.text() if self.chance(0.6) else [
            {"role": self.r.choice(["user", "system", "developer", "assistant"]), "content": self.text()},
            *([{"type": "function_call_output", "call_id": "call_1", "output": "ok"}] if self.chance(0.2) else [])]
        for name, make in {"stream": lambda: True, "store": lambda: self.chance(0.7),
                           "background": lambda: True, "instructions": self.text,
                           "previous_response_id": lambda: self.known("response"),
                           "conversation": lambda: self.known("conversation"),
                           "text": lambda: {"format": self.r.choice([
                               {"type": "json_schema", "name": "x", "schema": self.schema()},
                               {"type": "json_object"}, {"type": "text"}])},
                           "tools": lambda: [{"type": "function", **self.function()}],
                           "tool_choice": lambda: self.r.choice(["auto", "required", "none"]),
                           "reasoning": lambda: {"effort": self.r.choice(["low", "high", "max"])},
                           "metadata": lambda: {"k": "v"}}.items():
            if self.chance(0.12):
                body[name] = make()
        if body.get("background"):
            body["store"] = True
        self.sampling(body)
        return "POST", "/v1/responses", body

    def messages(self) -> tuple[str, str, Any]:
        body: dict[str, Any] = {"model": "claude-x", "max_tokens": self.r.randint(1, 4),
                                "messages": [{"role": "user", "content": self.text() if self.chance(0.7) else
                                              [{"type": "text", "text": self.text()}]}]}
        for name, make in {"stream": lambda: True, "system": self.text,
                           "stop_sequences": lambda: ["x"], "top_k": lambda: 5,
                           "tools": lambda: [{"name": "f", "description": "d", "input_schema": self.schema()}],
                           "tool_choice": lambda: self.r.choice([{"type": "auto"}, {"type": "any"},
                                                                 {"type": "tool", "name": "f"}, {"type": "none"}]),
                           "thinking": lambda: {"type": "enabled", "budget_tokens": self.r.choice([1, 1024, -5])},
                           "metadata": lambda: {"user_id": "u"}}.items():
            if self.chance(0.12):
                body[name] = make()
        self.sampling(body)
        path = "/v1/messages/count_tokens" if self.chance(0.15) else "/v1/messages"
        if path.endswith("count_tokens"):
            body.pop("max_tokens", None)
        return "POST", path, body

    def utility(self) -> tuple[str, str, Any]:
        return self.r.choice([
            lambda: ("POST", "/tokenize", {"content": self.text(), "with_pieces": self.chance(0.3),
                                           "add_special": self.chance(0.5)}),
            lambda: ("POST", "/detokenize", {"tokens": [self.r.randrange(self.n_vocab) for _ in range(4)]}),
            lambda: ("POST", "/apply-template", {"messages": [self.chat_message()]}),
            lambda: ("POST", "/v1/chat/completions/input_tokens", {"messages": [self.chat_message()]}),
            lambda: ("POST", "/v1/responses/input_tokens", {"input": self.text()}),
            lambda: ("POST", "/v1/conversations", {"items": [{"type": "message", "role": "user",
                                                              "content": self.text()}], "metadata": {"a": "b"}}),
            lambda: ("POST", f"/v1/conversations/{self.known('conversation')}/items",
                     {"items": [{"type": "message", "role": "user", "content": self.text()}]}),
            lambda: ("POST", f"/v1/conversations/{self.known('conversation')}", {"metadata": {"x": "y"}}),
            lambda: ("POST", f"/v1/responses/{self.known('response')}/cancel", None),
        ])()

    def read_only(self) -> tuple[str, str, Any]:
        response, conversation = self.known("response"), self.known("conversation")
        query = self.r.choice(["", "?stream=true", f"?stream=true&starting_after={self.r.choice(['-1', '0', '3', '-2', 'x', '99999999999999999999999999', '9223372036854775807'])}",
                               "?stream=maybe", "?include=x"])
        path = self.r.choice([
            "/health", "/v1/health", "/v1/models", "/v1/models/tiny", "/v1/models/other", "/slots", "/metrics",
            "/api/ps", "/api/tags", "/props", "/props?model=tiny", "/models",
            f"/v1/responses/{response}{query}", f"/v1/responses/{response}/input_items?limit="
            f"{self.r.choice(['1', '100', '0', '101', 'x', '-1'])}&order={self.r.choice(['asc', 'desc', 'up'])}",
            f"/v1/conversations/{conversation}", f"/v1/conversations/{conversation}/items?limit=5",
            f"/v1/conversations/{conversation}/items/{self.known('item')}", "/nope", "/v1/%ff%fe"])
        method = self.r.choice(["GET"] * 6 + ["HEAD", "OPTIONS", "DELETE", "PUT"])
        return method, path, None

    def known(self, kind: str) -> str:
        pool = self.ids[kind]
        if pool and self.chance(0.8):
            return self.r.choice(pool)
        return quote(self.r.choice([f"{kind[:4]}_{self.word(8)}", "", "x" * 300, "..", "\x00", "é"]), safe="")

    # ---- images: headers of random sizes, cut short, with many scans or frames -----------------

    def side(self) -> int:
        if self.chance(0.4):
            return self.r.choice([0, 1, 2, 7, 8, 9, 255, 1023, 4097, 8192, 16385, 65535])
        return self.r.randint(1, 48)

    def image(self) -> bytes:
        """An image of an accepted format, its header often lying: random dimensions, PNG depths
        and colour types, JPEG scan counts, GIF screens and frame counts, BMP depths and offsets;
        then maybe cut short or a few bytes flipped."""
        w, h = self.side(), self.side()
        kind = self.r.randrange(5)
        if kind == 0:
            depth, color = self.r.choice([(1, 0), (8, 0), (16, 0), (8, 2), (16, 2), (4, 3), (8, 3), (8, 4),
                                          (8, 6), (16, 6), (3, 2), (8, 5)])
            rows = min(h * (1 + (w * 4 * depth + 7) // 8), 1 << 16)
            body = bytes(rows) if self.chance(0.5) else self.r.randbytes(rows)
            header = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, self.r.choice([0, 0, 1]))
            data = hostile_images.png_with(header, zlib.compress(body))
        elif kind == 1:
            small = min(w, 64), min(h, 64)
            if self.chance(0.5):
                data = imagefiles.progressive_jpeg(*small, ac_scans=self.r.choice([1, 2, 5, 20, 62, 63, 64, 150]))
            else:
                data = imagefiles.jpeg(*small)
            if self.chance(0.3):       # the frame header declares another size
                at = data.index(b"\xff\xc2" if b"\xff\xc2" in data else b"\xff\xc0") + 5
                data = data[:at] + struct.pack(">HH", h, w) + data[at + 4:]
        elif kind == 2:
            data = imagefiles.gif(min(w, 32), min(h, 32))
            frame = data[13 + 384:-1]
            data = data[:-1] + frame * self.r.choice([0, 1, 3, 40]) + b";"
            if self.chance(0.4):       # the screen declares another size
                data = data[:6] + struct.pack("<HH", w, h) + data[10:]
            if self.chance(0.2):
                data = self.r.choice([hostile_images.gif_big_screen(w, h),
                                      hostile_images.gif_frame_outside(min(w, 65534), h)])
        elif kind == 3:
            data = bytearray(imagefiles.bmp(min(w, 32), min(h, 32)))
            if self.chance(0.5):
                data[18:26] = struct.pack("<ii", w, self.r.choice([h, -h]))
            if self.chance(0.3):
                data[28:30] = struct.pack("<H", self.r.choice([0, 1, 4, 8, 16, 24, 32, 33]))
            if self.chance(0.3):
                data[10:14] = struct.pack("<I", self.r.choice([0, 14, 54, 2**31, 2**32 - 1]))
            data = bytes(data)
        else:
            data = self.r.choice([hostile_images.bmp_without_pixels(w, h), hostile_images.gif_without_clear_code(),
                                  hostile_images.progressive_scans(self.r.choice([8, 64, 512]),
                                                                   self.r.choice([1, 63, 64, 65, 300])),
                                  hostile_images.png_inflating(1 << 20), imagefiles.WEBP, b"RIFF\x00\x00\x00\x00WAVE"])
        if self.chance(0.25):
            data = data[:self.r.randrange(len(data) + 1)]
        if self.chance(0.15) and data:
            flipped = bytearray(data)
            for _ in range(self.r.randint(1, 4)):
                flipped[self.r.randrange(len(flipped))] = self.r.randrange(256)
            data = bytes(flipped)
        return data

    def images_request(self) -> tuple[str, str, Any]:
        """One to three fuzzed images on a route that takes them."""
        encoded = [base64.b64encode(self.image()).decode() for _ in range(self.r.randint(1, 3))]
        urls = [f"data:image/png;base64,{e}" if self.chance(0.2) else f"data:;base64,{e}" for e in encoded]
        return self.r.choice([
            lambda: ("POST", "/v1/chat/completions", {"model": "tiny", "max_tokens": 2, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look"}] + [
                    {"type": "image_url", "image_url": {"url": u}} for u in urls]}]}),
            lambda: ("POST", "/v1/responses", {"model": "tiny", "max_output_tokens": 2, "store": False, "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "look"}] + [
                    {"type": "input_image", "image_url": u} for u in urls]}]}),
            lambda: ("POST", "/v1/messages", {"model": "tiny", "max_tokens": 2, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look"}] + [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": e}}
                    for e in encoded]}]}),
            lambda: ("POST", "/api/chat", {"model": "tiny", "stream": False, "options": {"num_predict": 2},
                                           "messages": [{"role": "user", "content": "look", "images": encoded}]}),
            lambda: ("POST", "/v1/completions", {"model": "tiny", "max_tokens": 2, "prompt": {
                "prompt_string": "look" + " <__media__>" * len(encoded) + " now", "multimodal_data": encoded}}),
        ])()

    # ---- headers -------------------------------------------------------------------------------

    def headers(self, has_body: bool) -> dict[str, str]:
        """What a client sends besides the body: mostly JSON's type and no Origin; now and then a
        browser's cross-site shapes (a foreign or null Origin, Sec-Fetch-Site, a simple request's
        text/plain or form body) and JSON types spelled otherwise. Each must be a 4xx in the
        dialect's shape or an answer, never anything else."""
        headers = {"Content-Type": "application/json"} if has_body else {}
        if self.chance(0.06):
            kind = self.r.choice(["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                  "multipart/form-data; boundary=x", "application/json; charset=utf-8",
                                  "application/vnd.api+json", "APPLICATION/JSON", "application/jsonx", "", None])
            if kind is None:
                headers.pop("Content-Type", None)
            else:
                headers["Content-Type"] = kind
        if self.chance(0.06):
            headers["Origin"] = self.r.choice(["https://evil.example", "null", "http://localhost",
                                               "http://127.0.0.1:1", "x" * 3000, "http://é.example"])
        if self.chance(0.04):
            headers["Sec-Fetch-Site"] = self.r.choice(["cross-site", "same-site", "same-origin", "none", "??"])
            headers["Sec-Fetch-Mode"] = self.r.choice(["no-cors", "cors", "navigate"])
        return headers

    # ---- mutation ------------------------------------------------------------------------------

    def request(self) -> tuple[str, str, Any]:
        make = self.r.choices([self.chat, self.completion, self.responses, self.messages, self.utility,
                               self.read_only, self.images_request], weights=[5, 2, 4, 4, 2, 2, 2])[0]
        method, path, body = make()
        if isinstance(body, dict) and self.chance(0.7):
            for _ in range(self.r.randint(1, 3)):
                self.mutate(body)
        if method == "POST" and self.chance(0.04):
            body = self.value() if self.chance(0.6) else self.r.choice(
                [b"", b"{", b"\xff\xfe", b"[1,2", b'{"a":NaN}', b"null", b" \n ", b'{"messages": 1e999}'])
        return method, path, body

    def mutate(self, body: Any) -> None:
        parent, key = self.pick(body)
        if parent is None:
            return
        action = self.r.randrange(5)
        if action == 0 and isinstance(parent, dict):
            parent.pop(key, None)
        elif action == 1 and isinstance(parent, dict):
            parent[self.r.choice(["extra", "n", "best_of", "suffix", "echo", "parallel_tool_calls",
                                  "max_completion_tokens", "truncation", "include", "user"])] = self.value()
        elif action == 2:
            parent[key] = self.r.choice(EXTREME_NUMBERS + ODD_STRINGS)
        else:
            parent[key] = self.other_type(parent[key])

    def pick(self, value: Any) -> tuple[Any, Any]:
        """A random (container, key) inside value, deeper ones less often."""
        parent, key = None, None
        while isinstance(value, (dict, list)) and value:
            keys = list(value) if isinstance(value, dict) else list(range(len(value)))
            parent, key = value, self.r.choice(keys)
            value = value[key]
            if self.chance(0.5):
                break
        return parent, key


def to_json(value: Any) -> bytes:
    """JSON text of value, nested as deep as it is (orjson and json stop near 255 and 1,000)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item)
        elif isinstance(item, dict):
            out.append("{")
            stack.append(_Text("}"))
            for i, (key, child) in enumerate(reversed(list(item.items()))):
                stack.append(child)
                stack.append(_Text(json.dumps(str(key)) + ":"))
                if i < len(item) - 1:
                    stack.append(_Text(","))
        elif isinstance(item, list):
            out.append("[")
            stack.append(_Text("]"))
            for i, child in enumerate(reversed(item)):
                stack.append(child)
                if i < len(item) - 1:
                    stack.append(_Text(","))
        else:
            out.append(json.dumps(item))
    return "".join(out).encode("utf-8", "surrogatepass")


class _Text(str):
    """Already-encoded JSON punctuation on to_json's stack."""
