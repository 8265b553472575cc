#!/usr/bin/env python3
"""Counts test cases in Bazel's test.xml files and prints 'N passed, N failed'.

Exit status 1 when any case failed or no case ran at all."""
import os
import sys
import xml.etree.ElementTree as ET


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs"
    passed = failed = skipped = 0
    failed_names = []
    for dirpath, _, files in os.walk(root, followlinks=True):
        if "test.xml" not in files:
            continue
        try:
            tree = ET.parse(os.path.join(dirpath, "test.xml"))
        except ET.ParseError:
            failed += 1
            failed_names.append(dirpath)
            continue
        for case in tree.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failed_names.append(f"{os.path.relpath(dirpath, root)}: {case.get('name')}")
            elif case.find("skipped") is not None or case.get("status") == "notrun":
                skipped += 1
            else:
                passed += 1
    for name in failed_names:
        print(f"FAILED: {name}")
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
