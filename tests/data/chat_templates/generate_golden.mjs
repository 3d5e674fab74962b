// Renders every chat template in this folder with @huggingface/jinja (the JavaScript
// reimplementation Hugging Face uses in transformers.js) over many message lists and writes
// golden.json = [{template, context, expected} | {template, context, error}], which
// tests/jinja/jinja_test.cc replays against rlid's interpreter. Run once; the output is committed.
//   mkdir -p /tmp/jinjajs && cd /tmp/jinjajs && npm install @huggingface/jinja@0.5.11
//   NODE_PATH=/tmp/jinjajs/node_modules node tests/data/chat_templates/generate_golden.mjs
// (NODE_PATH does not apply to ES modules, so the script resolves the package through it itself.)
import fs from "fs";
import path from "path";
import { createRequire } from "module";
import { fileURLToPath } from "url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(process.env.NODE_PATH ?? here, "noop.js"));
const { Template } = require("@huggingface/jinja");

const read = (name) => fs.readFileSync(path.join(here, `${name}.jinja`), "utf8");

// ---- message building blocks ------------------------------------------------------------------
const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const asst = (content, extra = {}) => ({ role: "assistant", content, ...extra });
const tool = (content) => ({ role: "tool", content });

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "City name, e.g. Paris" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["city"],
    },
  },
};
const searchTool = {
  type: "function",
  function: {
    name: "search",
    description: "Search the web; returns \"snippets\".",
    parameters: { type: "object", properties: { query: { type: "string" }, k: { type: "integer" } } },
  },
};
const callWeather = (args) => ({ type: "function", function: { name: "get_weather", arguments: args } });

const tricky = [
  "Line one\nLine two\n\nLine four",
  'She said "hi" and \'bye\' \\ backslash',
  "Unicode: héllo wörld — 你好 🙂 ∑",
  "Special tokens in text: <|im_end|> <|im_start|>assistant <|eot_id|> <|begin_of_text|>",
  "  leading and trailing spaces  ",
  "\n\nnewlines around\n\n",
  "{{ not a template }} {% neither %} {# nor this #}",
  "tabs\tand\r\ncarriage returns",
];

// Conversations every template family gets (roles user/assistant/system only).
function commonConversations() {
  const out = [];
  out.push([user("Hello!")]);
  out.push([sys("You are a terse assistant."), user("What is 2+2?")]);
  out.push([sys("Be brief."), user("Hi"), asst("Hello! How can I help?"), user("Tell me a joke.")]);
  out.push([user("First"), asst("Second"), user("Third"), asst("Fourth")]);
  out.push([user("")]);
  out.push([sys(""), user("Empty system prompt")]);
  out.push([user("Only user"), asst("")]);
  for (const t of tricky) out.push([sys(t), user(t), asst(t), user(t)]);
  out.push([sys("S1"), user("u1"), sys("a second system message mid-conversation"), user("u2")]);
  const long = [];
  for (let i = 0; i < 12; ++i) long.push(i % 2 === 0 ? user(`question ${i}`) : asst(`answer ${i}`));
  out.push(long);
  return out;
}

const cases = [];
function add(template, context) {
  const source = read(template);
  let record;
  try {
    record = { template, context, expected: new Template(source).render(context) };
  } catch (e) {
    record = { template, context, error: String(e.message ?? e) };
  }
  cases.push(record);
}

// ---- Qwen2.5 and Qwen3 (ChatML) ---------------------------------------------------------------
for (const template of ["qwen2_5", "qwen3"]) {
  for (const messages of commonConversations()) {
    for (const add_generation_prompt of [true, false]) add(template, { messages, add_generation_prompt });
  }
  add(template, { messages: [user("with tools")], tools: [weatherTool, searchTool], add_generation_prompt: true });
  add(template, { messages: [sys("Custom system."), user("Weather in Paris?")], tools: [weatherTool], add_generation_prompt: true });
  add(template, {
    messages: [
      user("Weather in Paris and Oslo?"),
      asst("", { tool_calls: [callWeather({ city: "Paris" }), callWeather({ city: "Oslo", unit: "celsius" })] }),
      tool('{"temp": 21}'),
      tool('{"temp": 12}'),
      asst("Paris 21°C, Oslo 12°C."),
      user("Thanks"),
    ],
    tools: [weatherTool],
    add_generation_prompt: true,
  });
  add(template, {
    messages: [user("Call with a string argument"), asst("Sure.", { tool_calls: [callWeather('{"city": "Rome"}')] }), tool("sunny")],
    tools: [weatherTool],
    add_generation_prompt: false,
  });
  add(template, { messages: [user("tools is an empty list")], tools: [], add_generation_prompt: true });
  add(template, { messages: [user("tools is null")], tools: null, add_generation_prompt: true });
  add(template, { messages: [user("no add_generation_prompt key")] });
  add(template, { messages: [] , add_generation_prompt: true });
  add(template, { messages: [user("content is null"), asst(null)], add_generation_prompt: false });
}

