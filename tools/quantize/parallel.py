"""Quantizing the work units on every core: one process per core, each reading its own
tensors from the source files, results taken back in unit order. Every unit's values depend
only on its own tensors, so any number of processes writes the same bytes."""
import multiprocessing
import os

import numpy as np

from .errors import QuantizeError
from .formats import check_shape, quantize_module
from .numbers import to_f32


def cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def quantize_unit(task):
    """task: (format, options, [(module, TensorRef)] of one input group). Returns the unit's
    ({name: (dtype, array)} quantized, {name: (dtype, array)} expected)."""
    fmt, opts, members = task
    weights = {}
    for module, ref in members:
        check_shape(fmt, module, ref.shape, opts)
        weights[module] = to_f32(ref.dtype, ref.load())
        if not np.isfinite(weights[module]).all():
            raise QuantizeError(f"{module}: the weight holds NaN or infinite values")
    norm = None
    if opts["act_order"] and fmt in ("gptq", "ct"):
        # The input group's column norms: sum of squares over its rows, in name order.
        sq = 0
        for module in sorted(weights):
            sq = sq + (weights[module] * weights[module]).sum(axis=0)
        norm = np.sqrt(sq)
    out, expected = {}, {}
    for module in sorted(weights):
        o, e = quantize_module(fmt, module, weights[module], opts, norm)
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
