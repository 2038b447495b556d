"""Chat templates in the style of each model family, written for the tests.

Each is a short, simplified take on the family's real Hugging Face template,
keeping what matters to a server: the real markers and turn structure, how
``tools`` are shown, how assistant ``tool_calls`` and ``tool`` results are
written back, and how reasoning is opened or stripped.  They are Jinja source
exactly as a GGUF's ``tokenizer.chat_template`` would hold it (raw strings: a
``\\n`` inside a Jinja string literal is Jinja's escape, as in HF's JSON files).

``FAMILY_SPECIAL_TOKENS`` lists each family's special tokens in the form
``tinymodel.write_tiny_gguf(special_tokens=...)`` takes: a plain string
is a CONTROL token, ``(text, "user_defined")`` a USER_DEFINED one, following the
real vocabularies (Qwen's ``<tool_call>``/``<think>`` are user-defined added
tokens; Llama's ``<|python_tag|>``, Mistral's ``[TOOL_CALLS]``, harmony's
markers are control tokens).  ``FAMILY_BOS_TOKEN`` / ``FAMILY_EOS_TOKEN`` give
the values to pass as ``bos_token`` / ``eos_token`` ("" where the family has no
BOS); the EOS is the token that ends an assistant turn.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tinymodel import write_tiny_gguf

from localserve.prompt.templates import BUILTIN_TEMPLATES

# Qwen 2.5 / Hermes: ChatML, tools in a <tools></tools> system block, calls as
# <tool_call> JSON, results as <tool_response> inside a user turn.
HERMES = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.index0 == 0 or messages[loop.index0 - 1].role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Qwen 3 (thinking): Hermes tools; reasoning kept only for assistant turns after
# the last user query (an unfinished tool loop), stripped from older turns; the
# generation prompt opens <think> itself unless enable_thinking is false.
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {%- set ns.last_query_index = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and reasoning_content %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if (loop.first and content) or not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {%- if tool_call.function %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}
"""

