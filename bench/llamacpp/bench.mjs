// llama.cpp measured in the same run as nucleus: prefill and decode tokens/s of a GGUF file
// through node-llama-cpp's prebuilt llama.cpp (CPU backend chosen by llama.cpp for this CPU),
// in the manner of llama-bench: random tokens, a warm-up, then R repetitions, mean ± sd.
//   node bench/llamacpp/bench.mjs MODEL [-p 128] [-n 64] [-t 2] [-r 5]   -> one JSON line
// Installed by `bash bench/run.sh --llamacpp` (npm, into bench/llamacpp/node_modules).
//
// Each evaluation through the binding costs about 11 ms beyond llama.cpp's own compute (decode
// of the 260K-parameter stories model, whose compute is negligible, runs at ~85 tok/s here), so
// the decode figures (one evaluation per token) understate llama.cpp; the prefill figure is a
// single evaluation of the whole prompt and is the comparable one.
import { getLlama } from 'node-llama-cpp';

const args = process.argv.slice(2);
const opt = { p: 128, n: 64, t: 2, r: 5 };
let model;
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (['-p', '-n', '-t', '-r'].includes(a)) opt[a[1]] = Number(args[++i]);
    else model = a;
}
if (!model) { console.error('usage: node bench.mjs MODEL [-p N] [-n N] [-t N] [-r N]'); process.exit(2); }

const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: opt.t });
const m = await llama.loadModel({ modelPath: model, gpuLayers: 0, useMmap: true });
const ctx = await m.createContext({ contextSize: 512, batchSize: 512, threads: { ideal: opt.t, min: opt.t }, sequences: 1, batching: { dispatchSchedule: (dispatch) => dispatch() } });
const seq = ctx.getSequence();
const nv = m.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 32000;
let seed = 12345;
const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed; };
const tokens = (n) => Array.from({ length: n }, () => 1 + (rand() % (nv - 1)));
const now = () => Number(process.hrtime.bigint()) / 1e9;

async function prefill() {
    await seq.clearHistory();
    const t0 = now();
    await seq.evaluateWithoutGeneratingNewTokens(tokens(opt.p));
    return opt.p / (now() - t0);
}
async function decode() {
    // llama-bench's tg: one token per step from an empty cache; each step is its own evaluation
    await seq.clearHistory();
    const toks = tokens(opt.n);
    const t0 = now();
    for (const t of toks) await seq.evaluateWithoutGeneratingNewTokens([t]);
    return opt.n / (now() - t0);
}
const stats = (v) => {
    const mean = v.reduce((a, b) => a + b, 0) / v.length;
    const sd = v.length > 1 ? Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / (v.length - 1)) : 0;
    return { mean, sd };
};
await prefill(); await decode(); // warm-up
const pp = [], tg = [];
for (let i = 0; i < opt.r; i++) { pp.push(await prefill()); tg.push(await decode()); }
console.log(JSON.stringify({ engine: 'llama.cpp via node-llama-cpp', pp: stats(pp), tg: stats(tg) }));
await ctx.dispose(); await m.dispose(); await llama.dispose();
