# SPDX-License-Identifier: MIT
"""spillway-bench torch --quick --json: one line per configuration with the
fields the issue asks for, each consistent with the others. No timings are
asserted: only that the figures exist, are finite and agree in kind."""
import json
import math
import os
import subprocess
import sys
import unittest

# The spillway-bench to run: the first argument (meson passes the one it
# built), else $SPILLWAY_BENCH, else PATH's.
BENCH = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else \
    os.environ.get("SPILLWAY_BENCH", "spillway-bench")
FIELDS = ("step_s", "opt_s", "torch_step_s", "ratio_vs_torch", "trainer_rss_bytes",
          "torch_rss_bytes", "daemon_locked_bytes", "daemon_region_bytes",
          "trainer_shmem_bytes", "footprint_bytes", "trainer_hwm_bytes", "torch_peak_bytes",
          "footprint_peak_bytes", "footprint_peak_vs_torch", "params", "tier", "mode", "loss")


class TorchBench(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run([BENCH, "torch", "--quick", "--json"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=280)
        cls.rc, cls.err = r.returncode, r.stderr
        cls.rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]

    def test_runs_every_configuration(self):
        self.assertEqual(self.rc, 0, self.err)
        got = sorted((r["optimizer"], r["tier"], r["mode"]) for r in self.rows)
        want = sorted([("torch.optim.AdamW", "none", "none")] +
                      [("OffloadAdamW", t, m) for t in ("cpu", "nvme")
                       for m in ("overlapped", "exact")])
        self.assertEqual(got, want)

    def test_fields_present_and_sane(self):
        torch_row = [r for r in self.rows if r["optimizer"] == "torch.optim.AdamW"][0]
        for r in self.rows:
            with self.subTest(tier=r["tier"], mode=r["mode"]):
                for f in FIELDS:
                    self.assertIn(f, r)
                self.assertEqual(len(r["step_s_each"]), r["steps"])
                for f in ("step_s", "opt_s", "torch_step_s", "ratio_vs_torch"):
                    self.assertTrue(math.isfinite(r[f]) and r[f] > 0, (f, r[f]))
                self.assertLessEqual(r["opt_s"], max(r["step_s_each"]))
                # The ratio is this row's step over torch's, in this run.
                self.assertEqual(r["torch_step_s"], torch_row["step_s"])
                self.assertAlmostEqual(r["ratio_vs_torch"], r["step_s"] / r["torch_step_s"],
                                       delta=0.01 * r["ratio_vs_torch"] + 0.002)
                self.assertEqual(r["torch_rss_bytes"], torch_row["trainer_rss_bytes"])
                self.assertEqual(r["torch_peak_bytes"], torch_row["trainer_hwm_bytes"])
                self.assertGreater(r["trainer_rss_bytes"], 0)
                self.assertGreater(r["trainer_cpu_s"], 0)
                self.assertTrue(math.isfinite(r["cpu_ratio_vs_torch"]) and r["cpu_ratio_vs_torch"] > 0)
                if r["optimizer"] == "OffloadAdamW":
                    self.assertGreaterEqual(r["daemon_cpu_s"], 0)
                    # libspillway's threads are named, so their CPU shows.
                    self.assertIn("spw-pool", r["trainer_threads_cpu_s"])
                self.assertEqual(r["params"], torch_row["params"])

    def test_memory_figures_are_spillways(self):
        for r in self.rows:
            if r["optimizer"] != "OffloadAdamW":
                self.assertEqual(r["daemon_region_bytes"], 0)
                continue
            with self.subTest(tier=r["tier"], mode=r["mode"]):
                region, held = r["daemon_region_bytes"], r["daemon_region_held_bytes"]
                # The cpu tier keeps p, m and v resident: at least 12 bytes
                # a parameter, held (only the unused tails of last pages go
                # back to the kernel); the nvme tier a window of pages.
                if r["tier"] == "cpu":
                    self.assertGreaterEqual(held, 12 * r["params"])
                self.assertGreater(held, 0)
                self.assertLessEqual(held, region)
                self.assertIn(r["daemon_locked_bytes"], (0, region))
                # The trainer maps the region, so its shared pages are part
                # of its RSS, and the footprint counts them once.
                self.assertGreater(r["trainer_shmem_bytes"], 0)
                self.assertEqual(r["footprint_bytes"],
                                 r["trainer_rss_bytes"] - r["trainer_shmem_bytes"] + held)
                # The peak is over the measured steps (reset after the
                # warm-up): never below what is held at the end, and the
                # region counted once, taken off at most as the trainer
                # mapped it at the end.
                self.assertGreaterEqual(r["trainer_hwm_bytes"], r["trainer_rss_bytes"])
                self.assertGreaterEqual(r["footprint_peak_bytes"],
                                        r["trainer_hwm_bytes"] - r["trainer_shmem_bytes"] + held)
                self.assertLessEqual(r["footprint_peak_bytes"], r["trainer_hwm_bytes"] + held)
                self.assertAlmostEqual(r["footprint_peak_vs_torch"],
                                       r["footprint_peak_bytes"] / r["torch_peak_bytes"], delta=0.0006)

    def test_same_training(self):
        # Same seed, data and AdamW (to an ulp): the last losses agree.
        losses = [r["loss"] for r in self.rows]
        for l in losses:
            self.assertTrue(math.isfinite(l))
            self.assertAlmostEqual(l, losses[0], delta=1e-4 * abs(losses[0]))


class TorchBenchVariants(unittest.TestCase):
    def test_variants_carry_their_environment(self):
        # "all": a trainer that says it computes on 4096 threads gets the
        # smallest pool libspillway makes; "plain" the default one.
        r = subprocess.run([BENCH, "torch", "--quick", "--json", "--tiers", "cpu", "--modes",
                            "overlapped", "--variant", "plain",
                            "--variant", "all:SPILLWAY_TRAINER_THREADS=4096"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=280)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {x["variant"]: x for x in map(json.loads, r.stdout.splitlines())
                if x["optimizer"] == "OffloadAdamW"}
        self.assertEqual(sorted(rows), ["all", "plain"])
        self.assertEqual(rows["all"]["env"], {"SPILLWAY_TRAINER_THREADS": "4096"})
        self.assertEqual(rows["plain"]["env"], {})
        # One worker, the engine and two copy streams at the least.
        self.assertEqual(rows["all"]["spw_threads_started"], 4)
        self.assertGreaterEqual(rows["plain"]["spw_threads_started"], 4)


class TorchBenchCli(unittest.TestCase):
    def test_help_names_the_fields(self):
        r = subprocess.run([BENCH, "torch", "--help"], stdout=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(r.returncode, 0)
        self.assertIn("ratio_vs_torch", r.stdout)

    def test_bad_option_fails(self):
        r = subprocess.run([BENCH, "torch", "--tiers", "ram"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ram", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