# Qwen3-Coder: ChatML, tools as XML <function> blocks, calls as
# <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>.
# It iterates arguments.items(), so arguments must be a mapping.
QWEN3_CODER = r"""{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if system_message is defined %}
        {{- system_message + '\n\n' }}
    {%- else %}
        {{- 'You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou have access to the following functions:\n\n<tools>' }}
    {%- for tool in tools %}
        {%- set tool = tool.function if tool.function is defined else tool %}
        {{- '\n<function>\n<name>' + tool.name + '</name>' }}
        {%- if tool.description is defined %}
            {{- '\n<description>' + tool.description | trim + '</description>' }}
        {%- endif %}
        {{- '\n<parameters>' }}
        {%- if tool.parameters is defined and tool.parameters.properties is defined %}
            {%- for param_name, param_fields in tool.parameters.properties.items() %}
                {{- '\n<parameter>\n<name>' + param_name + '</name>' }}
                {%- if param_fields.type is defined %}
                    {{- '\n<type>' + param_fields.type | string + '</type>' }}
                {%- endif %}
                {{- '\n</parameter>' }}
            {%- endfor %}
        {%- endif %}
        {{- '\n</parameters>\n</function>' }}
    {%- endfor %}
    {{- '\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n</IMPORTANT><|im_end|>\n' }}
{%- elif system_message is defined %}
    {{- '<|im_start|>system\n' + system_message + '<|im_end|>\n' }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message.role == "assistant" and message.tool_calls is defined %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}
            {{- '\n' + message.content | trim }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- set tool_call = tool_call.function if tool_call.function is defined else tool_call %}
            {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
            {%- for args_name, args_value in tool_call.arguments.items() %}
                {{- '<parameter=' + args_name + '>\n' }}
                {%- if args_value is mapping or (args_value is sequence and args_value is not string) %}
                    {{- args_value | tojson }}
                {%- else %}
                    {{- args_value | string }}
                {%- endif %}
                {{- '\n</parameter>\n' }}
            {%- endfor %}
            {{- '</function>\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "user" or message.role == "system" or message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem is not defined or loop.previtem.role != "tool" %}
            {{- '<|im_start|>user\n' }}
        {%- endif %}
        {{- '<tool_response>\n' + message.content + '\n</tool_response>\n' }}
        {%- if loop.last or loop.nextitem.role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Llama 3.1: header tokens, <|eot_id|>; custom tools as JSON in the first user
# message, calls as {"name": ..., "parameters": ...}; builtin tools (passed as
# the builtin_tools kwarg) are called with <|python_tag|> and end with
# <|eom_id|>; tool results come back in the ipython role.
LLAMA3 = r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools is not none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0].content | trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' }}
    {{- "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. Do not use variables.\n\n' }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls | length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val | string + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
            {%- endfor %}
            {{- ")" }}
        {%- else %}
            {{- '{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + '}' }}
        {%- endif %}
        {{- "<|eom_id|>" if builtin_tools is defined else "<|eot_id|>" }}
    {%- else %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Mistral (v3 style): [INST]…[/INST], the system prompt joined to the last user
# message, [AVAILABLE_TOOLS] before it, calls as [TOOL_CALLS][{...,"id":...}],
# results as [TOOL_RESULTS]{"content":…,"call_id":…}[/TOOL_RESULTS].
MISTRAL = r"""{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message.role == "user" %}
        {%- if tools and message == user_messages[-1] %}
            {{- "[AVAILABLE_TOOLS]" + tools | tojson + "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST]" + system_message + "\n\n" + message.content + "[/INST]" }}
        {%- else %}
            {{- "[INST]" + message.content + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined %}
        {{- "[TOOL_CALLS][" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function | tojson %}
            {{- out[:-1] }}
            {%- if tool_call.id is defined %}
                {{- ', "id": ' + tool_call.id | tojson }}
            {%- endif %}
            {{- "}" + (", " if not loop.last else "]") }}
        {%- endfor %}
        {{- eos_token }}
    {%- elif message.role == "assistant" %}
        {{- message.content + eos_token }}
    {%- elif message.role == "tool" %}
        {{- '[TOOL_RESULTS]{"content": ' + message.content | tojson + ', "call_id": ' + message.tool_call_id | tojson + '}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user, assistant and tool roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

# DeepSeek R1: fullwidth-bar markers, system text first, tool calls fenced as
# ```json with the arguments concatenated as a string (the real template does
# '...' + arguments), answers stripped of reasoning; the generation prompt opens
# <think> -- except right after tool outputs, where the real template adds none.
DEEPSEEK_R1 = r"""{%- set ns = namespace(system_prompt='', is_tool=false) %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- set ns.system_prompt = message.content %}
    {%- endif %}
{%- endfor %}
{{- bos_token + ns.system_prompt }}
{%- if tools %}
    {{- '\n\n## Tools\nYou have access to the following tools:\n' }}
    {%- for tool in tools %}
        {{- '\n### ' + tool.function.name + '\nDescription: ' + (tool.function.description or '') + '\n\nParameters: ' + tool.function.parameters | tojson + '\n' }}
    {%- endfor %}
    {{- '\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>tool_call_name\n```json\ntool_call_arguments\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' %}
        {%- set ns.is_tool = false %}
        {{- '<｜User｜>' + message.content }}
    {%- elif message.role == 'assistant' and message.tool_calls is defined %}
        {%- set ns.is_tool = false %}
        {{- '<｜Assistant｜>' + (message.content or '') + '<｜tool▁calls▁begin｜>' }}
        {%- for tool in message.tool_calls %}
            {%- if not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {{- '<｜tool▁call▁begin｜>' + tool.type + '<｜tool▁sep｜>' + tool.function.name + '\n```json\n' + tool.function.arguments + '\n```<｜tool▁call▁end｜>' }}
        {%- endfor %}
        {{- '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' }}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content %}
        {%- if '</think>' in content %}
            {%- set content = content.split('</think>')[-1] %}
        {%- endif %}
        {%- if ns.is_tool %}
            {{- '<｜tool▁outputs▁end｜>' + content + '<｜end▁of▁sentence｜>' }}
            {%- set ns.is_tool = false %}
        {%- else %}
            {{- '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}
        {%- endif %}
    {%- elif message.role == 'tool' %}
        {%- if not ns.is_tool %}
            {{- '<｜tool▁outputs▁begin｜>' }}
        {%- else %}
            {{- '\n' }}
        {%- endif %}
        {{- '<｜tool▁output▁begin｜>' + message.content + '<｜tool▁output▁end｜>' }}
        {%- set ns.is_tool = true %}
    {%- endif %}
{%- endfor %}
{%- if ns.is_tool %}
    {{- '<｜tool▁outputs▁end｜>' }}
{%- endif %}
{%- if add_generation_prompt and not ns.is_tool %}
    {{- '<｜Assistant｜><think>\n' }}
{%- endif %}
"""

# GPT-OSS (harmony): a system message with the reasoning effort, a developer
# message holding instructions and the functions namespace, assistant channels
# (analysis / commentary / final), calls as
# <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>,
# results from functions.NAME to=assistant.
GPT_OSS = r"""{%- if messages and (messages[0].role == 'system' or messages[0].role == 'developer') %}
    {%- set developer_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set developer_message = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if reasoning_effort is not defined %}
    {%- set reasoning_effort = 'medium' %}
{%- endif %}
{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\n\nReasoning: ' + reasoning_effort + '\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.' }}
{%- if tools %}
    {{- "\nCalls to these tools must go to the commentary channel: 'functions'." }}
{%- endif %}
{{- '<|end|>' }}
{%- if developer_message or tools %}
    {{- '<|start|>developer<|message|>' }}
    {%- if developer_message %}
        {{- '# Instructions\n\n' + developer_message }}
        {%- if tools %}
            {{- '\n\n' }}
        {%- endif %}
    {%- endif %}
    {%- if tools %}
        {{- '# Tools\n\n## functions\n\nnamespace functions {\n\n' }}
        {%- for tool in tools %}
            {%- set tool = tool.function if tool.function is defined else tool %}
            {{- '// ' + (tool.description or '') + '\ntype ' + tool.name + ' = (_: ' + tool.parameters | tojson + ') => any;\n\n' }}
        {%- endfor %}
        {{- '} // namespace functions' }}
    {%- endif %}
    {{- '<|end|>' }}
{%- endif %}
{%- set ns = namespace(last_tool_name='') %}
{%- for message in loop_messages %}
    {%- if message.role == 'user' %}
        {{- '<|start|>user<|message|>' + message.content + '<|end|>' }}
    {%- elif message.role == 'assistant' and message.tool_calls is defined %}
        {%- if message.reasoning_content is defined %}
            {{- '<|start|>assistant<|channel|>analysis<|message|>' + message.reasoning_content + '<|end|>' }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- set tool_call = tool_call.function if tool_call.function is defined else tool_call %}
            {%- set ns.last_tool_name = tool_call.name %}
            {{- '<|start|>assistant to=functions.' + tool_call.name + '<|channel|>commentary json<|message|>' + tool_call.arguments | tojson + '<|call|>' }}
        {%- endfor %}
    {%- elif message.role == 'assistant' %}
        {{- '<|start|>assistant<|channel|>final<|message|>' + message.content + '<|end|>' }}
    {%- elif message.role == 'tool' %}
        {%- set name = message.name if message.name is defined else ns.last_tool_name %}
        {{- '<|start|>functions.' + name + ' to=assistant<|channel|>commentary<|message|>' + message.content | tojson + '<|end|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start|>assistant' }}
{%- endif %}
"""

GEMMA = BUILTIN_TEMPLATES["gemma"]
CHATML = BUILTIN_TEMPLATES["chatml"]

FAMILY_TEMPLATES: dict[str, str] = {
    "hermes": HERMES,
    "qwen3": QWEN3,
    "qwen3_coder": QWEN3_CODER,
    "llama3": LLAMA3,
    "mistral": MISTRAL,
    "deepseek_r1": DEEPSEEK_R1,
    "gpt_oss": GPT_OSS,
    "gemma": GEMMA,
    "chatml": CHATML,
}

_QWEN_TOOL_TOKENS = [("<tool_call>", "user_defined"), ("</tool_call>", "user_defined")]
_QWEN3_EXTRA = [
    ("<tool_response>", "user_defined"), ("</tool_response>", "user_defined"),
    ("<think>", "user_defined"), ("</think>", "user_defined"),
]
_DS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"]
_DS_TOOLS = [
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
]

FAMILY_SPECIAL_TOKENS: dict[str, list] = {
    "hermes": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_QWEN_TOOL_TOKENS],
    "qwen3": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_QWEN_TOOL_TOKENS, *_QWEN3_EXTRA],
    "qwen3_coder": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_QWEN_TOOL_TOKENS, *_QWEN3_EXTRA],
    "llama3": [
        "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
    ],
    "mistral": [
        "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
        "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
    ],
    "deepseek_r1": [*_DS, *_DS_TOOLS, ("<think>", "user_defined"), ("</think>", "user_defined")],
    "gpt_oss": [
        "<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>",
        "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>",
    ],
    "gemma": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
    "chatml": ["<|im_start|>", "<|im_end|>"],
}

FAMILY_BOS_TOKEN: dict[str, str] = {
    "hermes": "", "qwen3": "", "qwen3_coder": "",
    "llama3": "<|begin_of_text|>", "mistral": "<s>",
    "deepseek_r1": "<｜begin▁of▁sentence｜>", "gpt_oss": "<|startoftext|>",
    "gemma": "<bos>", "chatml": "",
}

FAMILY_EOS_TOKEN: dict[str, str] = {
    "hermes": "<|im_end|>", "qwen3": "<|im_end|>", "qwen3_coder": "<|im_end|>",
    "llama3": "<|eot_id|>", "mistral": "</s>",
    "deepseek_r1": "<｜end▁of▁sentence｜>", "gpt_oss": "<|return|>",
    "gemma": "<end_of_turn>", "chatml": "<|im_end|>",
}


def write_family_gguf(path: str | os.PathLike[str], family: str, **kwargs: Any) -> Path:
    """A tiny model (tinymodel.write_tiny_gguf) with this family's chat template and special tokens."""
    return write_tiny_gguf(path, chat_template=FAMILY_TEMPLATES[family], special_tokens=FAMILY_SPECIAL_TOKENS[family],
                           **kwargs)
