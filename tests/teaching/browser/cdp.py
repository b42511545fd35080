"""A small client of Chromium's DevTools protocol, in the standard library only.

Chromium is started with --remote-debugging-pipe: it reads commands from file descriptor 3 and writes
replies and events to descriptor 4, each message one JSON object followed by a NUL byte. No port is
opened and nothing is downloaded; the browser is Debian's /usr/bin/chromium.

    with Browser() as browser:
        page = browser.new_page()
        page.navigate("file:///tmp/page.html")
        title = page.evaluate("document.title")

Every launch has a deadline: a call that would wait past it raises BrowserError, and leaving the `with`
block ends the browser's whole process group.
"""

import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
    "--remote-debugging-pipe",
]


class BrowserError(Exception):
    """The browser did not answer in time, closed the pipe, or answered a command with an error."""


class Browser:
    """One Chromium process, driven over its DevTools pipe."""

    def __init__(self, executable=CHROMIUM, deadline_seconds=60):
        self.deadline = time.monotonic() + deadline_seconds
        self.profile = tempfile.mkdtemp(prefix="normcheck-chromium-")
        self.log_path = os.path.join(self.profile, "chromium.log")
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def place_pipe_ends():
            # In the child, before exec: the read end of the commands at 3, the write end of the replies at 4.
            # Both are first moved above 9 so that neither dup2 overwrites the other. dup2 clears
            # close-on-exec, so these two survive exec; every other descriptor Python made does not.
            read_end = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [executable] + FLAGS + ["--user-data-dir=" + self.profile, "about:blank"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=False,
                start_new_session=True, preexec_fn=place_pipe_ends)
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = bytearray()
        self._scanned = 0
        self._next_id = 0
        self.events = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def remaining(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BrowserError("the browser's time limit has passed")
        return left

    def _read_message(self, timeout):
        """The next message, or None when `timeout` seconds pass without one."""
        end = time.monotonic() + min(timeout, self.remaining())
        while True:
            cut = self._buffer.find(b"\0", self._scanned)
            if cut >= 0:
                message = bytes(self._buffer[:cut])
                del self._buffer[:cut + 1]
                self._scanned = 0
                return json.loads(message)
            self._scanned = len(self._buffer)
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._replies], [], [], left)
            if ready:
                chunk = os.read(self._replies, 1 << 20)
                if not chunk:
                    raise BrowserError("the browser closed its pipe; its log:\n" + self.log_tail())
                self._buffer += chunk

    def send(self, method, params=None, session_id=None, timeout=20):
        """Sends a command and returns its result; events that arrive meanwhile are kept in `events`."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session_id:
            message["sessionId"] = session_id
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        end = time.monotonic() + timeout
        while True:
            reply = self._read_message(end - time.monotonic())
            if reply is None:
                raise BrowserError("no answer to %s within %g s" % (method, timeout))
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError("%s failed: %s" % (method, reply["error"]))
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def pump(self, seconds):
        """Collects events for `seconds`."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            message = self._read_message(end - time.monotonic())
            if message is not None and "method" in message:
                self.events.append(message)

    def wait_event(self, method, session_id=None, timeout=20):
        """The first event `method` (of the session, if given) not yet consumed; consumes it."""
        end = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event["method"] == method and (session_id is None or event.get("sessionId") == session_id):
                    return self.events.pop(i)
            message = self._read_message(end - time.monotonic())
            if message is None:
                raise BrowserError("no %s event within %g s" % (method, timeout))
            if "method" in message:
                self.events.append(message)

    def new_page(self):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session)

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                return "".join(log.readlines()[-lines:])
        except OSError:
            return ""

    def close(self):
        """Asks the browser to close, then ends its process group whatever it did, and removes its profile."""
        try:
            if self.process.poll() is None:
                self.send("Browser.close", timeout=3)
                self.process.wait(timeout=3)
        except (BrowserError, OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


class ScriptError(Exception):
    """An expression evaluated in the page threw."""


class Page:
    """One tab, attached through a flat session."""

    def __init__(self, browser, session_id):
        self.browser = browser
        self.session_id = session_id

    def send(self, method, params=None, timeout=20):
        return self.browser.send(method, params, self.session_id, timeout)

    def events(self, method):
        """Every collected event `method` of this page, consumed."""
        mine = [e for e in self.browser.events if e["method"] == method and e.get("sessionId") == self.session_id]
        self.browser.events = [e for e in self.browser.events if e not in mine]
        return mine

    def navigate(self, url, timeout=20):
        """Loads `url` and waits for its load event."""
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})
        self.browser.wait_event("Page.loadEventFired", self.session_id, timeout)

    def evaluate(self, expression, timeout=20):
        """The value of a JavaScript expression (awaited when it is a promise), as JSON gives it back."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            description = details.get("exception", {}).get("description") or details.get("text")
            raise ScriptError(description)
        return result["result"].get("value")

    def call(self, function, *arguments, timeout=20):
        """Calls a JavaScript function text with JSON arguments and returns its value."""
        return self.evaluate("(%s)(...%s)" % (function, json.dumps(list(arguments))), timeout)

    def key(self, key, code=None, key_code=0, text=None, modifiers=0):
        """Presses and releases one key, as a keyboard would."""
        down = {"type": "keyDown", "key": key, "code": code or key, "windowsVirtualKeyCode": key_code,
                "modifiers": modifiers}
        if text is not None:
            down["text"] = text
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": key, "code": code or key,
                                             "windowsVirtualKeyCode": key_code, "modifiers": modifiers})

    def tab(self):
        self.key("Tab", key_code=9)

    def enter(self):
        self.key("Enter", key_code=13, text="\r")

    def type_text(self, text):
        self.send("Input.insertText", {"text": text})
