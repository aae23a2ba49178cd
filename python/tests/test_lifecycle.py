"""Lifetimes: load errors carry the loader's message; a stream closed half-way, dropped, or hit by
KeyboardInterrupt frees its sequence and leaves the Llama usable; one generation at a time; threads
overlap (the GIL is released during forward passes); 1,000 Llamas made and freed leave the
process's memory as it was."""

import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import CLI, ROOT, STORIES
from nucleus import Llama, LoadError, NucleusError

PROMPT = "Once upon a time"


def cli_error(path):
    p = subprocess.run([CLI, "run", "-m", path, "-p", "x"], capture_output=True, text=True)
    assert p.returncode != 0
    return p.stderr.strip().splitlines()[-1].removeprefix("error: ")


def test_load_errors_carry_the_loaders_message(tmp_path):
    missing = str(tmp_path / "nope.gguf")
    with pytest.raises(LoadError) as e:
        Llama(model_path=missing, verbose=False)
    assert str(e.value) == cli_error(missing) and "nope.gguf" in str(e.value)
    assert isinstance(e.value, ValueError)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(LoadError) as e:
        Llama(model_path=str(bad), verbose=False)
    assert str(e.value) == cli_error(str(bad))


def test_init_refusals():
    with pytest.raises(TypeError, match="'n_ctxx'"):
        Llama(model_path=STORIES, n_ctxx=5, verbose=False)
    with pytest.raises(NotImplementedError, match="lora_base"):
        Llama(model_path=STORIES, lora_base="base.gguf", verbose=False)
    with pytest.raises(ValueError, match="give lora_path"):
        Llama(model_path=STORIES, lora_scale=0.5, verbose=False)
    with pytest.raises(ValueError, match="model_path or hf_repo"):
        Llama(model_path=STORIES, hf_repo="org/model", verbose=False)
    with pytest.raises(NotImplementedError, match="not other patterns"):
        Llama.from_pretrained("org/model", "*.gguf")
    with pytest.raises(NotImplementedError, match="n_threads_batch"):
        Llama(model_path=STORIES, n_threads=1, n_threads_batch=2, verbose=False)
    with pytest.raises(ValueError, match="without the CUDA backend"):  # libnucleus.so is the CPU build
        Llama(model_path=STORIES, n_gpu_layers=-1, verbose=False)
    # llama-cpp-python's defaults, given explicitly, are accepted
    Llama(model_path=STORIES, use_mmap=True, use_mlock=False, flash_attn=False, rope_freq_base=0.0, numa=False,
          offload_kqv=True, verbose=False).close()


def test_lora_adapter_as_the_cli_applies_it(tmp_path):
    adapter = str(tmp_path / "a.gguf")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "tools", "lora_gguf.py"), "adapter", STORIES,
                    "-o", adapter, "--targets", "attn_q,attn_v,ffn_gate,ffn_down,output", "--rank", "4", "--alpha", "8",
                    "--amp", "1"], check=True)
    cli = subprocess.run([CLI, "run", "-m", STORIES, "--lora-scaled", adapter, "0.7", "-p", PROMPT, "-n", "24",
                          "--temp", "0"], capture_output=True, text=True, check=True).stdout
    with Llama(model_path=STORIES, lora_path=adapter, lora_scale=0.7, verbose=False) as llm:
        got = llm(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"]
    with Llama(model_path=STORIES, verbose=False) as llm:
        plain = llm(PROMPT, max_tokens=24, temperature=0)["choices"][0]["text"]
    assert PROMPT + got == cli.removesuffix("\n") and got != plain
    with pytest.raises(LoadError, match="not a LoRA adapter"):
        Llama(model_path=STORIES, lora_path=STORIES, verbose=False)


def test_stream_closed_half_way_frees_its_sequence(stories):
    whole = stories(PROMPT, max_tokens=40, seed=8)["choices"][0]["text"]
    gen = stories(PROMPT, max_tokens=40, seed=8, stream=True)
    got = "".join(next(gen)["choices"][0]["text"] for _ in range(5))
    assert whole.startswith(got)
    assert stories.kv_seq_len(0) > 5  # the prompt and the tokens so far are in the cache
    with pytest.raises(NucleusError, match="busy"):
        stories(PROMPT, max_tokens=2)  # one generation at a time
    gen.close()
    assert stories.kv_seq_len(0) == 0 and stories.kv_cache_stats()["used"] == 0
    assert stories(PROMPT, max_tokens=40, seed=8)["choices"][0]["text"] == whole  # usable, and as before
    # dropped without close: freed all the same
    gen = stories(PROMPT, max_tokens=40, seed=8, stream=True)
    next(gen)
    del gen
    assert stories.kv_seq_len(0) == 0 and stories(PROMPT, max_tokens=3)["usage"]["completion_tokens"] == 3
    # an iterator of a chat, and one of generate, likewise
    chat = stories.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=30, stream=True)
    next(chat), next(chat)
    chat.close()
    assert stories.kv_seq_len(0) == 0


