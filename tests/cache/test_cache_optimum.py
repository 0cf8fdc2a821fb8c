"""Belady's dynamic optimum and the best static cache on small traces with hits counted by hand."""
import numpy as np

from conveyor.cache.optimum import belady_hits, flat_trace, next_reads, static_optimum_hits

# Rows 1, 2, 3 each read twice in a row: a static cache of one row keeps one of them (2 hits);
# MIN swaps to each row when it is read (warm: 4 hits; empty at the start: 3).
RUNS = [[1], [1], [2], [2], [3], [3]]


def test_next_reads_by_reverse_scan():
    flat, batch = flat_trace([[5, 1], [1, 7], [5], [1]])
    assert flat.tolist() == [5, 1, 1, 7, 5, 1]
    assert batch.tolist() == [0, 0, 1, 1, 2, 3]
    # 5 next read at batch 2, then never (4); 1 at 1, then 3, then never; 7 never.
    assert next_reads(flat, batch, 4).tolist() == [2, 1, 3, 4, 4, 4]


def test_belady_swaps_where_static_cannot():
    assert static_optimum_hits(RUNS, 1) == 2
    assert belady_hits(RUNS, 1).tolist() == [1, 1, 0, 1, 0, 1]
    assert belady_hits(RUNS, 1, warm=False).tolist() == [0, 1, 0, 1, 0, 1]


def test_belady_evicts_the_furthest_next_read():
    # Capacity 2. Batch 1 brings 3 beside 1 and 2: 1 (next read at 3) goes, 2 and 3 (both at 2) stay.
    trace = [[1, 2], [3, 1], [2, 3], [1, 2]]
    assert belady_hits(trace, 2, warm=False).tolist() == [0, 1, 2, 1]
    assert belady_hits(trace, 2).tolist() == [2, 1, 2, 1]
    assert static_optimum_hits(trace, 2) == 6  # rows 1 and 2, read 3 times each


def test_belady_bounds_on_a_random_trace():
    rng = np.random.default_rng(0)
    # A skewed trace: 40 batches of up to 50 distinct rows of 1,000, low ids read most.
    trace = [np.unique((rng.pareto(1.2, 50) * 20).astype(np.int64) % 1000) for _ in range(40)]
    reads = sum(len(b) for b in trace)
    distinct = len(np.unique(np.concatenate(trace)))
    for capacity in (0, 10, 100, distinct):
        belady, static = int(belady_hits(trace, capacity).sum()), static_optimum_hits(trace, capacity)
        assert belady >= static
        assert belady <= reads
    assert int(belady_hits(trace, 0).sum()) == 0
    # Room for every row: warm, every read hits; empty, all but each row's first read.
    assert int(belady_hits(trace, distinct).sum()) == reads
    assert int(belady_hits(trace, distinct, warm=False).sum()) == reads - distinct
    assert static_optimum_hits(trace, distinct) == reads
