"""A stand-in for Hugging Face's hub, for tests/e2e/hub.sh: the repositories are the directories
ROOT/USER/REPO, served as the hub serves them:
  GET /api/models/USER/REPO/tree/main?recursive=true   the file listing (JSON: type, path, size,
      oid; .gguf and .safetensors files as LFS files with their SHA-256), in pages of two with a
      Link header for repositories named in "paginate"
  GET /USER/REPO/resolve/main/PATH   a redirect to /cdn/USER/REPO/PATH, which serves the bytes with
      Range requests (206 and Content-Range)
  a missing repository: 404 with X-Error-Code RepoNotFound; a missing file: 404 EntryNotFound.
ROOT/control.json, read at every request, makes it misbehave:
  {"gated": {"USER/REPO": "TOKEN"}}   401 (X-Error-Code GatedRepo) without that Bearer token
  {"drop": {"USER/REPO/PATH": N}}     a transfer of that file closes the connection at its byte N
                                      (a range starting there closes it at once)
  {"drop_times": {"USER/REPO/PATH": K}}  ... only the first K transfers (default: every one)
  {"corrupt": ["USER/REPO/PATH"]}     one byte of the file differs from the listing's SHA-256
  {"no_range": ["USER/REPO/PATH"]}    Range requests answered 200 with the whole file
  {"paginate": ["USER/REPO"]}
  {"size": {"USER/REPO/PATH": N}}     the listing says the file has N bytes
Every request is logged to ROOT/requests.log as "METHOD PATH RANGE AUTHORIZATION".
Usage: hub_server.py ROOT; prints the port on stdout."""
import hashlib
import http.server
import json
import os
import socketserver
import sys
import threading
import urllib.parse

ROOT = os.path.abspath(sys.argv[1])
lock = threading.Lock()
transfers = {}


last_control = None


def control():
    """The misbehaviours asked for; a new set starts the transfers' count again."""
    global last_control
    try:
        with open(os.path.join(ROOT, "control.json")) as f:
            text = f.read()
    except FileNotFoundError:
        text = "{}"
    with lock:
        if text != last_control:
            transfers.clear()
            last_control = text
    return json.loads(text)


def git_oid(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def listing(repo_dir, repo, ctl):
    out = []
    for dirpath, dirnames, filenames in os.walk(repo_dir):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, repo_dir)
        for d in dirnames:
            out.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": os.path.normpath(os.path.join(rel_dir, d))})
        for name in sorted(filenames):
            path = os.path.normpath(os.path.join(rel_dir, name))
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read()
            item = {"type": "file", "oid": git_oid(data), "size": len(data), "path": path}
            if name.endswith((".gguf", ".safetensors")):
                item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            size = ctl.get("size", {}).get(f"{repo}/{path}")
            if size is not None:
                item["size"] = size
                if "lfs" in item:
                    item["lfs"]["size"] = size
            out.append(item)
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def error(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if code:
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        with open(os.path.join(ROOT, "requests.log"), "a") as log:
            log.write(f"GET {path} {self.headers.get('Range', '-')} {self.headers.get('Authorization', '-')}\n")
        ctl = control()
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4:6] == ["tree", "main"]:
            repo = "/".join(parts[2:4])
            if not self.allowed(ctl, repo):
                return
            repo_dir = os.path.join(ROOT, repo)
            if not os.path.isdir(repo_dir):
                return self.error(404, "RepoNotFound", "Repository not found")
            items = listing(repo_dir, repo, ctl)
            link = None
            if repo in ctl.get("paginate", []):
                start = int(urllib.parse.parse_qs(url.query).get("cursor", ["0"])[0])
                if start + 2 < len(items):
                    link = f'<http://{self.headers["Host"]}/api/models/{repo}/tree/main?recursive=true&cursor={start + 2}>; rel="next"'
                items = items[start:start + 2]
            body = json.dumps(items).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if link:
                self.send_header("Link", link)
            self.end_headers()
            self.wfile.write(body)
            return
        if len(parts) >= 5 and parts[2:4] == ["resolve", "main"]:
            repo = "/".join(parts[:2])
            if not self.allowed(ctl, repo):
                return
            if not os.path.isdir(os.path.join(ROOT, repo)):
                return self.error(404, "RepoNotFound", "Repository not found")
            file = "/".join(parts[4:])
            if not os.path.isfile(os.path.join(ROOT, repo, file)):
                return self.error(404, "EntryNotFound", "Entry not found")
            self.send_response(302)
            self.send_header("Location", "/cdn/" + urllib.parse.quote(f"{repo}/{file}"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if parts[0] == "cdn" and len(parts) >= 4:
            return self.serve_file(ctl, "/".join(parts[1:]))
        self.error(404, None, "not found")

    def allowed(self, ctl, repo):
        token = ctl.get("gated", {}).get(repo)
        if token and self.headers.get("Authorization") != f"Bearer {token}":
            self.error(401, "GatedRepo", f"Access to model {repo} is restricted. You must have access to it and be authenticated to access it. Please log in.")
            return False
        return True

    def serve_file(self, ctl, key):
        full = os.path.join(ROOT, key)
        if not os.path.isfile(full):
            return self.error(404, "EntryNotFound", "Entry not found")
        with open(full, "rb") as f:
            data = bytearray(f.read())
        if key in ctl.get("corrupt", []):
            data[len(data) // 2] ^= 0xFF
        start = 0
        rng = self.headers.get("Range")
        if rng and key not in ctl.get("no_range", []):
            start = int(rng.split("=")[1].split("-")[0])
        body = bytes(data[start:])
        self.send_response(206 if start else 200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        drop = ctl.get("drop", {}).get(key)
        with lock:
            transfers[key] = transfers.get(key, 0) + 1
            n = transfers[key]
        times = ctl.get("drop_times", {}).get(key)
        if drop is not None and (times is None or n <= times) and drop < len(data):
            self.wfile.write(body[:max(0, drop - start)])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
