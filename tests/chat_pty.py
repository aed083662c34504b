#!/usr/bin/env python3
"""chat_pty.py: drives `anyllm chat` through a pseudo-terminal, as a person at a
terminal would, for tests/chat.sh. Python 3 standard library only.

    python3 tests/chat_pty.py LOG [--timeout S] -- build/anyllm chat -m MODEL ... < STEPS

Each line of STEPS is one step:
    line TEXT    wait for the prompt "> ", then type TEXT and Enter
    type TEXT    wait for the prompt, then type TEXT without Enter
    send TEXT    send TEXT at once (no wait)
    entered      wait until the line last typed was read (its echo ends the line)
    output       wait for the first output after the line last typed (a reply starting)
    prompt       wait for the prompt
    sleep S      wait S seconds, reading the output
    exit         wait for the program to end
TEXT may hold escapes: \\x03 is Ctrl-C, \\x04 Ctrl-D, \\x1b[D the left arrow, \\r Enter.

LOG receives the whole terminal output (carriage returns removed); each line, type and
send step is marked by a line "@@ STEP" where its keys were sent, so what follows the
mark is the echo, the reply and the next prompt. The last line printed is "exit N"
(the program's status; -SIG if a signal ended it) or "alive" (it was still running at
the end and was killed). A step that times out prints "timeout: STEP" and ends the run;
the whole run never takes longer than --timeout seconds (default 60)."""
import os
import pty
import re
import select
import signal
import sys
import time


class Session:
    def __init__(self, argv, log, deadline):
        self.deadline = deadline
        self.out = b""  # all the output, carriage returns removed
        self.log = log
        self.status = None
        self.mark = 0  # where the output stood when the last line was typed
        env = dict(os.environ, TERM="xterm", COLUMNS="200", LINES="50")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)

    def read(self, seconds):
        """Reads what comes within seconds (less near the deadline); False at the end."""
        end = min(time.time() + seconds, self.deadline)
        while True:
            left = end - time.time()
            if left <= 0:
                return True
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return True
            try:
                data = os.read(self.fd, 4096)
            except OSError:  # EIO: the program ended and closed the terminal
                data = b""
            if not data:
                self.reap()
                return False
            data = data.replace(b"\r", b"")
            self.out += data
            self.log.write(data)
            self.log.flush()

    def wait_for(self, done, seconds=30):
        """Reads until done(output) holds; False on a timeout or the program's end."""
        end = min(time.time() + seconds, self.deadline)
        while not done(self.out):
            if time.time() >= end or not self.read(min(0.1, end - time.time())):
                return done(self.out)
        return True

    def at_prompt(self, out):
        tail = out[self.mark:]
        return tail == b"> " or tail.endswith(b"\n> ")

    def send_marked(self, step, text):
        """Sends text, marking the log and the output where it was sent."""
        self.log.write(b"\n@@ " + step + b"\n")
        self.mark = len(self.out)
        os.write(self.fd, text)

    def reap(self):
        """Collects the exit status, waiting at most until the deadline (the terminal
        may close a moment before the program ends)."""
        while self.status is None:
            try:
                pid, st = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return
            if pid:
                self.status = os.WEXITSTATUS(st) if os.WIFEXITED(st) else -os.WTERMSIG(st)
            elif time.time() >= self.deadline:
                return
            else:
                time.sleep(0.02)


def unescape(text):
    """The bytes to send: \\xNN and \\r replaced, other bytes (UTF-8 too) as they are."""
    return re.sub(rb"\\x([0-9a-fA-F]{2})|\\r",
                  lambda m: bytes([int(m.group(1), 16)]) if m.group(1) else b"\r", text)


def run_step(s, step):
    """One step; False if it timed out or the program ended before it was done."""
    verb, _, arg = step.partition(b" ")
    verb = verb.decode()
    if verb in ("line", "type"):
        if not s.wait_for(s.at_prompt):
            return False
        s.send_marked(step, unescape(arg) + (b"\r" if verb == "line" else b""))
        return True
    if verb == "send":
        s.send_marked(step, unescape(arg))
        return True
    if verb == "entered":  # the line typed was read: its echo ended with a newline
        return s.wait_for(lambda out: b"\n" in out[s.mark:])
    if verb == "output":  # the echo of the line typed ends with a newline; then the reply
        return s.wait_for(lambda out: len(out[s.mark:].partition(b"\n")[2]) > 0)
    if verb == "prompt":
        return s.wait_for(s.at_prompt)
    if verb == "sleep":
        s.read(float(arg.decode()))
        return True
    if verb == "exit":
        while s.status is None and s.read(0.2) and time.time() < s.deadline:
            pass
        return s.status is not None
    raise SystemExit("chat_pty.py: unknown step: %r" % step)


def main():
    args = sys.argv[1:]
    if "--" not in args or args.index("--") < 1:
        raise SystemExit(__doc__)
    cmd = args[args.index("--") + 1:]
    opts = args[:args.index("--")]
    log_path, timeout = opts[0], 60.0
    if "--timeout" in opts:
        timeout = float(opts[opts.index("--timeout") + 1])
    steps = [l.rstrip(b"\n") for l in sys.stdin.buffer if l.strip()]
    with open(log_path, "wb") as log:
        s = Session(cmd, log, time.time() + timeout)
        ok = True
        try:
            for step in steps:
                if not run_step(s, step):
                    what = "timeout" if s.status is None else "ended before"
                    print(what + ": " + step.decode(errors="replace"))
                    ok = False
                    break
            if s.status is None:
                s.read(0.3)
        finally:  # whatever happened, the program does not outlive the helper
            if s.status is None:
                os.kill(s.pid, signal.SIGKILL)
                os.waitpid(s.pid, 0)
                print("alive")
            else:
                print("exit %d" % s.status)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
