"""Debian's headless Chromium, driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
JSON messages ending in a NUL byte on file descriptors 3 and 4). No port to collide with another
test's browser, no websocket client to install, and the protocol gives what a screenshot alone
cannot: the page's console errors, every request it made, and each chart's place on the page."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from storlab import processes

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]


def _high(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def chromium_binary() -> str | None:
    return shutil.which("chromium")


class Chromium:
    def __init__(self, timeout_s: float = 30):
        binary = chromium_binary()
        if binary is None:
            raise RuntimeError("chromium not found: make test installs Debian's chromium")
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="storlab-test-chromium-")
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()
        # Out of the way of 3 and 4 first, so that putting one end there never closes the other.
        to_browser, from_browser = (_high(fd) for fd in (to_browser, from_browser))
        # bash puts the two pipe ends on 3 and 4 for the browser, as the pipe protocol wants (dash takes
        # only one-digit descriptors in a redirection).
        script = f'exec "$@" 3<&{to_browser} 4>&{from_browser} {to_browser}<&- {from_browser}>&-'
        self.log = open(Path(self.profile) / "chromium.log", "wb")
        self.child = processes.start(
            ["bash", "-c", script, "bash", binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(to_browser, from_browser), stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            # Chromium's singleton directory (org.chromium.Chromium.*) goes under TMPDIR and outlives
            # the browser: inside the profile, it is removed with it.
            env={**os.environ, "TMPDIR": self.profile})
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:  # a browser that is already gone is stopped below all the same
            pass
        processes.stop(self.child, signal.SIGTERM)
        os.close(self._commands)
        os.close(self._replies)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium closed the pipe: {Path(self.log.name).read_text(errors='replace')[-2000:]}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """One command; its result. Events that arrive meanwhile are kept in `events`."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str) -> dict:
        """The first event `method` of the tab `session` (a browser keeps every tab's events apart by it)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            for event in self.events:
                if event.get("method") == method and event.get("sessionId") == session:
                    return event
            self.events.append(self._message(deadline))

    def open(self, url: str, width: int, height: int) -> str:
        """A new tab at width x height CSS pixels (mobile at phone widths), loaded; its session id."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_for("Page.loadEventFired", session)
        return session

    def evaluate(self, expression: str, session: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, session: str, clip: dict) -> bytes:
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                     "clip": {**clip, "scale": 1}}, session)
        return base64.b64decode(shot["data"])

    def errors(self) -> list[str]:
        """What the page reported as an error: uncaught exceptions, console.error, error log entries."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]
