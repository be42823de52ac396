# SPDX-License-Identifier: MIT
"""spillway-bench metrics at a tiny size: one JSON line whose fields make
sense together (a scrape returned bytes, both times are positive, the
ratio is theirs). Never a timing goal: that is the bench's to report.

Usage: test_metrics_bench.py SPILLWAY_BENCH"""
import json
import math
import subprocess
import sys
import unittest

BENCH = sys.argv.pop(1)


class MetricsBench(unittest.TestCase):
    def test_line(self):
        out = subprocess.run([BENCH, "metrics", "--json", "--sessions", "4", "--rounds", "5"],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, out.stdout)
        r = lines[0]
        self.assertEqual((r["bench"], r["sessions"], r["rounds"]), ("metrics", 4, 5))
        # Four sessions' series: each session adds hundreds of bytes.
        self.assertGreater(r["scrape_bytes"], 4 * 500)
        for k in ("scrape_ms", "scrape_p99_ms", "status_ms"):
            self.assertTrue(math.isfinite(r[k]) and r[k] > 0, (k, r))
        self.assertGreaterEqual(r["scrape_p99_ms"], r["scrape_ms"])
        self.assertAlmostEqual(r["ratio_vs_status"], r["scrape_ms"] / r["status_ms"], delta=0.01)

    def test_refuses_nonsense(self):
        out = subprocess.run([BENCH, "metrics", "--sessions", "0"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn("usage", out.stderr)


if __name__ == "__main__":
    unittest.main()