def interrupt_when_busy(llm):
    """SIGINT to this process once llm is generating."""
    def run():
        deadline = time.time() + 20
        while not llm._lock.locked() and time.time() < deadline:
            time.sleep(0.001)
        time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)
    t = threading.Thread(target=run)
    t.start()
    return t


def test_keyboard_interrupt_stops_cleanly():
    # Python's own Ctrl-C handler, as a program started from a terminal has it: a suite started in
    # the background by a shell (tests/run.sh runs two at a time) inherits SIGINT ignored
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        interrupt_each_mode()
    finally:
        signal.signal(signal.SIGINT, old)


def interrupt_each_mode():
    with Llama(model_path=STORIES, n_ctx=8192, n_seq_max=4, verbose=False) as llm:
        for how in ("completion", "stream", "beams"):
            t = interrupt_when_busy(llm)
            start = time.time()
            with pytest.raises(KeyboardInterrupt):
                if how == "completion":
                    llm(PROMPT, max_tokens=None, ignore_eos=True, temperature=0)
                elif how == "stream":
                    for _ in llm(PROMPT, max_tokens=None, ignore_eos=True, temperature=0, stream=True):
                        pass
                else:
                    llm.beam_search(PROMPT, n_beams=4, max_tokens=8000, ignore_eos=True)
            t.join()
            assert time.time() - start < 2, how  # a step or two after the interrupt, not the whole run
            assert not llm._lock.locked(), how
            assert llm.kv_cache_stats()["used"] == 0, how
            assert llm(PROMPT, max_tokens=4, temperature=0)["usage"]["completion_tokens"] == 4


def test_threads_overlap():
    """Another thread runs Python while one thread's forward pass runs in C."""
    with Llama(model_path=STORIES, n_ctx=2048, n_batch=2048, n_threads=1, verbose=False) as llm:
        ids = [1] + [403, 407, 261, 378] * 450
        span = {}

        def work():
            span["start"] = time.perf_counter()
            llm.eval(ids)
            span["end"] = time.perf_counter()

        ticks = []
        t = threading.Thread(target=work)
        t.start()
        while t.is_alive():
            ticks.append(time.perf_counter())
        t.join()
        inside = [x for x in ticks if span["start"] + 0.02 < x < span["end"] - 0.02]
        assert span["end"] - span["start"] > 0.05
        assert len(inside) > 1000, f"{len(inside)} ticks of Python ran during a {span['end'] - span['start']:.3f} s pass"


def test_threads_generate_as_alone():
    """Two Llamas in two threads at once give what each gives alone."""
    kw = dict(max_tokens=200, temperature=1.0, ignore_eos=True)
    alone = []
    with Llama(model_path=STORIES, verbose=False) as llm:
        alone = [llm(PROMPT, seed=s, **kw)["choices"][0]["text"] for s in (1, 2)]
    out = {}

    def run(seed):
        with Llama(model_path=STORIES, n_threads=1, verbose=False) as llm:
            out[seed] = [llm(PROMPT, seed=seed, **kw)["choices"][0]["text"] for _ in range(3)]

    threads = [threading.Thread(target=run, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out[1] == [alone[0]] * 3 and out[2] == [alone[1]] * 3


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_thousand_llamas_leave_memory_as_it_was():
    def cycle(i):
        llm = Llama(model_path=STORIES, verbose=False)
        if i % 50 == 0:  # now and then one that generates, streams half-way, and embeds
            llm(PROMPT, max_tokens=8)
            next(llm(PROMPT, max_tokens=8, stream=True))
            llm.embed(PROMPT)
        del llm  # no close(): the object's end frees it

    for i in range(20):
        cycle(i)
    start = rss_bytes()
    for i in range(1000):
        cycle(i)
    end = rss_bytes()
    assert end <= start * 1.05, f"RSS {start / 1e6:.1f} MB -> {end / 1e6:.1f} MB"


def test_closed(tmp_path):
    llm = Llama(model_path=STORIES, verbose=False)
    gen = llm(PROMPT, max_tokens=20, stream=True)
    next(gen)
    llm.close()  # closes the stream first
    llm.close()
    with pytest.raises(NucleusError, match="closed"):
        llm(PROMPT)
    with pytest.raises(StopIteration):
        next(gen)
