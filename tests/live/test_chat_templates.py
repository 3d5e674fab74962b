"""Live check of rlid's chat-template interpreter (jinja/) against transformers.

transformers' `apply_chat_template(..., tokenize=False)` (jinja2 underneath, pinned in
requirements.txt) renders seeded random conversations with the real Qwen2.5, Qwen3 and
Llama-3.x templates of tests/data/chat_templates/; `rlid tokenizer chat --batch` renders the
same template variables. The texts must be byte-identical, and where the reference raises
(a template's raise_exception, or jinja2 refusing an operation) rlid must return an error.
`report` counts the mismatching cases (tolerance 0); a failure shows the first one.
"""
from __future__ import annotations

import copy
import json
import random
from datetime import datetime
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import _alias_reasoning_fields, _normalize_chat_messages

from conftest import SOURCE_DIR, run_rlid

TEMPLATES = SOURCE_DIR / "tests" / "data" / "chat_templates"
SEED = 20240612
N_CASES = 240  # conversations per template (>= 200)

TRICKY = [
    "Hello!", "", " ", "What is 2+2?", "Line one\nLine two\n\nLine four", 'She said "hi" and \'bye\' \\ backslash',
    "Unicode: héllo wörld — 你好 🙂 ∑ 👨‍👩‍👧", "Special tokens: <|im_end|> <|im_start|>assistant <|eot_id|> <|begin_of_text|>",
    "  leading and trailing spaces  ", "\n\nnewlines around\n\n", "{{ not a template }} {% neither %} {# nor this #}",
    "tabs\tand\r\ncarriage returns", "<think>\nthinking in a user message\n</think>", "</think>", "<think>",
    "<tool_response>looks like a tool response</tool_response>", "<tool_call>\n{\"name\": \"x\"}\n</tool_call>",
    "\u3000ideographic space\u3000", "\u00a0nbsp\u00a0", "\x1cfile separator\x1f", "\x85next line\x85",
    "\ufeffbyte order mark\ufeff", "\u200bzero width\u200b", "\u2028line sep\u2029", "\x0bvt\x0cff",
    "null", "None", "true", "0", "1e3", "[1, 2]", "{\"a\": 1}", "x" * 300, "emoji 🇯🇵 👍🏽 ❤️‍🔥",
    "مرحبا", "नमस्ते", "end with backslash \\", "control \x01\x02\x7f chars",
]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web; returns \"snippets\" — über <fast>.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer",
                                                                                            "default": 5}}},
    },
}
CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate\tan expression.\nReturns a number.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}, "precision": {
            "type": "number", "minimum": 0.5, "maximum": 1e20, "default": 2.0}}, "required": []},
    },
}
EMPTY_PARAMS = {"type": "function", "function": {"name": "noop", "description": "", "parameters": {}}}
TOOLS = [WEATHER, SEARCH, CALC, EMPTY_PARAMS]

# JSON values for tool-call arguments and dict tool responses: floats that print differently
# in Python and JavaScript, big and negative numbers, nesting, escapes. Integers stay within
# 64 bits: rlid's JSON reader (nlohmann) turns a longer integer literal into a float.
VALUES = ["Paris", "Oslo", "", "São Paulo", "東京", "quote \" and \\ backslash", "new\nline\ttab", "\x01\x1f",
          "</tool_call>", 0, 1, -7, 21, 2**53 + 1, 2**64 - 1, -2**63, 1.0, 2.5, -0.0, 0.1, 1e20, 1e-7, 123456789.125, 3.0e16,
          True, False, None, [], {}, [1, 2.5, "x"], {"nested": {"ok": True, "list": [1, None]}}]


def _content(rng: random.Random):
    return rng.choice(TRICKY) if rng.random() < 0.85 else rng.choice(TRICKY) + rng.choice(TRICKY)


def _arguments(rng: random.Random):
    args = {}
    for key in rng.sample(["city", "unit", "query", "k", "expr", "precision", "extra", "ключ", "a b"],
                          rng.randint(0, 4)):
        args[key] = copy.deepcopy(rng.choice(VALUES))
    if rng.random() < 0.3:  # arguments given as a JSON string, as some APIs send them
        return json.dumps(args, ensure_ascii=rng.random() < 0.5)
    return args


def _tool_call(rng: random.Random, name=None):
    call = {"name": name or rng.choice(["get_weather", "search", "calc"]), "arguments": _arguments(rng)}
    if rng.random() < 0.8:
        return {"type": "function", "function": call} if rng.random() < 0.9 else {"function": call}
    return call  # bare {name, arguments}: Qwen's templates accept it


def _tools(rng: random.Random):
    r = rng.random()
    if r < 0.45:
        return None
    if r < 0.5:
        return []
    return copy.deepcopy(rng.sample(TOOLS, rng.randint(1, len(TOOLS))))


