# SPDX-License-Identifier: MIT
"""Session(progress=...): while spillwayd locks a 256 MiB region, the
status document's region_ready_bytes reaches a callback (non-decreasing,
whole 64 MiB steps, ending at the region once attached) or a tqdm bar on a
terminal (tqdm from Debian's python3-tqdm); no bar when stderr is not a
terminal or tqdm is missing; a refused attach still raises and leaves no
thread behind. How many readings fall part way depends on the machine and
is only printed."""
import os
import subprocess
import sys
import threading
import unittest

import spwtest
import spillway

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ptyrun import run_on_pty  # noqa: E402

MiB = 1 << 20
REGION = 256 * MiB
STEP = 64 * MiB  # daemon/region.h REGION_READY_STEP

CHILD = """
import sys
import spillway
%s
s = spillway.Session(sys.argv[2], %d, socket=sys.argv[1], progress=True)
s.close()
print("attached")
"""


def run_child(control, name, stderr_tty, block_tqdm=False):
    """A python attaching with progress=True; returns (rc, stdout, stderr)."""
    code = CHILD % ("sys.modules['tqdm'] = None" if block_tqdm else "", REGION)
    args = [sys.executable, "-c", code, control, name]
    if not stderr_tty:
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr
    return run_on_pty(args)


class AttachProgress(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=False, pool="1GiB", session_max="512MiB")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_callback(self):
        seen = []
        s = spillway.Session("progress/cb", REGION, socket=self.d.control,
                             progress=lambda ready, total: seen.append((ready, total)))
        try:
            self.assertEqual(s.info()["region_bytes"], REGION)
        finally:
            s.close()
        print("readings: %d, %d part way" % (len(seen), sum(0 < r < REGION for r, _ in seen)), file=sys.stderr)
        self.assertTrue(seen)
        self.assertEqual(seen[-1], (REGION, REGION))
        for (a, _), (b, _) in zip(seen, seen[1:]):
            self.assertLess(a, b)  # only changes are reported
        for ready, total in seen:
            self.assertEqual(total, REGION)
            self.assertTrue(ready == REGION or ready % STEP == 0, ready)
        self.assertNotIn("spillway-attach-progress", [t.name for t in threading.enumerate()])

    def test_refused_attach(self):
        seen = []
        with self.assertRaises(spillway.SpillwayError) as e:
            spillway.Session("progress/big", 1 << 40, socket=self.d.control,
                             progress=lambda ready, total: seen.append(ready))
        self.assertIn("session_max_bytes", str(e.exception))
        self.assertEqual(seen, [])
        self.assertNotIn("spillway-attach-progress", [t.name for t in threading.enumerate()])

    def test_tqdm_bar_on_a_terminal(self):
        try:
            import tqdm  # noqa: F401
        except ImportError:
            self.fail("tqdm is not installed (Debian: python3-tqdm; scripts/lib.sh installs it)")
        rc, out, term = run_child(self.d.control, "progress/tty", stderr_tty=True)
        self.assertEqual(rc, 0, term)
        self.assertEqual(out.strip(), "attached")
        self.assertIn("spillway: locking progress/tty", term)
        self.assertIn("/256M", term)  # the bar's total: the region

    def test_no_bar_off_a_terminal(self):
        rc, out, err = run_child(self.d.control, "progress/pipe", stderr_tty=False)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), "attached")
        self.assertNotIn("locking", err)

    def test_without_tqdm(self):
        rc, out, term = run_child(self.d.control, "progress/notqdm", stderr_tty=True, block_tqdm=True)
        self.assertEqual(rc, 0, term)
        self.assertEqual(out.strip(), "attached")
        self.assertNotIn("locking", term)


if __name__ == "__main__":
    unittest.main()
