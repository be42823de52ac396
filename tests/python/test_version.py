# SPDX-License-Identifier: MIT
"""One version: the package's __version__, the library's spw_version(),
python/pyproject.toml's and meson's project version agree, and a library of another release is refused
at load with both versions named (never half-working calls)."""
import os
import re
import unittest

import spillway
from spillway import _lib as L


class Version(unittest.TestCase):
    def test_one_version(self):
        want = os.environ["SPILLWAY_PROJECT_VERSION"]
        self.assertEqual(spillway.__version__, want)
        self.assertEqual(spillway.library_version(), want)
        # and what `pip install ./python` installs as
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "python", "pyproject.toml")) as f:
            got = re.search(r'^version = "([^"]*)"', f.read(), re.M)
        self.assertIsNotNone(got, "python/pyproject.toml has no version line")
        self.assertEqual(got.group(1), want)

    def test_other_release_refused(self):
        saved = (L._lib, L._lib_path, L.VERSION)
        try:
            L._lib, L._lib_path, L.VERSION = None, None, "9.9.9"
            with self.assertRaises(ImportError) as cm:
                L.load()
            msg = str(cm.exception)
            self.assertIn("this spillway package is 9.9.9", msg)
            self.assertIn("is libspillway %s" % os.environ["SPILLWAY_PROJECT_VERSION"], msg)
        finally:
            L._lib, L._lib_path, L.VERSION = saved


if __name__ == "__main__":
    unittest.main()
