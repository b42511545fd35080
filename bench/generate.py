"""Writes normcheck/1 partition files for the benchmark: token values as a dump would hold them.

Decimal files hold Python's shortest round-trip repr of float64 values (what json.dump writes);
hexadecimal files hold float.hex() strings, which keep a float's exact value; short-decimal files hold
six decimal places (-6.850595), as a dump rounded for reading would; exponent files hold seven
significant digits in scientific notation (-6.850595e+00, printf's %e); integer files hold the value in
thousandths as an integer (-6851), as a dump of scaled or integer targets would. About 5% of positions
are padding (null). Files are written once and reused while their name and size match.
"""

import os
import random
import zlib

GENERATOR_VERSION = 1


def file_name(tokens, ranks, microbatches, literal):
    layout = "flat" if microbatches == 1 else f"mb{microbatches}"
    millions = tokens // 1_000_000
    return f"t{millions}M_r{ranks}_{layout}_{literal}.json"


def write_partition(path, tokens, ranks, microbatches, literal, seed):
    """Deals `tokens` positions to `ranks` ranks (uneven shares) and `microbatches` per rank."""
    rng = random.Random(seed)
    # Uneven shares: each rank gets a random weight, so local means differ from the global mean.
    weights = [rng.uniform(0.5, 1.5) for _ in range(ranks)]
    total = sum(weights)
    counts = [int(tokens * w / total) for w in weights]
    counts[-1] += tokens - sum(counts)
    gauss = rng.gauss
    fmt = {"dec": repr, "hex": lambda v: '"' + v.hex() + '"', "short": lambda v: f"{v:.6f}",
           "exp": lambda v: f"{v:.6e}", "int": lambda v: str(round(v * 1000))}[literal]
    tmp = path + ".part"
    with open(tmp, "w", buffering=1 << 20) as out:
        out.write('{\n  "format": "normcheck/1",\n')
        out.write(f'  "description": "benchmark: {tokens} positions, {ranks} ranks, '
                  f'{microbatches} microbatch(es) per rank, {literal} literals",\n')
        out.write(f'  "world_size": {ranks},\n  "reducer": "mean",\n  "theta": 0.5,\n  "ranks": [\n')
        for r, count in enumerate(counts):
            per = [count // microbatches] * microbatches
            per[-1] += count - sum(per)
            groups = []
            for n in per:
                values = []
                chunk = 4096
                for start in range(0, n, chunk):
                    m = min(chunk, n - start)
                    values.extend("null" if rng.random() < 0.05 else fmt(gauss(0.0, 2.0)) for _ in range(m))
                groups.append("[" + ", ".join(values) + "]")
            if microbatches == 1:
                body = '{"targets": ' + groups[0] + "}"
            else:
                body = '{"microbatches": [' + ", ".join(groups) + "]}"
            out.write("    " + body + (",\n" if r + 1 < ranks else "\n"))
        out.write("  ]\n}\n")
    os.replace(tmp, path)


def ensure(directory, tokens, ranks, microbatches, literal):
    """The path of the file with these parameters, written first if missing."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"v{GENERATOR_VERSION}_" + file_name(tokens, ranks, microbatches, literal))
    if not os.path.exists(path):
        seed = zlib.crc32(os.path.basename(path).encode())
        write_partition(path, tokens, ranks, microbatches, literal, seed)
    return path
