# SPDX-License-Identifier: MIT
"""bench/plot.py on recorded JSON lines (tests/bench/plot-lines/), with
matplotlib's Agg backend and no display: a PNG is written for each bench it
draws, one panel per bench; lines it cannot draw are refused with a message
and no file. Then spillway-bench --plot end to end on a tiny pipeline run
(with --trace, so the trace_overhead field is there too).

Usage: test_plot.py [SPILLWAY_BENCH]; the script is the one beside
SPILLWAY_BENCH when given (meson copies it there), else the source tree's."""
import atexit
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LINES = os.path.join(HERE, "plot-lines")
BENCH = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None
SCRIPT = os.path.join(os.path.dirname(BENCH), "plot.py") if BENCH else \
    os.path.join(HERE, "..", "..", "bench", "plot.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TMP = tempfile.mkdtemp(prefix="spw-plot-")
atexit.register(shutil.rmtree, TMP, True)


def env():
    e = dict(os.environ)
    e.pop("DISPLAY", None)
    e.pop("WAYLAND_DISPLAY", None)
    e.pop("MPLBACKEND", None)  # the script picks Agg itself
    e["MPLCONFIGDIR"] = os.path.join(TMP, "mpl")
    return e


def plot(*args, stdin=None):
    return subprocess.run(["/usr/bin/python3", SCRIPT] + list(args), input=stdin, capture_output=True,
                          text=True, env=env(), timeout=120)


def png_size(path):
    """(width, height) from the PNG's IHDR, after checking the magic."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_MAGIC, head[:8]
    assert head[12:16] == b"IHDR", head[12:16]
    return struct.unpack(">II", head[16:24])


class Plot(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=TMP)

    def out(self, name):
        return os.path.join(self.tmp, name)

    def assertPng(self, path):
        self.assertTrue(os.path.exists(path), path)
        self.assertGreater(os.path.getsize(path), 1000)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)
        return png_size(path)

    def test_each_bench(self):
        for bench in ("pipeline", "adam", "swap"):
            with self.subTest(bench=bench):
                out = self.out(bench + ".png")
                r = plot("--out", out, os.path.join(LINES, bench + ".jsonl"))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(f"2 results ({bench})", r.stderr)
                self.assertPng(out)

    def test_one_panel_per_bench(self):
        one, three = self.out("one.png"), self.out("three.png")
        files = [os.path.join(LINES, b + ".jsonl") for b in ("pipeline", "adam", "swap")]
        self.assertEqual(plot("--out", one, files[0]).returncode, 0)
        r = plot("--out", three, *files)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("6 results", r.stderr)
        w1, h1 = self.assertPng(one)
        w3, h3 = self.assertPng(three)
        self.assertGreater(h3, 2.5 * h1)

    def test_stdin(self):
        out = self.out("stdin.png")
        with open(os.path.join(LINES, "swap.jsonl")) as f:
            r = plot("--out", out, stdin=f.read())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertPng(out)

    def test_unknown_bench_refused(self):
        out = self.out("ring.png")
        ring = '{"bench":"ring","op":"nop","round_trips":1000,"p50_us":0.47}\n'
        with open(os.path.join(LINES, "pipeline.jsonl")) as f:
            r = plot("--out", out, stdin=f.read() + ring)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no plot for bench 'ring'", r.stderr)
        self.assertIn("pipeline, adam, swap", r.stderr)
        self.assertFalse(os.path.exists(out))
        r = plot("--out", out, stdin='{"op":"nop"}\n')
        self.assertEqual(r.returncode, 2)
        self.assertIn("no plot for bench None", r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_bad_lines_refused(self):
        out = self.out("bad.png")
        cases = {
            '{"bench":"pipeline", oops}\n': "stdin:1: not a JSON line",
            '{"bench":"swap","page_bytes":1048576}\n': "a swap line lacks sessions",
            "pipeline: overlapped resident, step 50 ms\n": "no spillway-bench JSON lines",
            "": "no spillway-bench JSON lines",
        }
        for text, msg in cases.items():
            with self.subTest(text=text):
                r = plot("--out", out, stdin=text)
                self.assertEqual(r.returncode, 2)
                self.assertIn(msg, r.stderr)
                self.assertFalse(os.path.exists(out))

    def test_can(self):
        for bench in ("pipeline", "adam", "swap"):
            self.assertEqual(plot("--can", bench).returncode, 0)
        r = plot("--can", "tenants")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no plot for bench 'tenants'", r.stderr)


@unittest.skipIf(BENCH is None, "no spillway-bench given")
class BenchPlot(unittest.TestCase):
    def run_bench(self, *args):
        return subprocess.run([BENCH] + list(args), capture_output=True, text=True, env=env(), timeout=240)

    def test_pipeline_plot(self):
        out = os.path.join(tempfile.mkdtemp(dir=TMP), "pipeline.png")
        r = self.run_bench("pipeline", "--trace", "--layers", "2", "--params", "65536", "--steps", "3",
                           "--fwd-ms", "0.5", "--plot", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        # stdout is the bench's JSON line, as with --json, and nothing else
        rows = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual(len(rows), 1, r.stdout)
        row = rows[0]
        self.assertEqual(row["bench"], "pipeline")
        self.assertGreater(row["trace_bytes"], 0)
        self.assertGreater(row["trace_step_s"], 0)
        self.assertGreater(row["trace_overhead"], 0)
        self.assertIn(f"{out}: 1 result (pipeline)", r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)
        self.assertGreater(os.path.getsize(out), 1000)

    def test_refused_before_running(self):
        out = os.path.join(tempfile.mkdtemp(dir=TMP), "ring.png")
        r = self.run_bench("ring", "--plot", out)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertIn("no plot for bench 'ring'", r.stderr)
        self.assertFalse(os.path.exists(out))
        r = self.run_bench("pipeline", "--plot")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--plot needs a file name", r.stderr)


if __name__ == "__main__":
    unittest.main()
