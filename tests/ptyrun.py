# SPDX-License-Identifier: MIT
"""Running a program with its stderr on a terminal, for the tests of what
spillway shows only there (bench progress, the attach's tqdm bar)."""
import fcntl
import os
import pty
import select
import struct
import subprocess
import termios


def run_on_pty(args, stream="stderr"):
    """Runs args with stderr (stream="stdout": stdout) on a new pty and the
    other on a pipe; returns (exit status, what the pipe got, what the
    terminal received)."""
    master, slave = pty.openpty()
    # A terminal's size, as a real one has: a new pty has 0 columns, and
    # tqdm 4.70 draws nothing in them (4.64 did).
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    if stream == "stdout":
        p = subprocess.Popen(args, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    else:
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    term = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer has closed the slave
                chunk = b""
            if not chunk and p.poll() is not None:
                break
            term += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    pipe = p.stderr if stream == "stdout" else p.stdout
    out = pipe.read()
    pipe.close()
    p.wait(60)
    return p.returncode, out.decode(), term.decode(errors="replace")
