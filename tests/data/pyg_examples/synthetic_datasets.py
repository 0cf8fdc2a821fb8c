"""Put on PYTHONPATH as `sitecustomize.py` by tests/test_ported_examples.py, so that every Python
process of a ported example's run (the script's and the loader's stage processes alike) has it:
PyG's `Reddit`, `OGB_MAG`, `MovieLens` and `Taobao` and ogb's `PygNodePropPredDataset`, which the
examples download, become small synthetic datasets of the same shape (MovieLens and Taobao:
conveyor's data=synthetic_movielens, below), patched in as their modules are first imported. The
scripts themselves stay as PyG wrote them.

The graph is a planted partition, the same in every process (a fixed seed): 2,000 nodes in 8
classes of 250, each node with 16 in-edges, 12 of them from its own class, and 32 features: its
class's centroid under noise that hides it from the node alone but not from its neighbourhood's
mean, so that the examples' GNNs learn what an MLP could not. Split 60/20/20: an epoch of the
examples' batches of 1024 is two steps.

`OGB_MAG` (the hetero examples) is the same papers, their `cites` edges and labels, with MAG's
other node types around them, each with features as `preprocess='metapath2vec'` gives every type:
800 authors (each paper written by 3), 40 institutions (one per author) and 96 fields of study
(each paper has 2, drawn among its class's 12: a second route to its class)."""
import importlib.abc
import sys

NODES, CLASSES, FEATURES, IN_DEGREE, SAME_CLASS, NOISE = 2000, 8, 32, 16, 12, 5.0
SPLIT = (0.6, 0.2)  # train, val; the rest tests


