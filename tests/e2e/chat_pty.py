"""nucleus chat driven through a pseudo-terminal, as a person types: greedy replies equal the
server's /v1/chat/completions for the same conversation (and speculative decoding changes none),
multi-line input, the commands, Ctrl-C stopping a reply (and dropping a typed line) without
ending the program, a full context, Ctrl-D; line editing (arrow and emacs keys, a multibyte
character edited as one), the history recalled with Up and kept in its file across sessions,
Ctrl-C at an empty prompt saying how to quit and a second one quitting; input that is not a
terminal read as it comes; a reasoning template's thinking shown dimmed (plain between markers off
a terminal, hidden with --hide-thinking) and kept out of the reply's content (qwen2's random
weights under Qwen3's template, the reply steered by a grammar).
Usage: chat_pty.py NUCLEUS MODEL DRAFT TMPDIR QWEN2"""
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request

nucleus, model, draft, tmp, qwen2 = sys.argv[1:6]
passed = failed = 0


def check(what, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what} {detail}")


class Chat:
    def __init__(self, *args, env=None, model_path=None):
        self.model = model_path or model
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            for k, v in (env or {}).items():  # None: unset
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            os.execv(nucleus, [nucleus, "chat", "-m", self.model, "--seed", "1", *args])
        self.out = b""

    def read_until(self, pattern, timeout=60):
        """Everything up to and including the first match of pattern after what was read."""
        end = time.time() + timeout
        rx = re.compile(pattern.encode())
        while True:
            m = rx.search(self.out)
            if m:
                got, self.out = self.out[: m.end()], self.out[m.end():]
                return got.decode("utf-8", "replace")
            left = end - time.time()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    return None
                self.out += data

    def send(self, text):
        os.write(self.fd, text.encode())

    def turn(self, text):
        """Send a line; the reply up to the next prompt (the echo of the input removed)."""
        self.send(text + "\n")
        got = self.read_until(r"\n> ")
        if got is None:
            return None
        got = got.replace("\r\n", "\n")
        echoed = text + "\n"
        if got.startswith(echoed):
            got = got[len(echoed):]
        return got[: -len("\n> ")]

    def wait(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            self.read_until(r"\Z\A", timeout=0.1)  # drain
        os.kill(self.pid, signal.SIGKILL)
        return None


def stderr_lines(text):
    return [l for l in text.split("\n") if l.startswith("[")]


def reply_of(got):
    """The streamed reply: the text before the statistics lines."""
    return got.split("\n[")[0] if got is not None else None


# ---- greedy replies against the server's ----
conversation = ["Hello there", "Tell me a story about a cat"]
replies = {}
for name, extra in (("plain", []), ("draft model", ["-md", draft]), ("lookup", ["--lookup-ngram", "2"])):
    c = Chat("--temp", "0", "-n", "24", *extra)
    check(f"{name}: first prompt", c.read_until(r"> ") is not None)
    replies[name] = [reply_of(c.turn(msg)) for msg in conversation]
    c.send("/quit\n")
    check(f"{name}: /quit exits 0", c.wait() == 0)

server = subprocess.Popen([nucleus, "serve", "-m", model, "--port", "0"], stderr=subprocess.PIPE, text=True)
url = None
for line in server.stderr:
    m = re.search(r"listening on (http://[0-9.:]+)", line)
    if m:
        url = m.group(1)
        break
messages = []
want = []
for msg in conversation:
    messages.append({"role": "user", "content": msg})
    body = json.dumps({"messages": messages, "temperature": 0, "max_tokens": 24}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})) as r:
        text = json.load(r)["choices"][0]["message"]["content"]
    want.append(text)
    messages.append({"role": "assistant", "content": text})
server.terminate()
server.wait()
for name in replies:
    check(f"{name}: replies equal the server's", replies[name] == want, f"{replies[name]} vs {want}")

