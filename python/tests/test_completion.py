"""create_completion / __call__ against the CLI: for the same seed and options the same text and
log-probabilities (and the same explain records); streaming gives the same text as one response;
the OpenAI shape; stop strings, max_tokens, echo, logit_bias, grammars."""

import json

import pytest

from conftest import QWEN2, STORIES, run_cli
from nucleus import InvalidArgument, LlamaGrammar

PROMPT = "Once upon a time"

# (Python keywords, the CLI's flags for the same chain)
CHAINS = [
    ({"temperature": 0.0}, ["--temp", "0"]),
    ({"temperature": 0.8}, ["--temp", "0.8"]),
    ({"temperature": 1.3, "top_k": 10, "top_p": 0.9, "min_p": 0.02, "repeat_penalty": 1.15,
      "presence_penalty": 0.4, "frequency_penalty": 0.3},
     ["--temp", "1.3", "--top-k", "10", "--top-p", "0.9", "--min-p", "0.02", "--repeat-penalty", "1.15",
      "--presence-penalty", "0.4", "--frequency-penalty", "0.3"]),
    ({"temperature": 1.0, "typical_p": 0.7, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
     ["--temp", "1.0", "--typical", "0.7", "--top-k", "0", "--top-p", "1", "--min-p", "0"]),
    ({"temperature": 1.0, "mirostat_mode": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.2},
     ["--temp", "1.0", "--mirostat", "2", "--mirostat-ent", "3", "--mirostat-lr", "0.2"]),
    ({"temperature": 0.9, "xtc_probability": 0.5, "xtc_threshold": 0.1, "dry_multiplier": 0.8,
      "top_n_sigma": 2.0},
     ["--temp", "0.9", "--xtc-probability", "0.5", "--xtc-threshold", "0.1", "--dry-multiplier", "0.8",
      "--top-nsigma", "2"]),
]


@pytest.mark.parametrize("seed", [3, 1234])
@pytest.mark.parametrize("kw,flags", CHAINS)
def test_equals_cli(stories, seed, kw, flags):
    n = 40
    p, records = run_cli("-m", STORIES, "-p", PROMPT, "-n", str(n), "--seed", str(seed), "--logprobs", "3",
                         "--explain=json", *flags)
    cli_text = p.stdout[len(PROMPT):-1]
    r = stories(PROMPT, max_tokens=n, seed=seed, logprobs=3, explain=True, **kw)
    choice = r["choices"][0]
    assert choice["text"] == cli_text
    lp = choice["logprobs"]
    steps = [rec for rec in records if rec["piece"] or rec["finish"] != "stop"]  # an EOS has no entry
    assert len(lp["token_logprobs"]) == len(steps)
    for got, piece, top, rec in zip(lp["token_logprobs"], lp["tokens"], lp["top_logprobs"], steps):
        assert piece == rec["piece"]
        assert got == pytest.approx(rec["logprob"], rel=1e-5, abs=1e-6)
        for alt in rec["top_logprobs"]:
            assert top[alt["piece"]] == pytest.approx(alt["logprob"], rel=1e-5, abs=1e-6)
    # the explain records are the CLI's: the stages, the draw
    assert len(choice["explain"]) == len(records)
    for mine, rec in zip(choice["explain"], records):
        assert mine["token"] == rec["token"]
        assert [s["name"] for s in mine["stages"]] == [s["name"] for s in rec["stages"]]
        assert [s["n_after"] for s in mine["stages"]] == [s["n_after"] for s in rec["stages"]]
        assert mine["p"] == pytest.approx(rec["p"], rel=1e-5)
    assert choice["finish_reason"] == ("length" if len(records) == n else "stop")


def test_response_shape(stories):
    r = stories.create_completion(PROMPT, max_tokens=8, seed=1)
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-") and r["model"] == STORIES
    assert r["choices"][0]["index"] == 0 and r["choices"][0]["logprobs"] is None
    assert r["usage"] == {"prompt_tokens": 5, "completion_tokens": 8, "total_tokens": 13}
    assert stories(PROMPT, max_tokens=8, seed=1, model="alias")["model"] == "alias"


def test_stream_is_the_response(stories):
    kw = dict(max_tokens=48, seed=7, temperature=1.0, logprobs=2)
    whole = stories(PROMPT, **kw)["choices"][0]
    chunks = list(stories(PROMPT, stream=True, **kw))
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == whole["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    streamed = [x for c in chunks if c["choices"][0]["logprobs"] for x in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed == whole["logprobs"]["token_logprobs"]


def test_seeds(stories):
    a = stories(PROMPT, max_tokens=30, seed=5, temperature=1.2)["choices"][0]["text"]
    assert stories(PROMPT, max_tokens=30, seed=5, temperature=1.2)["choices"][0]["text"] == a
    assert stories(PROMPT, max_tokens=30, seed=6, temperature=1.2)["choices"][0]["text"] != a


def test_llama_seed_gives_the_calls_their_seeds():
    from nucleus import Llama

    def texts(seed):
        with Llama(model_path=STORIES, seed=seed, verbose=False) as llm:
            return [llm(PROMPT, max_tokens=24, temperature=1.2)["choices"][0]["text"] for _ in range(3)]

    first = texts(42)
    assert texts(42) == first  # the same Llama seed, the same sequence of texts
    assert len(set(first)) > 1  # each call a seed of its own


def test_stop_and_max_tokens(stories):
    full = stories(PROMPT, max_tokens=60, temperature=0)["choices"][0]
    assert full["finish_reason"] == "length"
    cut = stories(PROMPT, max_tokens=60, temperature=0, stop=["e gi", "zzz"])["choices"][0]
    at = full["text"].index("e gi")
    assert cut["text"] == full["text"][:at] and cut["finish_reason"] == "stop"
    assert stories(PROMPT, max_tokens=60, temperature=0, stop="e gi")["choices"][0]["text"] == cut["text"]
    p, _ = run_cli("-m", STORIES, "-p", PROMPT, "-n", "60", "--temp", "0", "--stop", "e gi")
    assert p.stdout[len(PROMPT):-1] == cut["text"]
    # max_tokens None: until the context (or an end of generation)
    long = stories(PROMPT, max_tokens=None, temperature=0, ignore_eos=True)
    assert long["usage"]["total_tokens"] == stories.n_ctx() + 1 and long["choices"][0]["finish_reason"] == "length"


def test_echo_and_token_prompts(stories):
    r = stories(PROMPT, max_tokens=10, temperature=0, echo=True)["choices"][0]["text"]
    plain = stories(PROMPT, max_tokens=10, temperature=0)["choices"][0]["text"]
    assert r == PROMPT + plain
    ids = stories.tokenize(PROMPT.encode())
    assert stories(ids, max_tokens=10, temperature=0)["choices"][0]["text"] == plain
    chunks = list(stories(PROMPT, max_tokens=10, temperature=0, echo=True, stream=True))
    assert chunks[0]["choices"][0]["text"] == PROMPT


def test_logit_bias_and_own_options(stories):
    greedy = stories(PROMPT, max_tokens=1, temperature=0, logprobs=1)["choices"][0]
    first = stories.tokenize(greedy["logprobs"]["tokens"][0].encode(), add_bos=False)[-1]
    banned = stories(PROMPT, max_tokens=1, temperature=0, logit_bias={str(first): float("-inf")})["choices"][0]
    assert banned["text"] != greedy["text"]
    eos = stories.token_eos()
    forced = stories(PROMPT, max_tokens=30, temperature=0, logit_bias={eos: 100.0}, min_tokens=5)
    assert forced["usage"]["completion_tokens"] == 5 and forced["choices"][0]["finish_reason"] == "stop"
    ids = stories(PROMPT, max_tokens=30, temperature=0, stop_token_ids=[first])
    assert ids["choices"][0]["text"] == "" and ids["choices"][0]["finish_reason"] == "stop"


def test_grammar(stories):
    g = LlamaGrammar.from_string('root ::= " and then" (" the" | " a") " dog"')
    r = stories(PROMPT, max_tokens=20, temperature=1.0, seed=3, grammar=g)["choices"][0]
    assert r["text"] in (" and then the dog", " and then a dog") and r["finish_reason"] == "stop"
    with pytest.raises(ValueError, match=r"1:\d+"):
        LlamaGrammar.from_string("root ::= (")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["n", "ok"]}
    g = LlamaGrammar.from_json_schema(json.dumps(schema))
    out = json.loads(stories(PROMPT, max_tokens=200, temperature=0.5, seed=2, grammar=g)["choices"][0]["text"])
    assert isinstance(out["n"], int) and isinstance(out["ok"], bool)


def test_refusals(stories):
    with pytest.raises(TypeError, match="'no_such_option'"):
        stories(PROMPT, no_such_option=1)
    with pytest.raises(NotImplementedError, match="tfs_z"):
        stories(PROMPT, tfs_z=0.9)
    stories(PROMPT, max_tokens=2, tfs_z=1.0, logits_processor=None)  # their neutral values are fine
    with pytest.raises(NotImplementedError, match="logits_processor"):
        stories(PROMPT, logits_processor=[lambda ids, scores: scores])
    with pytest.raises(NotImplementedError, match="suffix"):
        stories(PROMPT, suffix="The end.")
    with pytest.raises(InvalidArgument, match="top_p"):
        stories(PROMPT, top_p=1.5)
    with pytest.raises(ValueError, match="logprobs"):
        stories(PROMPT, logprobs=21)
    with pytest.raises(ValueError, match="more than the context"):
        stories("once " * 600)
    assert stories.kv_cache_stats()["used"] == 0  # refused requests hold nothing


def test_generate_and_sample(stories):
    ids = stories.tokenize(PROMPT.encode())
    greedy = stories(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"]
    out = []
    for t in stories.generate(ids, temp=0):
        out.append(t)
        if len(out) == 12:
            break
    assert stories.detokenize(out, prev_tokens=ids).decode() == greedy
    assert stories.kv_seq_len(0) == 0  # the generator closed by break freed its sequence
    stories.reset()
    stories.eval(ids)
    assert stories.sample(temp=0) == out[0]


def test_chat_model_equals_cli(qwen2):
    """The chat's prompt through `nucleus run --special` draws the same reply."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    text, add_bos = qwen2.chat_template().render(messages, None)
    assert not add_bos
    r = qwen2.create_chat_completion(messages, max_tokens=24, seed=9, temperature=1.5)
    p, _ = run_cli("-m", QWEN2, "-p", text, "--special", "-n", "24", "--seed", "9", "--temp", "1.5")
    assert p.stdout[len(text):-1] == r["choices"][0]["message"]["content"]
