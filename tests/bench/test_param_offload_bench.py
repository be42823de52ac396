# SPDX-License-Identifier: MIT
"""spillway-bench torch --param-offload --quick --json: a resident and an
offloaded trainer per tier, with the fields the issue asks for, consistent
with each other. No timing is asserted."""
import json
import math
import os
import subprocess
import sys
import unittest

BENCH = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else \
    os.environ.get("SPILLWAY_BENCH", "spillway-bench")


class ParamOffloadBench(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run([BENCH, "torch", "--param-offload", "--quick", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=280)
        cls.rc, cls.err = r.returncode, r.stderr
        cls.rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]

    def test_rows(self):
        self.assertEqual(self.rc, 0, self.err)
        self.assertEqual(sorted((r["trainer"], r["tier"]) for r in self.rows),
                         [("offload", "cpu"), ("offload", "nvme"),
                          ("resident", "cpu"), ("resident", "nvme")])

    def test_fields(self):
        resident = {r["tier"]: r for r in self.rows if r["trainer"] == "resident"}
        for r in self.rows:
            with self.subTest(trainer=r["trainer"], tier=r["tier"]):
                self.assertEqual(len(r["step_s_each"]), r["steps"])
                self.assertTrue(math.isfinite(r["step_s"]) and r["step_s"] > 0)
                self.assertEqual(r["resident_step_s"], resident[r["tier"]]["step_s"])
                self.assertAlmostEqual(r["ratio_vs_resident"], r["step_s"] / r["resident_step_s"],
                                       delta=0.01 * r["ratio_vs_resident"] + 0.002)
                if r["trainer"] != "offload":
                    continue
                # the budget is a sixth of the parameters; one module may go over
                self.assertEqual(r["max_live_bytes"], int(r["param_bytes"] / 6))
                self.assertGreater(r["peak_live_param_bytes"], 0)
                self.assertLessEqual(r["peak_live_param_bytes"],
                                     r["max_live_bytes"] + r["largest_param_bytes"])
                self.assertLessEqual(r["peak_materialised_bytes"],
                                     r["max_live_bytes"] + r["largest_param_bytes"] + 4096)
                self.assertTrue(0.0 <= r["prefetch_hit_rate"] <= 1.0)
                self.assertEqual(r["prefetch_hit_rate"],
                                 round(r["prefetch_hits"] / (r["prefetch_hits"] + r["demand_fetches"]), 4))
                self.assertGreater(r["fetches"], 0)


if __name__ == "__main__":
    unittest.main()
