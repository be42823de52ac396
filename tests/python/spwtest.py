# SPDX-License-Identifier: MIT
"""Shared by the Python tests: a real spillwayd on a temporary directory
(as tests/harness.c does for the C tests), and the import path.

$SPILLWAYD names the daemon (meson sets it); without it, the daemon built
next to the library is used. The package is imported from $PYTHONPATH (the
build tree's python/, set by meson) or else from the source tree.
"""
import json
import os
import shutil
import signal
import socket as _socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))

try:
    import spillway  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(SRC, "python"))
    import spillway  # noqa: F401


def daemon_binary():
    b = os.environ.get("SPILLWAYD")
    if b:
        return b
    lib = spillway.library_path()
    cand = os.path.join(os.path.dirname(lib), "..", "daemon", "spillwayd")
    return os.path.normpath(cand)


def _die_with_parent():
    # A test killed hard must not leave its daemon behind.
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Daemon:
    """spillwayd with sockets in a temp dir and swap under /var/tmp."""

    def __init__(self, swap=True, pool="1GiB", session_max="256MiB", extra=None, sock_dir=None):
        """extra: more config sections, e.g. {"metrics": {"listen": ...}};
        sock_dir: the sockets' directory (made; removed by stop), so that
        a restarted daemon answers at the same path."""
        if sock_dir:
            os.makedirs(sock_dir, mode=0o755, exist_ok=True)
        self.dir = sock_dir or tempfile.mkdtemp(prefix="spw-py-", dir=os.environ.get("TMPDIR") or "/tmp")
        self.swapdir = tempfile.mkdtemp(prefix="spw-py-swap-", dir="/var/tmp") if swap else None
        self.control = os.path.join(self.dir, "control.sock")
        self.status_path = os.path.join(self.dir, "status.sock")
        cfg = {
            "socket": {"dir": self.dir, "mode": "0666"},
            "pool": {"max_bytes": pool, "session_max_bytes": session_max, "require_locked": False},
            "log": {"level": os.environ.get("SPW_TEST_LOG", "warn")},
        }
        if swap:
            cfg["swap"] = {"dirs": [{"path": self.swapdir, "max_bytes": "1GiB"}]}
        cfg.update(extra or {})
        self.config = os.path.join(self.dir, "spillwayd.json")
        with open(self.config, "w") as f:
            json.dump(cfg, f)
        self.proc = subprocess.Popen([daemon_binary(), "--config", self.config],
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                self.cleanup()
                raise RuntimeError("spillwayd exited with %s at start" % self.proc.returncode)
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                s.connect(self.control)
                s.close()
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    self.proc.kill()
                    self.cleanup()
                    raise RuntimeError("spillwayd did not come up in 10 s")
                time.sleep(0.02)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """SIGTERM; returns the exit status (0 for a clean shutdown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.cleanup()
        return rc

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.swapdir:
            shutil.rmtree(self.swapdir, ignore_errors=True)


class DaemonCase(unittest.TestCase):
    """A test class whose tests share one spillwayd without swap (self.d),
    started before the first and stopped, cleanly, after the last."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(swap=False)

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0


def metrics_port(d):
    """The TCP port of d's metrics endpoint, configured as port 0 (the
    kernel picks a free one): the status document says which."""
    return int(spillway.status(d.status_path)["config"]["metrics_listen"].rsplit(":", 1)[1])


def wait_orphaned(control, name, timeout=10.0):
    """The status entry of session name once it is an orphan: its client
    died (or left without detaching), and the daemon ends a connection when
    it reads its hang-up, in its own time. The last entry after timeout
    seconds, for the caller's assertion to show (its state "(none)" when
    the session is not listed)."""
    deadline = time.monotonic() + timeout
    while True:
        entry = next((s for s in spillway.status(control)["sessions"] if s["name"] == name), None)
        if (entry and entry["state"] == "orphaned") or time.monotonic() > deadline:
            return entry or {"name": name, "state": "(none)"}
        time.sleep(0.01)


def swappable_supported(d):
    """Whether the daemon takes swappable tensors (the NVMe tier is on)."""
    s = spillway.Session("probe/swap", region_bytes=1 << 20, page_size=64 << 10, socket=d.control)
    try:
        opt = spillway.Optimizer(s, [dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                                          weight_decay=0.0)], tier="nvme", device="host")
        import ctypes
        buf = (ctypes.c_float * 16)()
        try:
            opt.add("probe", 0, 16, ctypes.addressof(buf), ctypes.addressof(buf), 0)
            return True, ""
        except spillway.SpillwayError as e:
            if e.errno == 95:  # EOPNOTSUPP
                return False, str(e)
            raise
        finally:
            opt.close()
    finally:
        s.close()
