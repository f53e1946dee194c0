"""Quantizing the work units on every core: one process per core, each reading its own
tensors from the source files, results taken back in unit order. Every unit's values depend
only on its own tensors, so any number of processes writes the same bytes."""
import multiprocessing
import os

import numpy as np

from .errors import QuantizeError
from .formats import quantize_module
from .numbers import to_f32


def cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _weight(module, ref):
    """The f32 values [out, in] of a projection's stored weight, checked finite."""
    w = to_f32(ref.dtype, ref.load())
    if not (np.isfinite(w.min()) and np.isfinite(w.max())):  # NaN propagates; no mask array
        raise QuantizeError(f"{module}: the weight holds NaN or infinite values")
    return w


def quantize_unit(task):
    """task: (format, options, [(module, TensorRef)] of one input group). Returns the unit's
    ({name: (dtype, array)} quantized, {name: (dtype, array)} expected). One member's f32
    weight is held at a time (act-order reads each twice: norms, then codes), so a worker
    needs about one projection's f32 size: 0.9 GB for a 70B gate_proj."""
    fmt, opts, members = task
    members = sorted(members)
    norm = None
    if opts["act_order"] and fmt in ("gptq", "ct"):
        # The input group's column norms: sum of squares over its rows, in name order.
        sq = 0
        for module, ref in members:
            w = _weight(module, ref)
            sq = sq + (w * w).sum(axis=0)
        norm = np.sqrt(sq)
    out, expected = {}, {}
    for module, ref in members:
        o, e = quantize_module(fmt, module, _weight(module, ref), opts, norm)
        out.update(o)
        expected.update(e)
    return out, expected


def run(tasks, jobs):
    """Yields quantize_unit(task) for each task, in order, over `jobs` processes."""
    if jobs <= 1:
        yield from map(quantize_unit, tasks)
        return
    # fork: the workers need nothing but this module; each task names its tensors' files.
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap(quantize_unit, tasks, chunksize=1)