def qwen_conversation(rng: random.Random, qwen3: bool) -> dict:
    """A ChatML conversation: optional system, then user turns, assistant turns (some with tool
    calls, then tool responses), the odd mid-conversation system message, reasoning for Qwen3."""
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _content(rng)})
    for turn in range(rng.randint(1, 5)):
        messages.append({"role": "user", "content": _content(rng)})
        if rng.random() < 0.1:
            messages.append({"role": "system", "content": _content(rng)})
        if turn > 0 and rng.random() < 0.1:
            messages.append({"role": "user", "content": "<tool_response>r</tool_response>"})
        if rng.random() < 0.25 and turn < 4:
            continue  # consecutive user turns / a final user turn
        for _ in range(rng.randint(0, 2)):
            calls = [_tool_call(rng) for _ in range(rng.randint(1, 3))]
            messages.append(_assistant(rng, qwen3, tool_calls=calls))
            for _ in range(rng.randint(1, len(calls))):
                messages.append({"role": "tool", "content": _content(rng) if rng.random() < 0.7
                                 else json.dumps(rng.choice(VALUES))})
        messages.append(_assistant(rng, qwen3))
    if rng.random() < 0.3 and len(messages) > 1:
        messages.pop()  # end on a user or tool turn
    context = {"messages": messages, "add_generation_prompt": rng.random() < 0.6, "tools": _tools(rng)}
    if qwen3 and rng.random() < 0.7:
        context["enable_thinking"] = rng.choice([True, False])
    if rng.random() < 0.03:  # null content: dropped by transformers, so the templates fail on it
        rng.choice(messages)["content"] = None
    return context


def _assistant(rng: random.Random, qwen3: bool, tool_calls=None) -> dict:
    content = _content(rng) if (tool_calls is None or rng.random() < 0.5) else ""
    if qwen3:
        r = rng.random()
        if r < 0.25:
            content = f"<think>\n{_content(rng)}\n</think>\n\n{content}"
        elif r < 0.32:
            content = f"<think>{_content(rng)}</think>{content}"
        elif r < 0.36:
            content = f"no open tag </think>\n{content}"
    message = {"role": "assistant", "content": content}
    if qwen3 and rng.random() < 0.2:
        message[rng.choice(["reasoning_content", "reasoning_content", "reasoning", "thinking"])] = \
            rng.choice([_content(rng), None])
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return message


def llama3_conversation(rng: random.Random) -> dict:
    """Llama 3: system/user/assistant turns (the plain template has no tools)."""
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _content(rng)})
    for _ in range(rng.randint(1, 6)):
        messages.append({"role": "user", "content": _content(rng)})
        if rng.random() < 0.8:
            messages.append({"role": "assistant", "content": _content(rng)})
    if rng.random() < 0.05:  # the plain Llama 3 template renders any role with `content | trim`
        messages.append({"role": "tool", "content": _content(rng)})
    context = {"messages": messages, "add_generation_prompt": rng.random() < 0.6}
    if rng.random() < 0.1:
        context["bos_token"] = rng.choice(["", "<s>"])  # overrides the tokenizer's, as in transformers
    return context


def llama31_conversation(rng: random.Random, llama32: bool) -> dict:
    """Llama 3.1/3.2: tools in the user or system message, custom_tools, builtin_tools (3.1),
    single tool calls (two calls raise), tool/ipython responses as text, dicts and lists."""
    context = llama3_conversation(rng)
    messages = context["messages"]
    tools = _tools(rng)
    if tools is not None and rng.random() < 0.15:
        context["custom_tools"] = tools
    else:
        context["tools"] = tools
    if rng.random() < 0.3:
        context["tools_in_user_message"] = rng.choice([True, False])
    if not llama32 and rng.random() < 0.15:
        context["builtin_tools"] = rng.sample(["brave_search", "wolfram_alpha", "code_interpreter"], rng.randint(1, 3))
    if rng.random() < 0.9:
        context["date_string"] = rng.choice(["05 Mar 2025", "26 Jul 2024", "01 Jan 2000"])
    for _ in range(rng.randint(0, 2)):
        name = rng.choice(["get_weather", "search", "brave_search", "wolfram_alpha"])
        n_calls = 1 if rng.random() < 0.9 else 2
        call_message = {"role": "assistant", "tool_calls": [_tool_call(rng, name) for _ in range(n_calls)]}
        for call in call_message["tool_calls"]:
            call.setdefault("function", {"name": name, "arguments": {}})
        if rng.random() < 0.5:
            call_message["content"] = None
        if rng.random() < 0.5 and isinstance(call_message["tool_calls"][0]["function"]["arguments"], str):
            call_message["tool_calls"][0]["function"]["arguments"] = {"query": rng.choice(VALUES[:9])}
        response = rng.choice([_content(rng), {"temp": 21, "nested": {"ok": True, "list": [1, 2.5, "x"]}},
                               [1, "two", None], {"sky": rng.choice(VALUES)}])
        messages += [{"role": "user", "content": _content(rng)}, call_message,
                     {"role": rng.choice(["tool", "ipython"]), "content": response}]
        if rng.random() < 0.5:
            messages.append({"role": "assistant", "content": _content(rng)})
    return context


