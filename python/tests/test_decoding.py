"""nucleus's own decoding through Python: speculative decoding (prompt lookup under
llama-cpp-python's name, a draft model) with the same tokens and the CLI's statistics, and beam
search with the CLI's hypotheses."""

import re

import pytest

from conftest import STORIES, run_cli
from nucleus import DraftModel, InvalidArgument, Llama, LlamaPromptLookupDecoding

REPEATING = ("Once upon a time, there was a little girl named Lily. She loved to play. Once upon a time, there was "
             "a little girl named Lily. She loved to play. Once upon a time, there was")


def cli_spec_stats(stderr):
    m = re.search(r"\[speculative\] drafted (\d+), accepted (\d+)", stderr)
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("draft,flags", [
    (LlamaPromptLookupDecoding(max_ngram_size=3, num_pred_tokens=8), ["--lookup-ngram", "3", "--draft-max", "8"]),
    (DraftModel(STORIES, draft_max=4, fixed=True), ["-md", STORIES, "--draft-max", "4", "--draft-fixed"]),
])
def test_speculative(stories, draft, flags):
    want = stories(REPEATING, max_tokens=60, temperature=0)["choices"][0]["text"]
    with Llama(model_path=STORIES, draft_model=draft, verbose=False) as llm:
        r = llm(REPEATING, max_tokens=60, temperature=0)
        assert r["choices"][0]["text"] == want
        st = llm.last_stats
        assert st.drafted > 0 and st.accepted > 0 and st.passes < st.generated == 60
        p, _ = run_cli("-m", STORIES, "-p", REPEATING, "-n", "60", "--temp", "0", *flags)
        assert (st.drafted, st.accepted) == cli_spec_stats(p.stderr)
        if isinstance(draft, DraftModel):
            assert st.accepted == st.drafted and st.draft_rows > 0  # the model is its own draft: all kept
        # sampling (the same distribution, drawn otherwise): the CLI's tokens for the same seed and drafts
        kw = dict(max_tokens=40, temperature=1.0, seed=4)
        sampled = llm(REPEATING, **kw)["choices"][0]["text"]
        p, _ = run_cli("-m", STORIES, "-p", REPEATING, "-n", "40", "--temp", "1.0", "--seed", "4", *flags)
        assert sampled == p.stdout[len(REPEATING):-1]
        assert (llm.last_stats.drafted, llm.last_stats.accepted) == cli_spec_stats(p.stderr)
        assert "".join(c["choices"][0]["text"] for c in llm(REPEATING, stream=True, **kw)) == sampled


def test_draft_model_of_another_vocabulary():
    from conftest import QWEN2
    with pytest.raises(ValueError, match="vocabulary|token"):
        Llama(model_path=STORIES, draft_model=DraftModel(QWEN2), verbose=False)


def test_beam_search_equals_cli():
    prompt = "Once upon a time"
    p, _ = run_cli("-m", STORIES, "-p", prompt, "-n", "20", "--beams", "3", "--n-best", "3", "--length-penalty", "0.8")
    heads = re.findall(r"--- beam \d of 3: score (\S+), logprob (\S+), (\d+) tokens, finish (\w+) ---\n(.*)\n",
                       p.stdout)
    assert len(heads) == 3
    with Llama(model_path=STORIES, n_seq_max=3, verbose=False) as llm:
        hyps = llm.beam_search(prompt, n_beams=3, n_best=3, max_tokens=20, length_penalty=0.8)
        assert len(hyps) == 3
        for h, (score, logprob, n, finish, text) in zip(hyps, heads):
            assert prompt + h["text"] == text and len(h["tokens"]) == int(n) and h["finish_reason"] == finish
            assert h["score"] == pytest.approx(float(score), abs=1e-4)
            assert h["logprob"] == pytest.approx(float(logprob), abs=1e-4)
        assert hyps[0]["score"] >= hyps[1]["score"] >= hyps[2]["score"]
        # width 1 is greedy search
        one = llm.beam_search(prompt, n_beams=1, max_tokens=20)[0]
        assert one["text"] == llm(prompt, max_tokens=20, temperature=0)["choices"][0]["text"]
        assert llm.kv_cache_stats()["used"] == 0
    with Llama(model_path=STORIES, verbose=False) as narrow:
        with pytest.raises(InvalidArgument, match="n_seq_max=3"):
            narrow.beam_search(prompt, n_beams=3)