// Qwen3 only: reasoning in history and enable_thinking.
const thinkingConversations = [
  [user("2+2?"), asst("<think>\nSimple arithmetic.\n</think>\n\n4"), user("And 3+3?")],
  [user("2+2?"), asst("<think>\nSimple arithmetic.\n</think>\n\n4")],
  [user("q1"), asst("<think>r1</think>a1"), user("q2"), asst("<think>\n\nr2 with\nlines\n\n</think>\n\na2")],
  [user("q"), asst("no think tags at all")],
  [user("q"), asst("answer only", { reasoning_content: "reasoning given separately" })],
  [user("q"), asst("answer", { reasoning_content: null })],
  [user("q1"), asst("a1", { reasoning_content: "old reasoning" }), user("q2"), asst("a2", { reasoning_content: "new reasoning" })],
  [user("q"), asst("<think>\nunclosed think, then </think> twice </think>\nend")],
  [
    user("Weather?"),
    asst("<think>\nI should call the tool.\n</think>\n\n", { tool_calls: [callWeather({ city: "Paris" })] }),
    tool("<tool_response>sunny</tool_response>"),
    asst("<think>\nThe tool says sunny.\n</think>\n\nIt is sunny."),
  ],
  [user("<tool_response>looks like a tool response</tool_response>"), asst("<think>x</think>y")],
];
for (const messages of thinkingConversations) {
  for (const enable_thinking of [true, false, undefined]) {
    const context = { messages, add_generation_prompt: true };
    if (enable_thinking !== undefined) context.enable_thinking = enable_thinking;
    add("qwen3", context);
  }
  add("qwen3", { messages, add_generation_prompt: false });
}
for (const enable_thinking of [true, false]) {
  add("qwen3", { messages: [user("Hi")], add_generation_prompt: true, enable_thinking });
  add("qwen3", { messages: [user("Hi")], add_generation_prompt: false, enable_thinking });
}

// ---- Llama 3, 3.1 and 3.2 ---------------------------------------------------------------------
const bos = "<|begin_of_text|>";
for (const template of ["llama3", "llama3_1", "llama3_2"]) {
  for (const messages of commonConversations()) {
    for (const add_generation_prompt of [true, false]) {
      add(template, { messages, add_generation_prompt, bos_token: bos, eos_token: "<|eot_id|>", date_string: "05 Mar 2025" });
    }
  }
  add(template, { messages: [user("no bos_token key")], add_generation_prompt: true, date_string: "01 Jan 2024" });
  add(template, { messages: [user("no date_string, llama3.1 defaults it")], add_generation_prompt: true, bos_token: bos, ...(template === "llama3_2" ? { date_string: "26 Jul 2024" } : {}) });
  add(template, { messages: [sys("Tools in the user message."), user("Weather in Paris?")], tools: [weatherTool, searchTool], add_generation_prompt: true, bos_token: bos, date_string: "05 Mar 2025" });
  add(template, { messages: [sys("Tools in the system message."), user("Weather?")], tools: [weatherTool], tools_in_user_message: false, add_generation_prompt: true, bos_token: bos, date_string: "05 Mar 2025" });
  add(template, { messages: [user("custom_tools alias")], custom_tools: [searchTool], add_generation_prompt: true, bos_token: bos, date_string: "05 Mar 2025" });
  add(template, {
    messages: [
      user("Weather in Paris?"),
      asst(null, { tool_calls: [callWeather({ city: "Paris", unit: "celsius" })] }),
      tool('{"temp": 21, "sky": "clear"}'),
      { role: "ipython", content: { temp: 21, nested: { ok: true, list: [1, 2.5, "x"] } } },
      asst("It is 21°C and clear."),
    ],
    tools: [weatherTool],
    add_generation_prompt: true,
    bos_token: bos,
    date_string: "05 Mar 2025",
  });
  add(template, { messages: [user("Two calls?"), asst(null, { tool_calls: [callWeather({ city: "A" }), callWeather({ city: "B" })] })], bos_token: bos, date_string: "05 Mar 2025" });
  add(template, { messages: [sys("only a system message")], tools: [weatherTool], bos_token: bos, date_string: "05 Mar 2025" });
  add(template, { messages: [user("content is null"), asst(null)], bos_token: bos, date_string: "05 Mar 2025" });
}

fs.writeFileSync(path.join(here, "golden.json"), JSON.stringify(cases, null, 0) + "\n");
const counts = {};
for (const c of cases) counts[c.template] = (counts[c.template] ?? 0) + 1;
console.log(`wrote ${cases.length} cases`, counts, `errors: ${cases.filter((c) => "error" in c).length}`);