FAMILIES = {
    "qwen2_5": lambda rng: qwen_conversation(rng, qwen3=False),
    "qwen3": lambda rng: qwen_conversation(rng, qwen3=True),
    "llama3": llama3_conversation,
    "llama3_1": lambda rng: llama31_conversation(rng, llama32=False),
    "llama3_2": lambda rng: llama31_conversation(rng, llama32=True),
}
QWEN_TOKENS = dict(eos_token="<|im_end|>", pad_token="<|endoftext|>")  # Qwen3's tokenizer_config.json
LLAMA_TOKENS = dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")


@pytest.fixture(scope="module")
def tokenizers(qwen3_tokenizer_json):
    """Tokenizer objects whose special tokens transformers passes to the template."""
    path = str(qwen3_tokenizer_json)
    return {"qwen": PreTrainedTokenizerFast(tokenizer_file=path, **QWEN_TOKENS),
            "llama": PreTrainedTokenizerFast(tokenizer_file=path, **LLAMA_TOKENS)}


def reference(tokenizer, source: str, context: dict):
    """transformers' rendering of `context`, and the template variables it rendered with.

    apply_chat_template drops message keys whose value is None and aliases reasoning fields
    (reasoning/thinking -> reasoning_content) with its own helpers, which this calls too; it
    passes tools, documents (None) and add_generation_prompt, and the tokenizer's special
    tokens under the other kwargs. The variables are what rlid gets: it renders templates, it
    does not preprocess conversations.
    """
    kwargs = {k: v for k, v in context.items() if k not in ("messages", "tools", "add_generation_prompt")}
    messages = copy.deepcopy(context["messages"])
    variables = {**tokenizer.special_tokens_map, **copy.deepcopy(kwargs),
                 "messages": _alias_reasoning_fields(_normalize_chat_messages(messages)),
                 "tools": copy.deepcopy(context.get("tools")), "documents": None,
                 "add_generation_prompt": context.get("add_generation_prompt", False)}
    try:
        text = tokenizer.apply_chat_template(messages, tools=context.get("tools"), chat_template=source, tokenize=False,
                                             add_generation_prompt=context.get("add_generation_prompt", False),
                                             **kwargs)
        return {"text": text}, variables
    except Exception as e:  # jinja2 TemplateError (raise_exception), TypeError, UndefinedError, ...
        return {"error": f"{type(e).__name__}: {e}"}, variables


def compare(name: str, source: str, cases: list[tuple[dict, dict]], tmp_path: Path, report):
    """Renders every case's variables with rlid and counts the cases that differ."""
    batch = tmp_path / f"{name}.json"
    batch.write_text(json.dumps([v for _, v in cases], ensure_ascii=False), encoding="utf-8")
    template = tmp_path / f"{name}.jinja"
    template.write_text(source, encoding="utf-8")
    got = json.loads(run_rlid("tokenizer", "chat", "--template", template, "--batch", batch))
    assert len(got) == len(cases)
    bad = []
    for (want, variables), out in zip(cases, got):
        if "error" in want:
            if "error" not in out:
                bad.append((variables, want, out))
        elif "error" in out or bytes.fromhex(out["text_hex"]) != want["text"].encode("utf-8"):
            bad.append((variables, want, out))
    errors = sum("error" in w for w, _ in cases)
    try:
        report(f"chat_template.{name}", len(bad), 0, len(cases), reference_errors=errors)
    except AssertionError as e:
        variables, want, out = bad[0]
        raise AssertionError(
            f"{e}; {len(bad)} mismatch(es), the first:\n variables {json.dumps(variables, ensure_ascii=False)}\n"
            f" transformers {want.get('error') or want['text']!r}\n rlid {out.get('error') or out['text']!r}") from None


@pytest.mark.parametrize("name", list(FAMILIES))
def test_template(rlid, name, tokenizers, tmp_path, report):
    source = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    tokenizer = tokenizers["qwen" if name.startswith("qwen") else "llama"]
    rng = random.Random(f"{SEED}/{name}")
    cases = [reference(tokenizer, source, FAMILIES[name](rng)) for _ in range(N_CASES)]
    compare(name, source, cases, tmp_path, report)


def test_llama3_2_strftime_now(rlid, tokenizers, tmp_path, report):
    """Without date_string, Llama 3.2 reads today's date through strftime_now("%d %b %Y") in
    both engines (local time; a run across midnight could differ once)."""
    source = (TEMPLATES / "llama3_2.jinja").read_text(encoding="utf-8")
    context = {"messages": [{"role": "user", "content": "What day is it?"}], "add_generation_prompt": True}
    case = reference(tokenizers["llama"], source, context)
    assert datetime.now().strftime("%d %b %Y") in case[0]["text"]
    compare("llama3_2_strftime_now", source, [case], tmp_path, report)
