# SPDX-License-Identifier: MIT
"""Attach progress: spw_client_attach() blocks while the daemon locks the
session's region (seconds for tens of GiB). Meanwhile a thread reads the
status document, whose region_ready_bytes says how much is locked so far,
and hands (ready, total) to a callback, or draws a tqdm bar. ctypes lets go
of the GIL during the attach, so the thread runs alongside it."""
import sys
import threading


def _tqdm_callback(name, total):
    """A callback drawing a tqdm bar on stderr, or None without tqdm. tqdm
    draws only when stderr is a terminal (disable=None)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None, None
    bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, leave=False, disable=None,
               file=sys.stderr, desc="spillway: locking %s" % name)

    def update(ready, total):
        if total != bar.total:
            bar.total = total
        if ready > bar.n:
            bar.update(ready - bar.n)
    return update, bar


class AttachProgress:
    """with AttachProgress(progress, name, status_fn, total): attach...

    progress: None/False (nothing), True (a tqdm bar when tqdm is
    installed, else nothing), or a callable(ready_bytes, total_bytes).
    status_fn() returns the status document. The callback sees
    non-decreasing values; the last one, read once the attach succeeded,
    is the daemon's figure for the attached session."""

    def __init__(self, progress, name, status_fn, total, interval=0.05):
        self.name, self.status_fn, self.total, self.interval = name, status_fn, int(total), interval
        self.bar = None
        if progress is True:
            self.cb, self.bar = _tqdm_callback(name, self.total)
        elif progress:
            self.cb = progress
        else:
            self.cb = None
        self.last = -1
        self._stop = threading.Event()
        self._thread = None

    def _read(self):
        try:
            doc = self.status_fn()
        except Exception:  # no status socket, daemon gone: no progress, the attach says why
            return None
        for s in doc.get("sessions", []):
            if s.get("name") == self.name and "region_ready_bytes" in s:
                # the daemon's region: the request rounded up to whole pages
                self.total = int(s.get("region_bytes", self.total))
                return int(s["region_ready_bytes"])
        return None

    def _report(self, ready):
        if ready is not None and ready > self.last:
            self.last = ready
            self.cb(ready, self.total)

    def _watch(self):
        while not self._stop.wait(self.interval):
            self._report(self._read())

    def __enter__(self):
        if self.cb:
            self._thread = threading.Thread(target=self._watch, name="spillway-attach-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._thread:
            self._stop.set()
            self._thread.join()
            if exc_type is None:
                self._report(self._read())
        if self.bar is not None:
            self.bar.close()
        return False
