"""`conveyor.NeighborLoader`: the pipeline as a drop-in for PyG's `NeighborLoader` (homogeneous,
node-level), and the batch source the trainer draws from. Imports the stages below it and PyG's
`Data`; the trainer imports it.

    neighbor_loader.py  the loader: keywords, epochs, the pipeline started once, closing
    inputs.py           its arguments made into the pipeline's (graph, seeds, sampler, cache)
    keywords.py         PyG's keywords it does not support, refused by name
    to_pyg.py           a prepared batch as PyG's Data (edge_index hop by hop, trim_to_layer's counts)
"""
from conveyor.core.names import require_own_name
from conveyor.loader.neighbor_loader import NeighborLoader

require_own_name(__name__, "conveyor.loader")

__all__ = ["NeighborLoader"]
