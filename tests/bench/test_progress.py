# SPDX-License-Identifier: MIT
"""spillway-bench's progress: "pipeline: step N/T" on stderr when stderr is
a terminal (a pty here), counting every step the run takes, and never on
stdout, whose --json lines stay clean; nothing at all when stderr is not a
terminal. Tiny sizes; no timing is asserted.

Usage: test_progress.py SPILLWAY_BENCH"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ptyrun import run_on_pty  # noqa: E402

BENCH = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else \
    os.environ.get("SPILLWAY_BENCH", "spillway-bench")
TINY = ["--layers", "2", "--params", "65536", "--fwd-ms", "0.5"]


class Progress(unittest.TestCase):
    def test_on_a_terminal(self):
        rc, out, term = run_on_pty([BENCH, "pipeline", "--json", "--steps", "3"] + TINY)
        self.assertEqual(rc, 0, term)
        # two warm-up steps and three measured ones; the last is always drawn
        self.assertIn("pipeline: step 5/5", term)
        self.assertNotIn("step 6/", term)
        self.assertTrue(term.endswith("\r\x1b[K"), repr(term[-40:]))  # the line is cleared at the end
        lines = out.splitlines()
        self.assertEqual(len(lines), 1, out)
        self.assertEqual(json.loads(lines[0])["bench"], "pipeline")
        self.assertNotIn("\x1b", out)

    def test_traced_run_counts_both_sessions(self):
        rc, out, term = run_on_pty([BENCH, "pipeline", "--json", "--trace", "--steps", "2"] + TINY)
        self.assertEqual(rc, 0, term)
        self.assertIn("pipeline: step 8/8", term)  # 2 x (2 warm-up + 2 pairs' halves)
        self.assertIn("trace_overhead", json.loads(out))

    def test_not_a_terminal(self):
        r = subprocess.run([BENCH, "pipeline", "--json", "--steps", "3"] + TINY, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("step", r.stderr)
        self.assertNotIn("\x1b", r.stderr)
        self.assertEqual(len(r.stdout.splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