# ---- input, commands, saving and loading ----
c = Chat("--temp", "0", "-n", "8", "--system", "You are a storyteller.")
c.read_until(r"> ")
c.send("line one\\\n")
check("a trailing backslash asks for more", c.read_until(r"\. ") is not None)
c.turn("line two")
c.send('"""\n')  # opens a block: no continuation prompt until its first line (waiting for one here cost 60 s)
c.send("block one\n")
c.read_until(r"\. ")
c.send("block two\n")
c.read_until(r"\. ")
c.turn('"""')
saved = os.path.join(tmp, "chat.json")
got = c.turn("/save " + saved)
check("/save says so", got is not None and "saved 5 messages" in got, repr(got))
msgs = json.load(open(saved))["messages"]
check("the system message first", msgs[0] == {"role": "system", "content": "You are a storyteller."})
check("joined lines", msgs[1] == {"role": "user", "content": "line one\nline two"}, repr(msgs[1]))
check("a block", msgs[3] == {"role": "user", "content": "block one\nblock two"}, repr(msgs[3]))
check("replies kept", msgs[2]["role"] == "assistant" and msgs[4]["role"] == "assistant")
c.turn("/clear")
again = os.path.join(tmp, "chat2.json")
c.turn("/save " + again)
check("/clear keeps the system message", json.load(open(again))["messages"] == msgs[:1])
c.turn("/load " + saved)
c.turn("/save " + again)
check("/load then /save round-trips", json.load(open(again))["messages"] == msgs)
got = c.turn("/load " + os.path.join(tmp, "none.json"))
check("/load of a missing file", got is not None and "error: /load" in got and "No such file" in got, repr(got))
open(os.path.join(tmp, "bad.json"), "w").write('{"messages": [{"role": 1}]}')
got = c.turn("/load " + os.path.join(tmp, "bad.json"))
check("/load of a bad file", got is not None and "without a string role" in got, repr(got))
got = c.turn("/set temp hot")
check("/set with a bad value", got is not None and "error" in got, repr(got))
got = c.turn("/set colour 3")
check("/set of an unknown setting", got is not None and "unknown setting 'colour'" in got, repr(got))
got = c.turn("/frobnicate")
check("an unknown command", got is not None and "unknown command '/frobnicate'" in got, repr(got))
got = c.turn("/system")
check("/system without text drops it", got is not None and "no system message" in got, repr(got))
c.send("\x04")  # Ctrl-D at the prompt
check("Ctrl-D exits 0", c.wait() == 0)

# ---- Ctrl-C: a reply stops, the program goes on; a typed line is dropped ----
c = Chat("--temp", "0.8", "-n", "-1", "--ignore-eos", "-c", "4096")
c.read_until(r"> ")
c.send("Tell me a very long story\n")
check("a reply starts streaming", c.read_until(r"Tell me a very long story\r\n.{8}", timeout=60) is not None)
c.send("\x03")
got = c.read_until(r"\n> ", timeout=60)
check("Ctrl-C stops the reply", got is not None and "[stopped]" in got, repr(got)[-200:])
c.send("half a line\x03")
check("Ctrl-C at the prompt drops the line", c.read_until(r"\n> ", timeout=30) is not None, repr(c.out[-300:]))
got = c.turn("/save " + saved)
msgs = json.load(open(saved))["messages"]
check("the stopped reply stays", len(msgs) == 2 and msgs[1]["role"] == "assistant" and msgs[1]["content"], repr(msgs))
c.send("/quit\n")
check("still alive, exits 0", c.wait() == 0)

# ---- a full context ----
c = Chat("--temp", "0", "-c", "32")
c.read_until(r"> ")
got = c.turn("a long message " * 20)
check("a conversation longer than the context", got is not None and "nothing is left for a reply" in got, repr(got))
got = c.turn("Hi")
check("then a short one is answered", got is not None and "tokens, " in got and "context is full" in got, repr(got))
c.send("/quit\n")
check("exits 0", c.wait() == 0)

