"""Runs normcheck check --junit on a folder and validates the XML: one test case per file."""
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

normcheck, folder, out = sys.argv[1:4]
files = sorted(pathlib.Path(folder).rglob("*.json"))
pathlib.Path(out).unlink(missing_ok=True)
subprocess.run([normcheck, "check", "--junit", out, folder], stdout=subprocess.DEVNULL, check=False)
root = ET.parse(out).getroot()
cases = list(root.iter("testcase"))
assert root.tag == "testsuites", root.tag
assert len(cases) == len(files), (len(cases), len(files))
assert sorted(c.get("name") for c in cases) == sorted(str(f) for f in files)
assert int(root.get("tests")) == len(files)
print(f"{len(cases)} test cases for {len(files)} files")