def synthetic_data():
    """A PyG `Data`: x, y, edge_index, and train/val/test masks."""
    import torch
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    y = torch.arange(NODES) % CLASSES
    by_class = torch.arange(NODES).view(-1, CLASSES).t()  # row c: the nodes of class c
    own = by_class[y.unsqueeze(1), torch.randint(0, NODES // CLASSES, (NODES, SAME_CLASS), generator=g)]
    other = torch.randint(0, NODES, (NODES, IN_DEGREE - SAME_CLASS), generator=g)
    source = torch.cat([own, other], 1).view(-1)
    edge_index = torch.stack([source, torch.arange(NODES).repeat_interleave(IN_DEGREE)])
    x = torch.randn(CLASSES, FEATURES, generator=g)[y] + NOISE * torch.randn(NODES, FEATURES, generator=g)
    data = Data(x=x, y=y, edge_index=edge_index)
    order = torch.randperm(NODES, generator=g)
    cuts = [round(NODES * SPLIT[0]), round(NODES * sum(SPLIT))]
    for name, nodes in zip(("train_mask", "val_mask", "test_mask"), order.tensor_split(cuts)):
        data[name] = torch.zeros(NODES, dtype=torch.bool).index_fill_(0, nodes, True)
    return data


AUTHORS, INSTITUTIONS, FIELDS_PER_CLASS, AUTHORS_PER_PAPER, FIELDS_PER_PAPER = 800, 40, 12, 3, 2


def synthetic_mag_data():
    """A PyG `HeteroData` in OGB_MAG's types: paper (x, y, masks), author, institution,
    field_of_study (x each); writes, affiliated_with, cites, has_topic."""
    import torch
    from torch_geometric.data import HeteroData

    papers = synthetic_data()
    g = torch.Generator().manual_seed(1)
    data = HeteroData()
    for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
        data["paper"][key] = papers[key]
    fields = CLASSES * FIELDS_PER_CLASS
    for node_type, count in (("author", AUTHORS), ("institution", INSTITUTIONS), ("field_of_study", fields)):
        data[node_type].x = torch.randn(count, FEATURES, generator=g)
    paper_ids = torch.arange(NODES)
    writers = torch.randint(0, AUTHORS, (NODES * AUTHORS_PER_PAPER,), generator=g)
    data["author", "writes", "paper"].edge_index = torch.stack([writers, paper_ids.repeat_interleave(AUTHORS_PER_PAPER)])
    data["author", "affiliated_with", "institution"].edge_index = torch.stack(
        [torch.arange(AUTHORS), torch.randint(0, INSTITUTIONS, (AUTHORS,), generator=g)])
    data["paper", "cites", "paper"].edge_index = papers.edge_index
    topics = papers.y.repeat_interleave(FIELDS_PER_PAPER) * FIELDS_PER_CLASS + torch.randint(
        0, FIELDS_PER_CLASS, (NODES * FIELDS_PER_PAPER,), generator=g)
    data["paper", "has_topic", "field_of_study"].edge_index = torch.stack(
        [paper_ids.repeat_interleave(FIELDS_PER_PAPER), topics])
    return data


def in_memory_dataset(data, transform=None, num_classes=None):
    """One `Data` (or `HeteroData`) as a PyG `InMemoryDataset` (`dataset[0]` through `transform`,
    `num_features`, `num_classes`)."""
    from torch_geometric.data import InMemoryDataset

    class OneGraph(InMemoryDataset):
        def __init__(self):
            super().__init__(None, transform=transform)
            self.data, self.slices = self.collate([data])

        @property
        def num_classes(self):
            return super().num_classes if num_classes is None else num_classes
    return OneGraph()


def reddit(root=None, *args, **kwargs):
    """torch_geometric.datasets.Reddit(root): one graph with train/val/test masks."""
    return in_memory_dataset(synthetic_data())


def pyg_node_prop_pred_dataset(name, root=None, *args, **kwargs):
    """ogb's PygNodePropPredDataset(name, root): y as [N, 1], the split by get_idx_split()."""
    data = synthetic_data()
    split = {"train": data.train_mask, "valid": data.val_mask, "test": data.test_mask}
    del data.train_mask, data.val_mask, data.test_mask
    data.y = data.y.view(-1, 1)
    dataset = in_memory_dataset(data)
    dataset.get_idx_split = lambda: {key: mask.nonzero().view(-1) for key, mask in split.items()}
    return dataset


STAND_IN_SCALE = 0.1  # of data=synthetic_movielens: 61 users, 974 movies, ~10K ratings


def movielens_graph():
    """data=synthetic_movielens (conveyor's generator) at STAND_IN_SCALE, seed 0, as a HeteroData."""
    from conveyor.partition.datasets.synthetic_movielens import generate
    return generate(STAND_IN_SCALE, 0).to_data()


def movielens(root=None, model_name=None, *args, **kwargs):
    """torch_geometric.datasets.MovieLens(root, model_name): movies with x (genres and a title
    embedding's 384 columns), users without, ('user', 'rates', 'movie') with edge_label (the
    rating, int64 as PyG's) and time; no reverse edges (the examples add them)."""
    from torch_geometric.data import HeteroData

    graph, data = movielens_graph(), HeteroData()
    rates = ("user", "rates", "movie")
    data["movie"].x = graph["movie"].x
    data["user"].num_nodes = graph["user"].num_nodes
    data[rates].edge_index = graph[rates].edge_index
    data[rates].edge_label = graph[rates].rating.long()
    data[rates].time = graph[rates].time
    return [data]


def taobao(root=None, *args, **kwargs):
    """torch_geometric.datasets.Taobao(root): users, items and categories without features,
    ('user', 'to', 'item') with time and behavior (0..3), ('item', 'to', 'category'); the
    synthetic MovieLens' users, movies (items), genres (categories: each movie's first) and
    ratings (behaviors: the rating's quarter)."""
    import torch
    from torch_geometric.data import HeteroData

    graph, data = movielens_graph(), HeteroData()
    rates, movies = graph["user", "rates", "movie"], graph["movie"]
    data["user"].num_nodes, data["item"].num_nodes = graph["user"].num_nodes, movies.num_nodes
    data["category"].num_nodes = 20
    data["user", "to", "item"].edge_index = rates.edge_index
    data["user", "to", "item"].time = rates.time
    data["user", "to", "item"].behavior = ((rates.rating - 0.5) / 1.2).long().clamp(0, 3)
    data["item", "to", "category"].edge_index = torch.stack([torch.arange(movies.num_nodes), movies.y])
    return [data]


def ogb_mag(root=None, preprocess=None, transform=None, *args, **kwargs):
    """torch_geometric.datasets.OGB_MAG(root, preprocess='metapath2vec', transform=...)."""
    return in_memory_dataset(synthetic_mag_data(), transform, num_classes=CLASSES)


PATCHES = {"torch_geometric.datasets": {"Reddit": reddit, "OGB_MAG": ogb_mag, "MovieLens": movielens,
                                        "Taobao": taobao},
           "ogb.nodeproppred": {"PygNodePropPredDataset": pyg_node_prop_pred_dataset}}


class PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules of PATCHES with the finders after it, and sets the attribute once the
    module has run: nothing is imported before the script asks for it."""

    inner = {}  # module name -> the loader the later finders gave it

    def find_spec(self, name, path=None, target=None):
        if name not in PATCHES:
            return None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                self.inner[name], spec.loader = spec.loader, self
                return spec
        return None

    def create_module(self, spec):
        return self.inner[spec.name].create_module(spec)

    def exec_module(self, module):
        self.inner[module.__name__].exec_module(module)
        for attribute, replacement in PATCHES[module.__name__].items():
            setattr(module, attribute, replacement)


sys.meta_path.insert(0, PatchOnImport())
