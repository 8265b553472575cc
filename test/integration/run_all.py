#!/usr/bin/env python3
"""Runs the rpx integration tests.

    run_all.py                      every *_test.py next to this file
    run_all.py routing_test.py ...  only these files (".py" optional)
    run_all.py routing_test.RoutingTest.test_prefix_rewrite   one test (unittest name)

Writes JUnit XML to $XML_OUTPUT_FILE when set (Bazel does), one <testcase> per test. Exits 1 when
any test fails or errors.
"""

import glob
import os
import sys
import time
import traceback
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class RecordingResult(unittest.TextTestResult):
    """Keeps, per test: outcome, duration, message and details."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []
        self._start = {}

    def startTest(self, test):
        self._start[test.id()] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, err=None, message=""):
        start = self._start.pop(test.id(), None)
        duration = time.monotonic() - start if start is not None else 0.0
        details = ""
        if err is not None:
            details = "".join(traceback.format_exception(*err))
            if not message:
                message = "%s: %s" % (err[0].__name__, str(err[1]).splitlines()[0]
                                      if str(err[1]) else "")
        self.records.append({"id": test.id(), "outcome": outcome, "time": duration,
                             "message": message, "details": details})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", err)

    def addError(self, test, err):
        super().addError(test, err)
        # Errors in class/module fixtures come as _ErrorHolder "tests".
        self._record(test, "error", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", message=reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "expected_failure", err, message="expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failure", message="unexpected success (remove @expectedFailure)")


def write_junit(path, records, total_time):
    suites = {}
    for r in records:
        parts = r["id"].split(".")
        classname = ".".join(parts[:-1]) or parts[0]
        suites.setdefault(classname, []).append((parts[-1], r))
    root = ET.Element("testsuites", name="rpx-integration", time="%.3f" % total_time)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for classname, cases in suites.items():
        suite = ET.SubElement(root, "testsuite", name=classname)
        c = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        t = 0.0
        for name, r in cases:
            c["tests"] += 1
            t += r["time"]
            case = ET.SubElement(suite, "testcase", classname=classname, name=name,
                                 time="%.3f" % r["time"])
            if r["outcome"] == "failure":
                c["failures"] += 1
                el = ET.SubElement(case, "failure", message=r["message"], type="failure")
                el.text = r["details"]
            elif r["outcome"] == "error":
                c["errors"] += 1
                el = ET.SubElement(case, "error", message=r["message"], type="error")
                el.text = r["details"]
            elif r["outcome"] == "skipped":
                c["skipped"] += 1
                ET.SubElement(case, "skipped", message=r["message"])
            elif r["outcome"] == "expected_failure":
                out = ET.SubElement(case, "system-out")
                out.text = "expected failure (known rpx bug):\n" + r["details"]
        for k, v in c.items():
            suite.set(k, str(v))
            counts[k] += v
        suite.set("time", "%.3f" % t)
    for k, v in counts.items():
        root.set(k, str(v))
    tree = ET.ElementTree(root)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def load(names):
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    if not names:
        names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(HERE, "*_test.py")))
    for name in names:
        name = os.path.basename(name)
        if name.endswith(".py"):
            name = name[:-3]
        suite.addTests(loader.loadTestsFromName(name))
    return suite


def main(argv):
    verbosity = 2
    names = [a for a in argv if not a.startswith("-")]
    if "-q" in argv:
        verbosity = 1
    suite = load(names)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=verbosity,
                                     resultclass=RecordingResult)
    start = time.monotonic()
    result = runner.run(suite)
    total = time.monotonic() - start
    xml_path = os.environ.get("XML_OUTPUT_FILE")
    if xml_path:
        write_junit(xml_path, result.records, total)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
