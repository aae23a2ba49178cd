#!/usr/bin/env python3
"""A chat in the terminal through the model's chat template: each line you type is a user turn,
the reply streams back; Ctrl-D ends it.

    python3 examples/python/chat.py MODEL.gguf ["system prompt"]

The nucleus package must be installed (make python) or on PYTHONPATH (python/ of the checkout).
"""
import sys

from nucleus import Llama


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    messages = [{"role": "system", "content": sys.argv[2]}] if len(sys.argv) > 2 else []
    with Llama(model_path=sys.argv[1], n_ctx=2048, verbose=False) as llm:
        while True:
            print("> ", end="", flush=True)
            line = sys.stdin.readline()
            if not line:
                print()
                return 0
            messages.append({"role": "user", "content": line.rstrip("\n")})
            reply = ""
            try:
                for chunk in llm.create_chat_completion(messages, max_tokens=256, stream=True):
                    text = chunk["choices"][0]["delta"].get("content") or ""
                    reply += text
                    print(text, end="", flush=True)
            except KeyboardInterrupt:  # Ctrl-C stops the reply; the stream has freed its sequence
                print(" [stopped]", end="")
            print()
            messages.append({"role": "assistant", "content": reply})


if __name__ == "__main__":
    sys.exit(main())
