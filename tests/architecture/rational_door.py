#!/usr/bin/env python3
"""The one door: nothing but core/rational builds a rational from text or from a numerator and a denominator.

    rational_door.py ROOT               scan include/ and src/ under ROOT; exit 0 when only the door does
    rational_door.py ROOT --self-test   plant each kind of bypass in a copy of the tree and require it caught

Boost's mpq_rational keeps "2/4" as 2/4 when built from a string (Boost 1.74), and GMP's mpq_set_* leave
canonicalizing to the caller, so a rational built that way breaks the invariant every function assumes
(core/rational.hpp). core/rational.cpp holds the door: parse_literal / read_number for text, fraction for
parts. Everywhere else this finds
  - a rational constructed from a string ( rational("2/4"), rational x{"1/3"}, rational x = "1/2" ),
  - a rational constructed from two values ( rational(1, 4), rational x{p, q}, rational x(p, q) ),
  - the GMP and Boost calls that set parts without canonicalizing (mpq_set_str, mpq_set_num, mpq_set_den,
    mpq_set_ui, mpq_set_si, assign_components), and the Boost type named directly (mpq_rational).
"""

import os
import re
import shutil
import sys
import tempfile

DOOR = os.path.join("src", "core", "rational.cpp")
ALIAS = os.path.join("include", "normcheck", "core", "rational.hpp")
RAW_CALLS = re.compile(r"\b(mpq_set_str|mpq_set_num|mpq_set_den|mpq_set_ui|mpq_set_si|assign_components)\b")
BOOST_TYPE = re.compile(r"\bmpq_rational\b")
CONSTRUCTION = re.compile(r"\brational\s*(?:(\w+)\s*)?([({])")
ASSIGNED_TEXT = re.compile(r"\brational\s+\w+\s*=\s*(\"|std::string)")
PARAMETER = re.compile(r"^\s*(const\s+)?[\w:<>]+(\s*<[^()]*>)?\s*[&*]*\s*\w+\s*(=.*)?$")


def strip_comments_and_strings(text):
    """The text with comments blanked and string contents replaced by a marker, lengths kept."""
    out = []
    i = 0
    while i < len(text):
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = len(text) if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif text[i] == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + "s" * (j - i - 1) + '"')
            i = j + 1
        elif text[i] == "'":
            j = i + 1
            while j < len(text) and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def arguments(text, open_at):
    """The top-level arguments of the bracket that opens at `open_at`, or None when it does not close."""
    closing = {"(": ")", "{": "}"}[text[open_at]]
    depth = 0
    args = []
    current = []
    for i in range(open_at, len(text)):
        c = text[i]
        if c in "({[":
            depth += 1
            if depth == 1:
                continue
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                if c != closing:
                    return None
                args.append("".join(current))
                return [a for a in args if a.strip()] if len(args) > 1 or args[0].strip() else []
        if depth == 1 and c == ",":
            args.append("".join(current))
            current = []
        else:
            current.append(c)
    return None


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def violations(root):
    """Every bypass of the door, as 'file:line: what'."""
    found = []
    for top in ("include", "src"):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp")):
                    continue
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root)
                if relative == DOOR:
                    continue
                with open(path, encoding="utf-8") as source:
                    text = strip_comments_and_strings(source.read())
                for match in RAW_CALLS.finditer(text):
                    found.append(f"{relative}:{line_of(text, match.start())}: {match.group(1)} sets a rational's parts "
                                 "without canonicalizing: use fraction() or read_number()")
                if relative != ALIAS:
                    for match in BOOST_TYPE.finditer(text):
                        found.append(f"{relative}:{line_of(text, match.start())}: "
                                     "names mpq_rational: use normcheck::rational")
                for match in ASSIGNED_TEXT.finditer(text):
                    found.append(f"{relative}:{line_of(text, match.start())}: "
                                 "a rational assigned from text: use read_number()")
                for match in CONSTRUCTION.finditer(text):
                    args = arguments(text, match.start(2))
                    if not args:
                        continue
                    named, bracket = match.group(1), match.group(2)
                    # `rational name(type a, type b)` declares a function; anything else builds a rational.
                    if named is not None and bracket == "(" and all(PARAMETER.match(a) for a in args):
                        continue
                    where = f"{relative}:{line_of(text, match.start())}"
                    first = args[0].strip()
                    if first.startswith('"') or first.startswith("std::string"):
                        found.append(f"{where}: a rational built from text: use read_number()")
                    elif len(args) >= 2:
                        found.append(f"{where}: a rational built from a numerator and a denominator: use fraction()")
    return found


def self_test(root):
    """Plants each bypass in a copy of the tree; every one must be caught, and the clean tree must pass."""
    plants = {
        "string": 'normcheck::rational planted_a() { return normcheck::rational("2/4"); }\n',
        "braced string": 'void planted_b() { normcheck::rational x{"1/3"}; (void)x; }\n',
        "assigned string": 'void planted_c() { normcheck::rational x = "1/2"; (void)x; }\n',
        "two values": "normcheck::rational planted_d() { return normcheck::rational(2, 4); }\n",
        "named two values": "void planted_e(long p, long q) { normcheck::rational x(p + 1, q); (void)x; }\n",
        "braced two values": "void planted_f() { normcheck::rational x{2, 4}; (void)x; }\n",
        "mpq_set_str": "void planted_g(mpq_t q) { mpq_set_str(q, \"2/4\", 10); }\n",
        "mpq_set_num": "void planted_h(mpq_t q, mpz_t z) { mpq_set_num(q, z); }\n",
        "boost type": "boost::multiprecision::mpq_rational planted_i();\n",
    }
    if violations(root):
        print("self-test: the tree itself has violations; run without --self-test first")
        return 1
    missed = []
    for what, line in plants.items():
        copy = tempfile.mkdtemp(prefix="normcheck-door-")
        try:
            for top in ("include", "src"):
                shutil.copytree(os.path.join(root, top), os.path.join(copy, top))
            target = os.path.join(copy, "src", "gate", "suggest.cpp")
            with open(target, "a", encoding="utf-8") as out:
                out.write("\n" + line)
            if not violations(copy):
                missed.append(what)
        finally:
            shutil.rmtree(copy)
    # A function declared with two parameters is not a construction.
    copy = tempfile.mkdtemp(prefix="normcheck-door-")
    try:
        for top in ("include", "src"):
            shutil.copytree(os.path.join(root, top), os.path.join(copy, top))
        with open(os.path.join(copy, "src", "gate", "suggest.cpp"), "a", encoding="utf-8") as out:
            out.write("\nrational planted_function(const rational& a, std::uint64_t b);\n")
        if violations(copy):
            missed.append("a false alarm on a function declaration")
    finally:
        shutil.rmtree(copy)
    if missed:
        print("self-test: not caught: " + ", ".join(missed))
        return 1
    print(f"self-test: all {len(plants)} planted bypasses caught, a declaration left alone")
    return 0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    root = sys.argv[1]
    if "--self-test" in sys.argv[2:]:
        return self_test(root)
    found = violations(root)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} rational(s) built outside the door (src/core/rational.cpp)")
        return 1
    print("every rational built from text or parts goes through src/core/rational.cpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
