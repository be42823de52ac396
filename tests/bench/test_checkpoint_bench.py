# SPDX-License-Identifier: MIT
"""spillway-bench checkpoint at a tiny size: one line per size with every
field the issue asks for, each of the right kind and sense (times
positive, ratios positive, whole stall steps, a stall time exactly when
steps were held up, torch.save's figures or the reason they are
missing), and the restart line with its stages in order; the work directory is gone afterwards. No timing is
asserted.

Usage: test_checkpoint_bench.py SPILLWAY_BENCH"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else \
    os.environ.get("SPILLWAY_BENCH", "spillway-bench")


class CheckpointBench(unittest.TestCase):
    def test_fields(self):
        base = tempfile.mkdtemp(prefix="spw-ckbench-", dir="/var/tmp")
        p = subprocess.run([BENCH, "checkpoint", "--json", "--sizes", "8", "--trials", "2", "--restart-mib", "8",
                            "--dir", base], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [json.loads(ln) for ln in p.stdout.splitlines()]
        self.assertEqual(len(lines), 2, p.stdout)
        ck, rs = lines
        self.assertEqual((ck["bench"], ck["tier"], ck["state_mib"], ck["trials"]), ("checkpoint", "nvme", 8, 2))
        for k in ("checkpoint_s", "cp_s", "step_s"):
            self.assertGreater(ck[k], 0, k)
        for k in ("commit_wait_s", "stall_s", "copied_in_kernel_bytes", "direct_bytes"):
            self.assertGreaterEqual(ck[k], 0, k)
        self.assertIsInstance(ck["stall_steps"], int)
        self.assertGreaterEqual(ck["stall_steps"], 0)
        self.assertEqual(ck["stall_s"] > 0, ck["stall_steps"] > 0)
        self.assertGreater(ck["ratio_vs_cp"], 0)
        if ck["torch_save"] == "ran":
            self.assertGreater(ck["torch_save_s"], 0)
            self.assertGreater(ck["ratio_vs_torch_save"], 0)
        else:
            self.assertTrue(ck["torch_save"].startswith("skipped"), ck["torch_save"])
            self.assertIsNone(ck["torch_save_s"])
            self.assertIsNone(ck["ratio_vs_torch_save"])
        self.assertEqual(rs["restart_mib"], 8)
        for k in ("stop_s", "start_s", "reattach_s", "restart_s"):
            self.assertGreater(rs[k], 0, k)
        self.assertLessEqual(rs["stop_s"], rs["start_s"])
        self.assertLessEqual(rs["start_s"], rs["reattach_s"])
        self.assertLessEqual(rs["reattach_s"], rs["restart_s"])
        self.assertEqual(os.listdir(base), [], "the bench left files behind")
        os.rmdir(base)


if __name__ == "__main__":
    unittest.main()
