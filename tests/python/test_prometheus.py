# SPDX-License-Identifier: MIT
"""A real Prometheus server scrapes spillwayd (issue 12): Debian's
prometheus, started on loopback with a 1 s scrape interval against the
daemon's metrics.listen, must report the target up and return, through
its own HTTP API, the series the daemon exports: the pool by state, and a
session's region bytes and committed step with the session's label.
"""
import ctypes
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import spwtest
import spillway
from spillway import _lib as L

PROMETHEUS = shutil.which("prometheus")


def free_port():
    """A port for Prometheus's own web server, which cannot report the one
    the kernel would pick: bound and closed here, a small race."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@unittest.skipIf(PROMETHEUS is None, "prometheus is not installed (Debian: prometheus; scripts/lib.sh installs it)")
class RealPrometheus(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=False, extra={"metrics": {"listen": "127.0.0.1:0"}})
        cls.port = spwtest.metrics_port(cls.d)
        cls.tmp = tempfile.mkdtemp(prefix="spw-prom-")
        cls.web = free_port()
        cfg = os.path.join(cls.tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: spillwayd\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % cls.port)
        cls.prom = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(cls.tmp, "data"),
             "--web.listen-address=127.0.0.1:%d" % cls.web, "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(cls.tmp, "prometheus.log"), "w"))
        # A session whose optimizer commits 3 steps: its series to find.
        cls.s = spillway.Session("prom/0", region_bytes=4 << 20, page_size=64 << 10, socket=cls.d.control)
        cls.opt = spillway.Optimizer(cls.s, [dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)],
                                     device="host")
        n = 4096
        cls.bufs = [(ctypes.c_float * n)() for _ in range(3)]
        t = cls.opt.add("w", 0, n, ctypes.addressof(cls.bufs[0]), ctypes.addressof(cls.bufs[1]), L.TYPE_F32)
        for step in range(1, 4):
            cls.opt.begin(step)
            cls.opt.grad_ready(t, ctypes.addressof(cls.bufs[2]), 4 * n, L.TYPE_F32)
            cls.opt.end()
        cls.opt.sync()

    @classmethod
    def tearDownClass(cls):
        cls.prom.terminate()
        try:
            cls.prom.wait(10)
        except subprocess.TimeoutExpired:
            cls.prom.kill()
        cls.opt.close()
        cls.s.close()
        cls.d.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def api(self, path, **q):
        url = "http://127.0.0.1:%d/api/v1/%s?%s" % (self.web, path, urllib.parse.urlencode(q))
        with urllib.request.urlopen(url, timeout=5) as r:
            doc = json.load(r)
        self.assertEqual(doc["status"], "success", doc)
        return doc["data"]

    def query(self, expr, deadline_s=30):
        """The query's result once Prometheus has scraped something for it."""
        end = time.monotonic() + deadline_s
        while True:
            self.assertIsNone(self.prom.poll(), "prometheus exited; see its log")
            try:
                res = self.api("query", query=expr)["result"]
                if res:
                    return res
            except OSError:
                pass  # not listening yet
            if time.monotonic() > end:
                self.fail("prometheus returned nothing for %s within %d s" % (expr, deadline_s))
            time.sleep(0.25)

    def test_target_up(self):
        up = self.query('up{job="spillwayd"} == 1')
        self.assertEqual(up[0]["metric"]["instance"], "127.0.0.1:%d" % self.port)
        targets = self.api("targets")["activeTargets"]
        self.assertEqual([t["health"] for t in targets], ["up"], targets)

    def test_series(self):
        states = {r["metric"]["state"] for r in self.query("spillway_pool_bytes")}
        self.assertEqual(states, {"used", "locked", "free"})
        region = self.query('spillway_session_region_bytes{session="prom/0"}')
        self.assertEqual(float(region[0]["value"][1]), 4 << 20)
        step = self.query('spillway_session_committed_step{session="prom/0"}')
        self.assertEqual(float(step[0]["value"][1]), 3)
        # The optimizer's own figures of its step: no clipping asked for.
        coef = self.query('spillway_session_clip_coefficient{session="prom/0"}')
        self.assertEqual(float(coef[0]["value"][1]), 1.0)
        adam = self.query('spillway_session_adam_seconds{session="prom/0"}')
        self.assertGreaterEqual(float(adam[0]["value"][1]), 0.0)
        info = self.query("spillway_build_info")
        self.assertEqual(info[0]["metric"]["version"], spillway.library_version())


if __name__ == "__main__":
    unittest.main()
