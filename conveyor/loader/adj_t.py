"""A `Data` holding `adj_t` (what `T.ToSparseTensor` leaves: the transposed adjacency, row i the
in-edges of node i), or a `HeteroData` holding one per edge type (rows its destination type's
nodes, columns its source type's), sampled as PyG samples it and its batches carrying `adj_t` as PyG's.

PyG's sampler reads such a graph in `adj_t`'s CSR order (`to_csc`: adj_t's rowptr is the CSC
colptr, no permutation), so an edge's id (`e_id`) is its position in adj_t's values. Here the
graph is the edge list in that order (`adjacency_edges`: sources = adj_t's columns, targets = its
rows), so the pipeline's `e_id` are the same, and adj_t's values travel as an edge attribute
under the key `adj_t`. A batch's `adj_t` is PyG's `filter_data`'s: `SparseTensor(row=targets,
col=sources, value=the sampled edges' values, sparse_sizes=(targets' nodes, sources' nodes))`,
unsorted as PyG leaves it; where the data also holds edge_index (`ToSparseTensor(remove_edge_index=
False)`), PyG samples adj_t and the batch's edge_index is the same edges.
A torch sparse CSR or CSC `adj_t` (`T.ToSparseTensor(layout=...)`; PyG's own loader cannot sample
it) comes back in its layout. Any other sparse layout is refused by name, and so is a sparse
matrix under any other key (`refuse_sparse`: PyG would sample an `adj`, or pass it whole).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from conveyor.core import ConveyorError

SPARSE_TENSOR = "SparseTensor"  # torch_sparse's (the layout a batch's adj_t is rebuilt in)
TORCH_LAYOUTS = {torch.sparse_csr: "csr", torch.sparse_csc: "csc"}


def adjacency_layout(value, name: str = "data.adj_t") -> str:
    """Which kind of adj_t `value` (the data's `name`) is (SPARSE_TENSOR, csr, csc), or a refusal naming it."""
    if type(value).__name__ == SPARSE_TENSOR and callable(getattr(value, "csr", None)):
        return SPARSE_TENSOR
    if isinstance(value, Tensor) and value.layout in TORCH_LAYOUTS:
        return TORCH_LAYOUTS[value.layout]
    raise ConveyorError(f"{name} must be a torch_sparse SparseTensor or a torch sparse CSR or CSC tensor (as "
                        f"T.ToSparseTensor leaves it), got a {type(value).__name__}"
                        f"{' of layout ' + str(value.layout) if isinstance(value, Tensor) else ''}; give the graph "
                        f"as edge_index instead.")


def adjacency_edges(value) -> Tuple[Tensor, Optional[Tensor]]:
    """adj_t as the [2, E] edge list (sources, targets) in its CSR order, and its values (or None)."""
    kind = adjacency_layout(value)
    if kind == SPARSE_TENSOR:
        row, col, values = value.coo()
    else:
        csr = value if kind == "csr" else value.to_sparse_csr()
        row = torch.repeat_interleave(torch.arange(csr.size(0)), torch.diff(csr.crow_indices()))
        col, values = csr.col_indices(), csr.values()
    return torch.stack([col.long(), row.long()]), values


def batch_adjacency(kind: str, edge_index: Tensor, values: Optional[Tensor], sizes: Tuple[int, int]):
    """A batch's adj_t of its edges (`edge_index`: sources, targets, local ids) as PyG's, of
    `sizes` (the batch's target nodes, its source nodes: PyG's `out_store.size()[::-1]`)."""
    if kind == SPARSE_TENSOR:
        from torch_geometric.typing import SparseTensor
        return SparseTensor(row=edge_index[1], col=edge_index[0], value=values, sparse_sizes=sizes,
                            is_sorted=False, trust_data=True)
    ones = torch.ones(edge_index.size(1), device=edge_index.device)
    coo = torch.sparse_coo_tensor(torch.stack([edge_index[1], edge_index[0]]), ones if values is None else values,
                                  tuple(sizes) + (() if values is None else tuple(values.shape[1:])))
    coo = coo.coalesce()
    return coo.to_sparse_csr() if kind == "csr" else coo.to_sparse_csc()


def is_sparse(value) -> bool:
    """Whether `value` is a sparse matrix (a torch_sparse SparseTensor or a non-strided tensor)."""
    return type(value).__name__ == SPARSE_TENSOR or (isinstance(value, Tensor) and value.layout != torch.strided)


def refuse_sparse(name: str, value) -> None:
    """A sparse matrix under a key other than adj_t (`name`, as the user reads it) is refused:
    conveyor's loader would pass it whole into every batch, where PyG's samples an `adj` or slices."""
    if is_sparse(value):
        raise ConveyorError(f"{name} is a sparse matrix, which conveyor's loader samples and slices only as adj_t "
                            f"(the transposed adjacency T.ToSparseTensor() makes; every batch would otherwise get "
                            f"it whole): give the edges as adj_t (adj.t()) or edge_index, or the values densely "
                            f"(.to_dense()).")
