#!/usr/bin/env python3
"""Every --json and --junit report is valid JSON and well-formed XML, whatever the input and file names.

    reports_wellformed.py NORMCHECK

Files with names that are not UTF-8 (bytes FF FE), names with a terminal escape, keys and literals with
controls and non-characters (U+FFFE, U+FFFF), then a few hundred files of random bytes under random names:
Python's json and xml.etree must parse every report, the JSON must hold Unicode text only (no lone
surrogate) and give the file names back byte for byte (undoing the text report's escapes), the JUnit
names must decode back to them, and the text report must carry no control character that a terminal
acts on. Exit 0 passed, 1 failed.
"""

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xef\xbf[\xbe\xbf]")


def unescape_name(text):
    """The bytes a name escaped by the text, JSON and JUnit reports stands for: \\\\ is a backslash, \\xHH a byte,
    \\n \\t \\r controls, \\u{h} a code point."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        following = text[i + 1]
        if following == "\\":
            out += b"\\"
            i += 2
        elif following == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        elif following in "ntr":
            out += {"n": b"\n", "t": b"\t", "r": b"\r"}[following]
            i += 2
        elif following == "u":
            end = text.index("}", i)
            out += chr(int(text[i + 3:end], 16)).encode("utf-8", "surrogatepass")
            i = end + 1
        else:
            raise ValueError(f"unknown escape in {text!r}")
    return bytes(out)


def run(normcheck, folder, junit):
    report = subprocess.run([normcheck, "check", "--json", "--junit", junit, folder], capture_output=True, timeout=120)
    text = subprocess.run([normcheck, "check", folder], capture_output=True, timeout=120)
    return report, text


def judge(normcheck, folder, expected_names, failures, what):
    junit = os.path.join(os.path.dirname(folder), "report.xml")
    report, text = run(normcheck, folder, junit)
    if report.returncode not in (0, 1, 2) or text.returncode not in (0, 1, 2):
        failures.append(f"{what}: exit {report.returncode} / {text.returncode}: {report.stderr[-300:]!r}")
        return
    try:
        document = json.loads(report.stdout.decode("utf-8"))
    except ValueError as e:
        failures.append(f"{what}: --json does not parse: {e}")
        return
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        failures.append(f"{what}: --json holds a string that is not Unicode text (a lone surrogate): {e}")
        return
    names = {unescape_name(r["file"]) for r in document["reports"]}
    missing = [n for n in expected_names if n not in names]
    if missing:
        failures.append(f"{what}: --json does not give back the names {missing[:3]!r}")
    try:
        tree = ET.parse(junit)
    except ET.ParseError as e:
        failures.append(f"{what}: --junit is not well-formed XML: {e}")
        return
    try:
        junit_names = {unescape_name(case.get("name")) for case in tree.iter("testcase")}
    except (ValueError, IndexError) as e:
        failures.append(f"{what}: a JUnit name is not reversibly escaped: {e}")
        return
    missing = [n for n in expected_names if n not in junit_names]
    if missing:
        failures.append(f"{what}: the JUnit names do not decode back to {missing[:3]!r}")
    found = CONTROL.search(text.stdout) or CONTROL.search(text.stderr)
    if found:
        failures.append(f"{what}: the text report shows the raw control {found.group()!r}")


def write(folder, name, content):
    path = os.path.join(os.fsencode(folder), name)
    with open(path, "wb") as f:
        f.write(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def planted(normcheck, scratch, failures):
    folder = os.path.join(scratch, "planted")
    os.mkdir(folder)
    good = '{"format": "normcheck/1", "ranks": [{"targets": [1]}]}'
    paths = [
        write(folder, b"\xff\xfe.json", good),
        write(folder, b"esc\x1b[31mred.json", good),
        write(folder, b"back\\slash.json", good),
        write(folder, b"key.json", '{"format": "normcheck/1", "ranks": [{"targets": [1]}], "\\u001b[2J\\ufffe": 1}'),
        write(folder, b"literal.json",
              '{"format": "normcheck/1", "ranks": [{"targets": ["\\uffff\\u001b]0;x\\u0007"]}]}'),
        write(folder, b"description.json",
              '{"format": "normcheck/1", "description": "\\u001b[2J\\u009b31m\\ufffe", "ranks": [{"targets": [1]}]}'),
        write(folder, b"gate.json", '{"format": "normcheck/1", "ranks": [{"targets": [1]}], "observed": '
              '{"gradient": -1, "dtype": "exact"}, "expect_gate": '
              '{"verdict": "fail", "explanations": ["\\ufffe\\u001b"]}}'),
        write(folder, b"bytes.json", b'{"format": "normcheck/1", "ranks": [{"targets": [1]}], "\xff": 1}'),
    ]
    judge(normcheck, folder, paths, failures, "planted")


def random_files(normcheck, scratch, failures, count):
    generator = random.Random(20261201)
    folder = os.path.join(scratch, "random")
    os.mkdir(folder)
    pieces = ['{"format": "normcheck/1", "ranks": [{"targets": [', '1', '"\\ufffe"', '"\\u001b"', 'null', ']}]',
              ', "description": "', '\\u009b', '"', '}', '{', '"observed": {"gradient": "nan", "dtype": "float32"}',
              '\xff', '\x1b', '\ufeff', '"\\ud800"', '0x1p-3', '"-3/2"', ', "recipe": {"scale": "W / N\x1b"}']
    names = []
    for i in range(count):
        name = bytes(generator.choice([b for b in range(1, 256) if b != ord("/")])
                     for _ in range(generator.randint(1, 12)))
        name = name.replace(b".", b"_") + b".json"
        if name in names:
            continue
        content = "".join(generator.choice(pieces) for _ in range(generator.randint(1, 12)))
        write(folder, name, content.encode("utf-8", "surrogatepass"))
        names.append(os.path.join(os.fsencode(folder), name))
    judge(normcheck, folder, names, failures, f"{len(names)} random files")


def main():
    normcheck = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        planted(normcheck, scratch, failures)
        random_files(normcheck, scratch, failures, 300)
    for failure in failures:
        print("FAIL", failure)
    print("passed" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
