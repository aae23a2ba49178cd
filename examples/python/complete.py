#!/usr/bin/env python3
"""Continue a prompt, streaming the text as it comes, then say what the generation cost.

    python3 examples/python/complete.py MODEL.gguf "Once upon a time" [MAX_TOKENS [SEED]]

The same seed gives the text `nucleus run -m MODEL.gguf -p PROMPT -n MAX_TOKENS --seed SEED` gives.

The nucleus package must be installed (make python) or on PYTHONPATH (python/ of the checkout).
"""
import sys

from nucleus import Llama


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    model, prompt = sys.argv[1], sys.argv[2]
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else None  # None: a random one
    with Llama(model_path=model, n_ctx=0, verbose=False) as llm:
        print(prompt, end="", flush=True)
        for chunk in llm(prompt, max_tokens=max_tokens, seed=seed, stream=True):
            print(chunk["choices"][0]["text"], end="", flush=True)
        print()
        st = llm.last_stats
        print(f"[{st.completion_tokens} tokens in {st.t_gen:.3f} s, prompt {st.prompt_tokens} tokens "
              f"({st.cached_tokens} from the prefix cache), stop: {st.finish_reason[0]}]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