# ---- line editing and the history ----
history = os.path.join(tmp, "state", "nucleus", "chat_history")
edit_env = {"NUCLEUS_CHAT_HISTORY": None, "XDG_STATE_HOME": os.path.join(tmp, "state"), "LC_ALL": "C.UTF-8"}
LEFT, UP, DOWN = "\x1b[D", "\x1b[A", "\x1b[B"


def saved_users(c):
    """The user messages so far, through /save."""
    path = os.path.join(tmp, "edit.json")
    c.turn("/save " + path)
    return [m["content"] for m in json.load(open(path))["messages"] if m["role"] == "user"]


def typed(c, keys, echo):
    """Send keys, then wait for the line as typed to be echoed (the editor has read them)."""
    c.send(keys)
    return c.read_until(re.escape(echo), timeout=30) is not None


c = Chat("--temp", "0", "-n", "4", env=edit_env)
c.read_until(r"> ")
check("editing: typed", typed(c, "wrld", "wrld"))
c.turn(LEFT * 3 + "o" + "\x01" + "Hello " + "\x05" + "!")  # Left, Ctrl-A (start), Ctrl-E (end)
check("editing: arrow and emacs keys", saved_users(c) == ["Hello world!"], repr(saved_users(c)))
c.turn("caf\u00e9s" + LEFT + "\x7f")  # Backspace over a two-byte character
check("editing: a multibyte character edited as one", saved_users(c)[-1] == "cafs", repr(saved_users(c)))
c.turn(UP + UP + UP + UP)  # /save, cafs, /save, Hello world! (the history holds each line once in a row)
check("history: Up recalls an earlier line", saved_users(c)[-1] == "Hello world!", repr(saved_users(c)))
c.turn(UP + UP + DOWN + "\x7f" + "?")  # Up to "/save ...", Up to "Hello world!", Down: "/save ..." ... edited
got = c.turn("Tell me more")
check("history: a reply to the line sent", got is not None and "tokens, " in got, repr(got))
c.send("/quit\n")
check("editing: exits 0", c.wait() == 0)
kept = open(history, encoding="utf-8").read() if os.path.exists(history) else ""
check("history: kept in $XDG_STATE_HOME/nucleus/chat_history", "Tell\\040me\\040more" in kept or "Tell me more" in kept, repr(kept[-200:]))
check("history: a private file", os.path.exists(history) and os.stat(history).st_mode & 0o077 == 0)
c = Chat("--temp", "0", "-n", "4", env=edit_env)
c.read_until(r"> ")
c.turn(UP + UP)  # "/quit" was the last line, "Tell me more" the one before
check("history: recalled in the next session", saved_users(c) == ["Tell me more"], repr(saved_users(c)))

# ---- Ctrl-C at the prompt ----
check("Ctrl-C: a line typed", typed(c, "half a line", "half a line"))
c.send("\x03")
got = c.read_until(r"\n> ", timeout=30)
check("Ctrl-C: the typed line is dropped, said", got is not None and "[input dropped]" in got, repr(got))
c.send("\x03")
got = c.read_until(r"\n> ", timeout=30)
check("Ctrl-C at an empty prompt: says how to quit", got is not None and "Ctrl-C again, Ctrl-D or /quit quits" in got, repr(got))
c.turn("/help")  # anything typed in between: the next Ctrl-C says so again
c.send("\x03")
got = c.read_until(r"\n> ", timeout=30)
check("Ctrl-C after a line: says it again, does not quit", got is not None and "Ctrl-C again" in got, repr(got))
check("Ctrl-C: nothing sent", saved_users(c) == ["Tell me more"], repr(saved_users(c)))
c.send("\x03")
c.read_until(r"\n> ", timeout=30)
c.send("\x03")
check("a second Ctrl-C in a row quits, 0", c.wait() == 0)

