"""Large documents read with --jobs 2 give exactly the reports of --jobs 1.

Each document is above the size from which the reader hands large token arrays to worker threads (1 MiB),
which read an array longer than two pieces (256 KiB each) in pieces cut at commas. The regular ones are
read in parallel; the others hold, somewhere in a large array, what only the sequential reader reads (a
fraction, a long significand, a malformed literal, a ']' inside a string, a nested array, a trailing comma,
a cut), or weights, or, where a piece is cut, a comma that does not separate two elements, so the
parallel read must give way to a sequential one with the same verdict, error code and position. Text and
JSON reports and exit statuses are compared byte for byte.

usage: python3 parallel_differential.py NORMCHECK
"""

import os
import random
import subprocess
import sys
import tempfile


def tokens(rng, count, shape):
    out = []
    for _ in range(count):
        if rng.random() < 0.05:
            out.append("null")
        elif shape == "hex":
            out.append('"' + rng.gauss(0, 2).hex() + '"')
        elif shape == "short":
            out.append(f"{rng.gauss(0, 2):.6f}")
        elif shape == "exp":
            out.append(f"{rng.gauss(0, 2):.6e}")
        elif shape == "int":
            out.append(str(round(rng.gauss(0, 2) * 1000)))
        else:
            out.append(repr(rng.gauss(0, 2)))
    return out


def document(rng, shape="dec", ranks=4, per_rank=40000, microbatches=1, plant=None, weights=False):
    """A normcheck/1 document; `plant` replaces one token in the middle of rank 1 by its text."""
    parts = []
    for r in range(ranks):
        values = tokens(rng, per_rank, shape)
        if plant is not None and r == 1:
            values[len(values) // 2] = plant
        size = len(values) // microbatches
        groups = [values[i * size:(i + 1) * size] for i in range(microbatches)]
        arrays = ["[" + ", ".join(g) + "]" for g in groups]
        if weights:
            w = ["[" + ", ".join("null" if v == "null" else ("2", "1", "0.5")[i % 3] for i, v in enumerate(g)) + "]"
                 for g in groups]
            parts.append('{"microbatches": [' + ", ".join(arrays) + '], "weights": [' + ", ".join(w) + "]}")
        elif microbatches == 1:
            parts.append('{"targets": ' + arrays[0] + "}")
        else:
            parts.append('{"microbatches": [' + ",\n ".join(arrays) + "]}")
    objective = '"objective": "weighted_token_mean", ' if weights else ""
    return ('{"format": "normcheck/1", "reducer": "mean", "theta": "1/3", ' + objective +
            '"ranks": [\n' + ",\n".join(parts) + "\n]}\n")


def with_first_rank(text, targets):
    """`text` with a rank whose targets are `targets` listed first."""
    return text.replace('"ranks": [\n', '"ranks": [\n{"targets": ' + targets + "},\n", 1)


def main(normcheck):
    rng = random.Random(20261201)
    documents = {
        "regular_dec": document(rng),
        "regular_hex_microbatches": document(rng, "hex", microbatches=8),
        "regular_short_many_ranks": document(rng, "short", ranks=64, per_rank=4000),
        "spaced_and_negative_zero": document(rng, plant="-0 ,\n\t 1E+2 ,\r\n -0.0e-0").replace(", ", " ,\n "),
        "fraction_in_a_large_array": document(rng, plant='"1/3"'),
        "long_significand": document(rng, plant="1.2345678901234567890123456789"),
        "malformed_literal": document(rng, plant="1.2.3"),
        "bracket_inside_a_string": document(rng, plant='"1]"'),
        "nested_array": document(rng, plant="[2]"),
        "object_in_an_array": document(rng, plant='{"a": 1}'),
        "trailing_comma": document(rng).replace("]}", ",]}", 1),
        "weighted": document(rng, microbatches=2, weights=True),
        "weighted_key_escaped": document(rng, microbatches=2, weights=True).replace('"weights"', '"weight\\u0073"'),
        "digit_limit_reached": document(rng, plant='"1e-9000"'),
        "expected_error_met": document(rng, plant="1.2.3").replace('"reducer"',
                                                                   '"expect_error": "bad_number", "reducer"'),
        "regular_two_ranks_in_pieces": document(rng, ranks=2, per_rank=150000),
        "regular_exp": document(rng, "exp", ranks=2),
        "regular_int_in_pieces": document(rng, "int", ranks=2, per_rank=200000),
        # A piece ends at the first comma 256 KiB on: these commas are the cut, and none separates two elements.
        "trailing_comma_at_a_cut": with_first_rank(document(rng), "[1" + " " * 600000 + ",]"),
        "empty_element_at_a_cut": with_first_rank(document(rng), "[1" + " " * 600000 + ",, 2]"),
        "leading_comma_at_a_cut": with_first_rank(document(rng), "[" + " " * 600000 + ", 1]"),
        "comma_inside_a_string_at_a_cut": with_first_rank(document(rng), '["1' + "1" * 600000 + ',2"]'),
        "regular_spaced_at_a_cut": with_first_rank(document(rng), "[1" + " " * 600000 + ", 2]"),
    }
    regular = document(rng)
    documents["cut_off"] = regular[: len(regular) * 2 // 3]
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        for name, text in documents.items():
            path = os.path.join(folder, name + ".json")
            with open(path, "w") as out:
                out.write(text)
            assert os.path.getsize(path) > (1 << 20), name
            for flags in ([], ["--json"], ["--max-exact-digits", "20000"]):
                runs = [subprocess.run([normcheck, "check", "--jobs", str(jobs)] + flags + [path],
                                       capture_output=True) for jobs in (1, 2)]
                same = runs[0].returncode == runs[1].returncode and runs[0].stdout == runs[1].stdout
                first_line = runs[0].stdout.decode(errors="replace").splitlines()[0][:150]
                print(f"{'same' if same else 'DIFFERENT'} {name} {' '.join(flags)}: exit {runs[0].returncode}; "
                      f"{first_line}")
                if not same:
                    failures += 1
    if failures:
        sys.exit(f"{failures} runs differ between --jobs 1 and --jobs 2")


if __name__ == "__main__":
    main(sys.argv[1])
