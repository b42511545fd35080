"""Records the collective calls of one torch.distributed process as JSON lines for `normcheck collectives`.

Each call becomes one line, written and flushed *before* the call is issued, so a call that hangs is
still in the trace:

    {"rank": 0, "step": 3, "seq": 7, "op": "all_reduce", "tensor": "valid_tokens", "shape": [1],
     "dtype": "int64", "reduce_op": "sum"}

Use (Python standard library and torch only):

    recorder = CollectiveRecorder("trace.rank%d.jsonl" % rank)   # after init_process_group
    recorder.install()                  # wraps torch.distributed.all_reduce, broadcast, all_gather, ...
    ddp.register_comm_hook(None, recorder.allreduce_hook)   # DDP's gradient buckets, recorded
    for step in ...:
        recorder.step = step
        with recorder.label("valid_tokens"):
            dist.all_reduce(count)
        ...
    recorder.close()

DDP issues its gradient all-reduces from C++, out of reach of the Python wrappers; `allreduce_hook` is
DDP's default hook (divide by W, all-reduce) with a line recorded per bucket. The parameter broadcast
at DDP's construction is not seen. Calls made through names imported before `install()` (e.g.
`from torch.distributed import all_reduce`) are not seen either.
"""

import contextlib
import json

import torch
import torch.distributed as dist

_WRAPPED = {
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "barrier": "barrier",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "_all_gather_base": "all_gather",
    "_reduce_scatter_base": "reduce_scatter",
}

_REDUCE_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"]


def _reduce_op_name(op):
    for name in _REDUCE_OPS:
        known = getattr(dist.ReduceOp, name, None)
        if known is not None:
            try:
                if op == known:
                    return name.lower()
            except Exception:  # some torch versions cannot compare every kind of ReduceOp
                pass
    return str(op)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


class CollectiveRecorder:
    """Writes one JSON line per collective call of this process; see the module's documentation."""

    def __init__(self, path, rank=None, group_names=None):
        self.rank = dist.get_rank() if rank is None else rank
        self.step = 0
        self.seq = 0
        self._out = open(path, "w", encoding="utf-8")
        self._group_names = dict(group_names or {})  # process group -> name written as "group"
        self._label = None
        self._originals = {}

    @contextlib.contextmanager
    def label(self, name):
        """Names the tensor of the calls made inside the block."""
        previous, self._label = self._label, name
        try:
            yield
        finally:
            self._label = previous

    def record(self, op, tensor=None, reduce_op=None, group=None, root=None, name=None):
        """Writes one call; the wrappers and the DDP hook call this before issuing the call."""
        line = {"rank": self.rank, "step": self.step, "seq": self.seq, "op": op}
        if op != "barrier" or tensor is not None:
            line["tensor"] = name or self._label or "unnamed"
            line["shape"] = list(tensor.shape) if tensor is not None else []
            line["dtype"] = _dtype_name(tensor.dtype) if tensor is not None else ""
        if reduce_op is not None:
            line["reduce_op"] = _reduce_op_name(reduce_op)
        if group is not None and group in self._group_names:
            line["group"] = self._group_names[group]
        if root is not None:
            line["root"] = root
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()
        self.seq += 1

    def _wrap(self, name, op):
        original = getattr(dist, name)
        self._originals[name] = original
        recorder = self

        def recorded(*args, **kwargs):
            bound = _bind(name, args, kwargs)
            recorder.record(op, tensor=bound.get("tensor"), reduce_op=bound.get("op"), group=bound.get("group"),
                            root=bound.get("src"))
            return original(*args, **kwargs)

        recorded.__wrapped__ = original
        setattr(dist, name, recorded)

    def install(self):
        """Replaces the collectives of torch.distributed by recording wrappers."""
        for name, op in _WRAPPED.items():
            if hasattr(dist, name) and name not in self._originals:
                self._wrap(name, op)
        return self

    def uninstall(self):
        """Puts the original functions back."""
        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()

    def allreduce_hook(self, state, bucket):
        """DDP communication hook: records the bucket, then does what DDP's default hook does (divide by
        the group's size and all-reduce), through the original all_reduce so the call is recorded once."""
        group = state if state is not None else dist.group.WORLD
        tensor = bucket.buffer()
        self.record("all_reduce", tensor=tensor, reduce_op=dist.ReduceOp.SUM, group=state,
                    name="grad_bucket_%d" % bucket.index())
        tensor.div_(dist.get_world_size(group))
        all_reduce = self._originals.get("all_reduce", dist.all_reduce)
        future = all_reduce(tensor, group=group, async_op=True).get_future()
        return future.then(lambda done: done.value()[0])

    def close(self):
        """Flushes and closes the trace and removes the wrappers."""
        self.uninstall()
        self._out.close()


def _bind(name, args, kwargs):
    """The call's tensor, reduce op, group and root, whatever way they were passed."""
    positional = {
        "all_reduce": ["tensor", "op", "group"],
        "broadcast": ["tensor", "src", "group"],
        "all_gather": ["tensor_list", "tensor", "group"],
        "reduce_scatter": ["output", "input_list", "op", "group"],
        "barrier": ["group"],
        "all_gather_into_tensor": ["output_tensor", "input_tensor", "group"],
        "reduce_scatter_tensor": ["output", "input", "op", "group"],
        "_all_gather_base": ["output_tensor", "input_tensor", "group"],
        "_reduce_scatter_base": ["output", "input", "op", "group"],
    }[name]
    bound = dict(zip(positional, args))
    bound.update(kwargs)
    tensor = bound.get("tensor")
    if name == "reduce_scatter":
        tensor = bound.get("output")
    elif name in ("all_gather_into_tensor", "_all_gather_base"):
        tensor = bound.get("input_tensor")
    elif name in ("reduce_scatter_tensor", "_reduce_scatter_base"):
        tensor = bound.get("input")
    out = {"tensor": tensor if isinstance(tensor, torch.Tensor) else None, "group": bound.get("group"),
           "src": bound.get("src")}
    if name in ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base"):
        out["op"] = bound.get("op", dist.ReduceOp.SUM)
    return out
