"""The exact peers a Python user would write: json.load with every number an exact rational, then per
rank S_r = sum of (theta - y) over valid tokens, one rational addition (and gcd) per token, and the three
gradients global_mean, local_mean and scaled_sum. The rational is the standard library's
fractions.Fraction, or with --gmpy2 GMP's mpq through gmpy2 (Debian python3-gmpy2), the same arithmetic
normcheck uses. Hexadecimal strings are read with float.fromhex, which is exact for the float.hex()
strings the benchmark writes.

usage: python3 fraction_peer.py [--gmpy2] FILE
"""

import json
import sys
from fractions import Fraction

Rational = Fraction


def exact(value):
    if isinstance(value, str):
        if value.lstrip("-")[:2].lower() == "0x":
            return Rational(float.fromhex(value))
        return Rational(value)
    return Rational(value)


def main(path):
    with open(path, encoding="utf-8") as source:
        document = json.load(source, parse_float=Rational, parse_int=Rational)
    theta = exact(document.get("theta", 0))
    sums, counts = [], []
    for rank in document["ranks"]:
        microbatches = [rank["targets"]] if "targets" in rank else rank["microbatches"]
        total, valid = Rational(0), 0
        for tokens in microbatches:
            for y in tokens:
                if y is None:
                    continue
                total += theta - exact(y)
                valid += 1
        sums.append(total)
        counts.append(valid)
    world, tokens = len(sums), sum(counts)
    global_mean = sum(sums, Rational(0)) / tokens
    local_mean = sum((s / n for s, n in zip(sums, counts)), Rational(0)) / world if all(counts) else None
    scaled_sum = sum((world * s / tokens for s in sums), Rational(0)) / world
    print(f"global_mean {global_mean}")
    print(f"local_mean {local_mean}")
    print(f"scaled_sum {scaled_sum}")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments[:1] == ["--gmpy2"]:
        import gmpy2

        Rational = gmpy2.mpq
        arguments = arguments[1:]
    main(arguments[0])
