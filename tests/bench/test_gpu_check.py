# SPDX-License-Identifier: MIT
"""scripts/gpu-check --dry-run: on a host without a GPU it plans the whole
GPU run, checks that what it needs is here and runs nothing; anything
missing makes it fail with a sentence naming the thing."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.normpath(os.path.join(HERE, "..", "..", "scripts", "gpu-check"))
# The build directory meson runs this test from (its spillway-bench is built).
BUILD = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None


def nvcc_present():
    n = os.environ.get("GPU_CHECK_NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return os.access(n, os.X_OK)


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([SCRIPT, "--dry-run"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=e, timeout=120)


class DryRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="spw-gpu-check-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_plans_everything_and_runs_nothing(self):
        bd = os.path.join(self.tmp, "build-gpu")
        r = run("--build-dir", bd)
        if not nvcc_present():
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn("nvcc", r.stdout)
            return
        self.assertEqual(r.returncode, 0, r.stdout)
        out = r.stdout
        self.assertIn("meson setup %s -Dbuildtype=debugoptimized -Dcuda=enabled" % bd, out)
        self.assertIn("meson test -C %s --setup gpu" % bd, out)
        for tier in ("resident", "nvme"):
            for mode in ("overlapped", "exact"):
                self.assertIn("pipeline --json --device cuda --tier %s --mode %s" % (tier, mode), out)
        self.assertIn("torch --json --device cuda", out)
        self.assertIn("nothing was run", out)
        self.assertFalse(os.path.exists(bd), "a dry run made the build directory")

    def test_missing_toolkit_is_named(self):
        missing = os.path.join(self.tmp, "no-cuda", "bin", "nvcc")
        r = run("--build-dir", os.path.join(self.tmp, "b"), env={"GPU_CHECK_NVCC": missing})
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn(missing, r.stdout)
        self.assertIn("nothing was run", r.stdout)

    def test_bad_python_is_named(self):
        fake = os.path.join(self.tmp, "python")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\nexit 1\n")
        os.chmod(fake, 0o755)
        r = run("--build-dir", os.path.join(self.tmp, "b"), env={"SPILLWAY_GPU_PYTHON": fake})
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("SPILLWAY_GPU_PYTHON=%s" % fake, r.stdout)

    @unittest.skipUnless(BUILD, "no build directory given")
    def test_checks_a_configured_build(self):
        # This test's own build: configured, with spillway-bench built, so
        # the checks of the bench's torch and --device features run.
        r = run("--build-dir", BUILD)
        self.assertIn("%s: configured, cuda=" % BUILD, r.stdout)
        self.assertNotIn("has no torch bench", r.stdout)
        self.assertNotIn("has no --device", r.stdout)
        if nvcc_present():
            self.assertEqual(r.returncode, 0, r.stdout)
            # An existing build is reconfigured, never wiped.
            self.assertIn("meson configure %s -Dcuda=enabled" % BUILD, r.stdout)

    def test_unknown_argument(self):
        r = run("--frobnicate")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--frobnicate", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
