"""Drives `normcheck lab` at a terminal (a pseudo-terminal): the prompt appears, a malformed command is
reported without stopping the session, the lesson's first step is exact, and the session exits 0.

    lab_tty.py NORMCHECK
"""

import os
import pty
import select
import subprocess
import sys
import time

COMMANDS = ["frobnicate", "set lr 0.1", "set x 2", "predict 1.8", "step", "quit"]


def main():
    master, slave = pty.openpty()
    process = subprocess.Popen([sys.argv[1], "lab"], stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    output = b""
    sent = 0
    deadline = time.time() + 20
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        # Answer each prompt with the next command.
        if sent < len(COMMANDS) and output.count(b"lab> ") > sent:
            os.write(master, (COMMANDS[sent] + "\n").encode())
            sent += 1
    status = process.wait(timeout=10)
    os.close(master)
    text = output.decode("utf-8", "replace").replace("\r\n", "\n")
    print(text)
    failures = []
    if status != 0:
        failures.append("exit status %d, expected 0" % status)
    if text.count("lab> ") < len(COMMANDS):
        failures.append("expected a prompt before each of the %d commands" % len(COMMANDS))
    for part in ["no replicas", "malformed: unknown command 'frobnicate'", "x1 = 9/5 (≈ 1.8)",
                 "prediction 9/5 is right"]:
        if part not in text:
            failures.append("missing: " + part)
    if "line 1:" in text:
        failures.append("an interactive session must not number lines")
    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
