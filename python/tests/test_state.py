"""Tokens, the model's numbers and metadata, eval with its logits (scores, eval_logits), and
save_state / load_state."""

import math
import os
import subprocess

import numpy as np
import pytest

from conftest import CLI, QWEN2, SHARED, STORIES
from nucleus import GGML_TYPE_F32, GGML_TYPE_Q8_0, InvalidArgument, Llama, NucleusError

PROMPT = "Once upon a time"
QWEN3 = os.path.join(SHARED, "archs", "qwen3", "qwen3-f16.gguf")


def test_tokenize_detokenize(stories):
    ids = stories.tokenize(PROMPT.encode())
    assert ids == [1, 403, 407, 261, 378]
    assert stories.tokenize(PROMPT) == ids and stories.tokenize(PROMPT.encode(), add_bos=False) == ids[1:]
    cli = subprocess.run([CLI, "tokenize", "-m", STORIES, "-p", PROMPT], capture_output=True, text=True)
    assert all(str(t) in cli.stdout for t in ids)
    assert stories.detokenize(ids) == b" Once upon a time"       # llama.cpp's: the BOS keeps the space after it
    assert stories.detokenize(ids[1:]) == PROMPT.encode()
    assert stories.detokenize(ids, special=True) == b"<s> Once upon a time"
    assert stories.detokenize(ids[3:], prev_tokens=ids[:3]) == b" a time"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        stories.detokenize([99999])


def test_special_tokens(qwen2):
    text = "<|im_start|>user"
    plain, special = qwen2.tokenize(text, add_bos=False), qwen2.tokenize(text, add_bos=False, special=True)
    assert len(special) < len(plain)
    assert qwen2.detokenize(special, special=True).decode() == text
    assert qwen2.detokenize(special).decode() == "user"  # control tokens' text only with special


def test_model_numbers(stories):
    assert stories.n_vocab() == 512 and stories.n_embd() == 64 and stories.n_ctx() == 512
    assert stories.token_bos() == 1 and stories.token_eos() == 2 and stories.token_is_eog(2)
    assert stories.token_nl() >= 0 and stories.detokenize([stories.token_nl()]) == b"\n"
    md = stories.metadata
    assert md["general.architecture"] == "llama" and md["llama.context_length"] == "2048"
    assert md["llama.attention.layer_norm_rms_epsilon"] == "0.000010"
    assert "tokenizer.ggml.tokens" not in md  # arrays are left out, as llama.cpp does
    with Llama(model_path=STORIES, n_ctx=0, verbose=False) as llm:
        assert llm.n_ctx() == 2048  # 0: the training context


def test_eval_and_scores(stories):
    ids = stories.tokenize(PROMPT.encode())
    stories.reset()
    stories.eval(ids)
    assert stories.n_tokens == 5 and list(stories.input_ids) == ids and list(stories.eval_tokens) == ids
    last = np.array(stories.logits(), dtype=np.float32)
    assert stories.scores.shape == (5, 512) and np.array_equal(stories.scores[4], last)
    assert not stories.scores[:4].any()  # without logits_all only the last token's are kept
    # the first token the CLI draws greedily is the top of these logits, and its logprob their log-softmax
    lp = stories(PROMPT, max_tokens=1, temperature=0, logprobs=1)["choices"][0]["logprobs"]
    assert stories.detokenize([int(np.argmax(last))]).decode() == lp["tokens"][0]
    log_z = math.log(np.exp(last.astype(np.float64) - last.max()).sum()) + last.max()
    assert lp["token_logprobs"][0] == pytest.approx(float(last.max()) - log_z, abs=1e-5)
    assert stories.n_tokens == 0  # the generation took sequence 0: the state starts over


def test_logits_all_and_batches():
    ids = list(range(3, 40))
    with Llama(model_path=STORIES, logits_all=True, n_batch=8, verbose=False) as a, \
            Llama(model_path=STORIES, logits_all=True, verbose=False) as b:
        a.eval(ids[:20])
        a.eval(ids[20:])
        b.eval(ids)
        assert a.scores.shape == (len(ids), 512) and np.array_equal(a.scores, b.scores)  # batch size changes nothing
        assert len(a.eval_logits) == len(ids)
        with pytest.raises(InvalidArgument, match="do not fit"):
            a.eval([5] * 600)


def test_save_and_load_state():
    ids = [1, 403, 407, 261, 378]
    more = [432, 383, 286]
    with Llama(model_path=STORIES, verbose=False) as llm:
        llm.eval(ids)
        state = llm.save_state()
        assert state.n_tokens == 5 and len(state.llama_state) == state.llama_state_size > 0
        llm.eval(more)
        want = llm.logits()
        llm.load_state(state)
        assert llm.n_tokens == 5 and llm.kv_seq_len(0) == 5 and list(llm.input_ids) == ids
        llm.eval(more)
        assert llm.logits() == want
    with Llama(model_path=STORIES, verbose=False) as other:  # another context of the same model takes it
        other.load_state(state)
        other.eval(more)
        assert other.logits() == want
    with Llama(model_path=QWEN2, verbose=False) as wrong:
        with pytest.raises(ValueError, match="model"):
            wrong.load_state(state)
    with Llama(model_path=STORIES, type_k=GGML_TYPE_F32, verbose=False) as f32:
        with pytest.raises(ValueError, match="type|F32|f32"):
            f32.load_state(state)


def test_cache_types():
    ids = [1, 403, 407, 261, 378]
    logits = {}
    for k in (None, "f16", GGML_TYPE_F32):
        with Llama(model_path=STORIES, type_k=k, cache_type_v=k, verbose=False) as llm:
            llm.eval(ids)
            logits[k] = llm.logits()
    assert logits[None] == logits["f16"] != logits[GGML_TYPE_F32]
    with pytest.raises(InvalidArgument, match="head_dim 8 is not a multiple of 32"):  # the C library's reason
        Llama(model_path=STORIES, type_k=GGML_TYPE_Q8_0, verbose=False)
    with Llama(model_path=QWEN3, type_k="q8_0", type_v="q4_0", verbose=False) as q, \
            Llama(model_path=QWEN3, verbose=False) as f16:  # head_dim 32
        q.eval(ids)
        f16.eval(ids)
        assert q.logits() != f16.logits()
    with pytest.raises(NotImplementedError, match="type_k"):
        Llama(model_path=STORIES, type_k=3, verbose=False)  # GGML_TYPE_Q4_1: not a cache type of nucleus
    with pytest.raises(TypeError, match="disagree"):
        Llama(model_path=STORIES, type_k="f16", cache_type_k="f32", verbose=False)


def test_seed_and_cache_setters():
    with Llama(model_path=STORIES, verbose=False) as llm:
        llm.set_seed(9)
        first = [llm(PROMPT, max_tokens=16, temperature=1.2)["choices"][0]["text"] for _ in range(2)]
        llm.set_seed(9)
        assert [llm(PROMPT, max_tokens=16, temperature=1.2)["choices"][0]["text"] for _ in range(2)] == first
        llm.set_cache(None)
        with pytest.raises(NotImplementedError, match="reuses them by itself"):
            llm.set_cache(object())
        with pytest.raises(NucleusError, match="nothing evaluated"):
            llm.logits()
