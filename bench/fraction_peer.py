"""The textbook exact peer: json.load with every number a fractions.Fraction, then per rank
S_r = sum of (theta - y) over valid tokens, one Fraction addition (and gcd) per token, and the three
gradients global_mean, local_mean and scaled_sum. Hexadecimal strings are read with float.fromhex,
which is exact for the float.hex() strings the benchmark writes.

usage: python3 fraction_peer.py FILE
"""

import json
import sys
from fractions import Fraction


def exact(value):
    if isinstance(value, str):
        if value.lstrip("-")[:2].lower() == "0x":
            return Fraction(float.fromhex(value))
        return Fraction(value)
    return Fraction(value)


def main(path):
    with open(path, encoding="utf-8") as source:
        document = json.load(source, parse_float=Fraction, parse_int=Fraction)
    theta = exact(document.get("theta", 0))
    sums, counts = [], []
    for rank in document["ranks"]:
        microbatches = [rank["targets"]] if "targets" in rank else rank["microbatches"]
        total, valid = Fraction(0), 0
        for tokens in microbatches:
            for y in tokens:
                if y is None:
                    continue
                total += theta - exact(y)
                valid += 1
        sums.append(total)
        counts.append(valid)
    world, tokens = len(sums), sum(counts)
    global_mean = sum(sums, Fraction(0)) / tokens
    local_mean = sum((s / n for s, n in zip(sums, counts)), Fraction(0)) / world if all(counts) else None
    scaled_sum = sum((world * s / tokens for s in sums), Fraction(0)) / world
    print(f"global_mean {global_mean}")
    print(f"local_mean {local_mean}")
    print(f"scaled_sum {scaled_sum}")


if __name__ == "__main__":
    main(sys.argv[1])
