"""Dump one data-parallel update as a normcheck/1 partition file.

Every rank calls `dump_update` after its backward pass, with the targets it held, the synchronized
gradient it holds, and the token counts its code divided by. The ranks' parts travel to one rank
through torch.distributed itself (so the file shows what each process really had), and that rank
writes the file atomically: a reader finds either the whole document under its final name or
nothing there.

Values are written with float.hex(), which is exact: a float32 element converted to a Python float
keeps its value, so normcheck reads exactly the numbers the program held.

Standard library plus torch.distributed (only `dump_update` needs it).
"""

import json
import os
import time

FORMAT = "normcheck/1"


def exact(value):
    """The exact text of a float value, as float.hex() prints it ("0x1.8000000000000p+0")."""
    return float(value).hex()


def token_values(targets, valid):
    """One microbatch as the program held it: each target's exact value, None where it is not valid.

    `targets` and `valid` are sequences of the same length (tensors are converted with tolist()).
    """
    targets = targets.tolist() if hasattr(targets, "tolist") else list(targets)
    valid = valid.tolist() if hasattr(valid, "tolist") else list(valid)
    if len(targets) != len(valid):
        raise ValueError(f"{len(targets)} targets but {len(valid)} validity flags")
    return [exact(t) if v else None for t, v in zip(targets, valid)]


def rank_part(microbatches, gradient, counted_tokens=None, weights=None, counted_mass=None):
    """What one rank contributes to the dump.

    microbatches: list of (targets, valid) pairs, in the order the rank accumulated them.
    gradient: the rank's synchronized gradient after the all-reduce (a float or a 1-element tensor).
    counted_tokens: the valid-token count the rank's code computed for itself, if it computed one.
    weights: for a weighted objective, one sequence of token weights per microbatch (tensors or lists).
    counted_mass: the weight sum the rank's code computed for itself, if it computed one.
    """
    if hasattr(gradient, "item"):
        gradient = gradient.item()
    part = {
        "microbatches": [token_values(t, v) for t, v in microbatches],
        "gradient": exact(gradient),
        "counted_tokens": None if counted_tokens is None else int(counted_tokens),
    }
    if weights is not None:
        part["weights"] = [token_values(w, v) for w, (_, v) in zip(weights, microbatches)]
        part["counted_mass"] = None if counted_mass is None else exact(counted_mass)
    return part


def build_document(parts, *, reducer, theta, dtype, global_tokens=None, global_mass=None, description=""):
    """The normcheck/1 document (a dict) of one update from every rank's part, in rank order.

    reducer: "mean" (DDP's default) or "sum" (a communication hook that sums without dividing).
    theta: the parameter value the gradient was computed at.
    dtype: "float32" or "float64", the arithmetic of the gradient.
    global_tokens: the N the code divided by, when it used a global count.
    global_mass: the M the code divided by, when it used a global weight sum.
    Parts with weights make a weighted_token_mean document.
    """
    if reducer not in ("mean", "sum"):
        raise ValueError(f"reducer must be 'mean' or 'sum', not {reducer!r}")
    weighted = any("weights" in part for part in parts)
    if weighted and not all("weights" in part for part in parts):
        raise ValueError("some ranks gave weights and some did not")
    ranks = []
    for part in parts:
        batches = part["microbatches"]
        rank = {"targets": batches[0]} if len(batches) == 1 else {"microbatches": batches}
        if weighted:
            rank["weights"] = part["weights"][0] if len(batches) == 1 else part["weights"]
        ranks.append(rank)
    observed = {"per_rank": [part["gradient"] for part in parts], "dtype": dtype}
    tokens = {}
    if global_tokens is not None:
        tokens["global"] = int(global_tokens)
    counts = [part["counted_tokens"] for part in parts]
    if all(count is not None for count in counts):
        tokens["per_rank"] = counts
    if tokens:
        observed["tokens"] = tokens
    mass = {}
    if global_mass is not None:
        mass["global"] = exact(global_mass)
    masses = [part.get("counted_mass") for part in parts]
    if weighted and all(m is not None for m in masses):
        mass["per_rank"] = masses
    if mass:
        observed["mass"] = mass
    document = {"format": FORMAT}
    if description:
        document["description"] = description
    if weighted:
        document["objective"] = "weighted_token_mean"
    document.update({"ranks": ranks, "world_size": len(parts), "reducer": reducer, "theta": exact(theta),
                     "observed": observed})
    return document


def render(document):
    """The document as text: one member per line, one rank per line."""
    lines = []
    for key, value in document.items():
        if key == "ranks":
            ranks = ",\n".join("    " + json.dumps(rank) for rank in value)
            lines.append(f'  "ranks": [\n{ranks}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_atomically(path, text, pause_mid_write=0.0):
    """Writes `text` to `path` so that `path` never holds part of it.

    The text goes to a temporary in the same folder (whose name does not end in .json, so a folder
    scan skips it), is flushed and fsynced, and then renamed over `path` with os.replace, which is
    atomic on POSIX file systems; the folder is fsynced so that the rename itself is durable.
    pause_mid_write (seconds) sleeps after half of the text is on disk: a way to interrupt a run
    inside the write and see that nothing appears under the final name.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    data = text.encode("utf-8")
    try:
        with open(temporary, "wb") as f:
            if pause_mid_write > 0:
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                time.sleep(pause_mid_write)
                f.write(data[len(data) // 2:])
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def dump_update(path, *, microbatches, gradient, theta, dtype, reducer="mean", counted_tokens=None,
                global_tokens=None, weights=None, counted_mass=None, global_mass=None, description="", dst=0,
                group=None, pause_mid_write=0.0):
    """Collective: every rank of the group calls it; rank `dst` gathers every part and writes `path`.

    See rank_part and build_document for the arguments. Returns the document on `dst`, None elsewhere.
    """
    import torch.distributed as dist

    part = rank_part(microbatches, gradient, counted_tokens, weights, counted_mass)
    rank = dist.get_rank(group)
    parts = [None] * dist.get_world_size(group) if rank == dst else None
    dist.gather_object(part, parts, dst=dst, group=group)
    if rank != dst:
        return None
    document = build_document(parts, reducer=reducer, theta=theta, dtype=dtype, global_tokens=global_tokens,
                              global_mass=global_mass, description=description)
    write_atomically(path, render(document), pause_mid_write=pause_mid_write)
    return document
