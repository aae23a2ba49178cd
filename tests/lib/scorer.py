"""What the checkers against references share (tests/e2e/golden_check.py, archs_check.py).

Scorer: one `nucleus score --batch -` process answering many score requests: a request is score's
arguments, its answer the JSON `nucleus score` would print for them, so the checks are those of a
process per request without paying a process start and a model load per request (the model stays
loaded while the requests name the same one).

sampled: which records of a file differ in what they exercise (make test's samples)."""
import json, subprocess, tempfile


class Scorer:
    def __init__(self, nucleus, extra=()):
        """nucleus: the binary (or a wrapper script that passes its arguments on); extra: arguments
        every request gets (e.g. --device cuda)."""
        self.cmd = [nucleus, "score"] + list(extra) + ["--batch", "-"]
        self.proc = None

    def _start(self):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     text=True, bufsize=1)

    def _stderr(self):
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace").strip()[-500:]

    def score(self, args):
        """score's JSON for these arguments; RuntimeError naming the request and the reason when it fails
        (and a fresh process for the next request when this one died)."""
        if self.proc is None:
            self._start()
        what = "%s score %s" % (self.cmd[0], " ".join(args[:2]))
        try:
            self.proc.stdin.write(json.dumps(list(args)) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            rc = self.proc.wait()
            err = self._stderr()
            self.proc = None
            raise RuntimeError("%s: the process ended (%d): %s" % (what, rc, err))
        out = json.loads(line)
        if isinstance(out, dict) and set(out) == {"error"}:
            raise RuntimeError("%s failed: error: %s" % (what, out["error"]))
        return out

    def close(self):
        """Ends the process; RuntimeError when it did not exit cleanly (a sanitizer report, a crash at
        exit)."""
        if self.proc is None:
            return
        self.proc.stdin.close()
        rc = self.proc.wait()
        self.proc.stdout.close()
        err = self._stderr() if rc not in (0, 1) else ""
        self.proc = None
        if rc not in (0, 1):
            raise RuntimeError("%s: exit status %d: %s" % (" ".join(self.cmd), rc, err))


def sampled(records):
    """The indices of the records that differ in what they exercise: the first, and each one whose
    sequence (prompt and continuation, teacher-forced in one pass) is at least twice as long as
    every one before it (other attention tiles, a sliding window passed). The others repeat them
    with other prompts of the same model."""
    chosen, longest = [], 0
    for i, rec in enumerate(records):
        n = len(rec["prompt_ids"]) + len(rec["ids"])
        if not chosen or n >= 2 * longest:
            chosen.append(i)
        longest = max(longest, n)
    return chosen
