"""`conveyor.NeighborLoader` and `conveyor.LinkNeighborLoader`: the pipeline as a drop-in for PyG's
`NeighborLoader` and `LinkNeighborLoader` (homogeneous), and `PipelineLoader`, the batch source
the trainer draws from. Imports the stages below it and PyG's `Data`; the trainer imports it.

    pipeline_loader.py  PipelineLoader: one batch source over a graph, iterated along a seed plan
    pyg_loader.py       PyGLoader: what the two PyG loaders share (epochs as Data, loader(index), held batches)
    neighbor_loader.py  NeighborLoader: PyG's keywords and batches over a PipelineLoader
    link_neighbor_loader.py  LinkNeighborLoader: the same for links (link_inputs.py: its own arguments)
    pyg_input.py        the user's Data (or stores) as the pipeline's graph, and how batches rebuild it
    inputs.py           the other arguments made into the pipeline's (seeds, sampler, cache, options)
    keywords.py         PyG's keywords it honours, and those it refuses by name
    to_pyg.py           a prepared batch as PyG's Data
"""
from conveyor.core.names import require_own_name
from conveyor.loader.link_neighbor_loader import LinkNeighborLoader
from conveyor.loader.neighbor_loader import NeighborLoader

require_own_name(__name__, "conveyor.loader")

__all__ = ["LinkNeighborLoader", "NeighborLoader"]