# ---- input that is not a terminal: read as it comes, no history ----
plain_history = os.path.join(tmp, "plain_history")
r = subprocess.run([nucleus, "chat", "-m", model, "--temp", "0", "-n", "4"],
                   input="Hello \\\nthere\n/save " + os.path.join(tmp, "plain.json") + "\n", capture_output=True,
                   text=True, env={**os.environ, "NUCLEUS_CHAT_HISTORY": plain_history}, timeout=120)
msgs = json.load(open(os.path.join(tmp, "plain.json")))["messages"]
check("a pipe: read as it comes", r.returncode == 0 and msgs[0] == {"role": "user", "content": "Hello \nthere"}, repr(msgs))
check("a pipe: no history", not os.path.exists(plain_history))

# ---- a reasoning template: the thinking dimmed, then the answer; kept out of the content ----
TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "templates", "Qwen-Qwen3-0.6B.jinja")
STEER = ["--chat-template", TEMPLATE, "--grammar", 'root ::= "<think>\nTwo and two make four.\n</think>\n\nIt is four."',
         "--temp", "0", "-n", "64"]
c = Chat(*STEER, model_path=qwen2)
c.read_until(r"> ")
got = c.turn("What is two and two?")
check("thinking: dimmed (SGR 2), then the answer plain", got is not None and
      "\x1b[2mTwo and two make four.\x1b[22m\n\nIt is four.\n" in got, repr(got))
check("thinking: no markers on a terminal", got is not None and "<think>" not in got and "[thinking]" not in got, repr(got))
c.turn("/save " + os.path.join(tmp, "think.json"))
msgs = json.load(open(os.path.join(tmp, "think.json")))["messages"]
check("thinking: the content is the answer, the reasoning beside it",
      msgs[-1] == {"role": "assistant", "content": "It is four.", "reasoning_content": "Two and two make four."}, repr(msgs))
got = c.turn("And three and three?")
check("thinking: the next turn is answered", got is not None and "It is four." in got and "tokens, " in got, repr(got))
c.send("/quit\n")
check("thinking: exits 0", c.wait() == 0)

c = Chat(*STEER, "--hide-thinking", model_path=qwen2)
c.read_until(r"> ")
got = c.turn("What is two and two?")
check("--hide-thinking: the answer alone", got is not None and reply_of(got) == "It is four.", repr(got))
c.send("/quit\n")
check("--hide-thinking: exits 0", c.wait() == 0)

r = subprocess.run([nucleus, "chat", "-m", qwen2, *STEER], input="What is two and two?\n", capture_output=True,
                   text=True, env={**os.environ, "NUCLEUS_CHAT_HISTORY": ""}, timeout=120)
check("thinking off a terminal: between markers, no escapes",
      r.returncode == 0 and "[thinking]\nTwo and two make four.\n[/thinking]\nIt is four.\n" in r.stdout
      and "\x1b" not in r.stdout, repr(r.stdout))

# gpt-oss's harmony channels: the analysis channel dimmed, the final one the answer
HARMONY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "templates", "openai-gpt-oss-120b.jinja")
c = Chat("--chat-template", HARMONY, "--grammar",
         'root ::= "<|channel|>analysis<|message|>Two and two make four.<|end|><|start|>assistant<|channel|>final'
         '<|message|>It is four."', "--temp", "0", "-n", "256", model_path=qwen2)
c.read_until(r"> ")
got = c.turn("What is two and two?")
check("gpt-oss: the analysis dimmed, then the final answer plain", got is not None and
      "\x1b[2mTwo and two make four.\x1b[22m\n\nIt is four.\n" in got and "<|channel|>" not in got, repr(got))
c.turn("/save " + os.path.join(tmp, "harmony.json"))
msgs = json.load(open(os.path.join(tmp, "harmony.json")))["messages"]
check("gpt-oss: the content is the final answer, the analysis beside it",
      msgs[-1] == {"role": "assistant", "content": "It is four.", "reasoning_content": "Two and two make four."}, repr(msgs))
c.send("/quit\n")
check("gpt-oss: exits 0", c.wait() == 0)

print(f"chat: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
