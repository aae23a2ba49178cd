// Load generator for bench/server_bench.sh: K concurrent clients, each sending streaming
// /v1/completions requests back to back until R requests are done. Reports aggregate generated
// tokens/s (all completion tokens over the wall time of the run) and the time to first token
// (request sent -> first chunk with text) at p50 and p99. Plain fetch and SSE parsing, no
// dependencies.
//   node load.mjs --url http://127.0.0.1:8080 --streams 4 --requests 24 [--max-tokens 64]
//                 [--temperature 0.8] [--prompt TEXT] [--json]
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string' },
    streams: { type: 'string', default: '1' },
    requests: { type: 'string', default: '10' },
    'max-tokens': { type: 'string', default: '64' },
    temperature: { type: 'string', default: '0.8' },
    prompt: { type: 'string', default: 'Once upon a time, in a small village by the sea, there lived' },
    json: { type: 'boolean', default: false },
  },
});
if (!opt.url) throw new Error('--url is required');
const streams = Number(opt.streams), total = Number(opt.requests);

// One streaming request; resolves to {ttft, tokens} (ms, completion tokens from the usage chunk).
async function one(seed) {
  const t0 = performance.now();
  const res = await fetch(`${opt.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      prompt: opt.prompt, max_tokens: Number(opt['max-tokens']), temperature: Number(opt.temperature),
      // llama.cpp's server applies its sampling defaults to fields a request leaves out, and its
      // figures were measured so: send the same chain (nucleus' own defaults are OpenAI's)
      top_k: 40, top_p: 0.95, min_p: 0.05,
      stream: true, stream_options: { include_usage: true }, ignore_eos: true, seed,
    }),
  });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buf = '', ttft = null, tokens = 0;
  for await (const bytes of res.body) {
    buf += decoder.decode(bytes, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (ttft === null && chunk.choices?.some((c) => c.text)) ttft = performance.now() - t0;
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
    }
  }
  return { ttft: ttft ?? performance.now() - t0, tokens };
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

await one(0); // warm-up: page in the weights
let next = 0;
const results = [];
const start = performance.now();
await Promise.all(Array.from({ length: streams }, async () => {
  while (next < total) {
    const i = next++;
    results.push(await one(i + 1));
  }
}));
const seconds = (performance.now() - start) / 1000;
const ttfts = results.map((r) => r.ttft).sort((a, b) => a - b);
const tokens = results.reduce((s, r) => s + r.tokens, 0);
const out = {
  streams, requests: results.length, tokens, seconds: +seconds.toFixed(2),
  tokens_per_s: +(tokens / seconds).toFixed(1),
  ttft_p50_ms: +percentile(ttfts, 50).toFixed(1), ttft_p99_ms: +percentile(ttfts, 99).toFixed(1),
};
console.log(opt.json ? JSON.stringify(out)
  : `| ${streams} | ${out.requests} | ${out.tokens_per_s} | ${out.ttft_p50_ms} | ${out.ttft_p99_ms} |`);
