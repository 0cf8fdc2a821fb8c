"""The link task's model: any node model as the encoder (an embedding per node: its output,
`model.hidden` wide) and a decoder that scores a node pair from its two embeddings.

`dot`: their inner product (PyG's link_pred examples, GAE); `mlp`: an MLP on their elementwise
product (OGB's LinkPredictor: linear, relu, dropout, linear to one logit). A score is a logit:
the loss is binary cross-entropy with logits, a pair is predicted linked when its score is above 0.

`LinkModel.forward(x, layers, pairs, **edges)` is the training step's: the encoder over a sampled
batch (the trainer's contract, `forward(x, layers)`: one row per seed node), then the decoder on
`pairs`, local ids of those seeds. Evaluation runs the encoder layer by layer over the whole
graph (trainer/loop/layerwise.py) and `score`s the pairs from those exact embeddings.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from conveyor.core import ConveyorError
from conveyor.trainer.models.edges import edge_inputs
from conveyor.trainer.settings import DECODERS


class LinkModel(nn.Module):
    def __init__(self, encoder: nn.Module, decoder: str = "dot", width: int = 0, dropout: float = 0.0):
        super().__init__()
        if decoder not in DECODERS:
            raise ConveyorError(f"task.decoder must be one of {', '.join(DECODERS)}, got {decoder!r}.")
        self.encoder, self.decoder_name = encoder, decoder
        self.decoder = MLPDecoder(width, dropout) if decoder == "mlp" else None
        # Plain values: how conveyor.load builds it again around the encoder (trainer/models/portable.py).
        self.init_args = {"decoder": decoder, "width": width, "dropout": dropout}

    @property
    def num_layers(self):
        return getattr(self.encoder, "num_layers", None)

    @property
    def takes_edge_pos(self) -> bool:  # trainer/models/edges.py: model_edges asks the model it calls
        return getattr(self.encoder, "takes_edge_pos", False)

    @property
    def takes_n_id(self) -> bool:  # a typed encoder reads the batch's node ids (trainer/models/hetero.py)
        return getattr(self.encoder, "takes_n_id", False)

    def edge_inputs(self) -> tuple:
        return edge_inputs(self.encoder)

    def forward(self, x: Tensor, layers, pairs: Tensor, degree: Tensor | None = None, **inputs) -> Tensor:
        """The scores (logits) of `pairs` ([2, P] local ids of the batch's seeds); `degree`, the
        edge inputs and a typed encoder's `n_id` go to the encoder (trainer/models/edges.py)."""
        inputs = inputs if degree is None else {"degree": degree, **inputs}
        return self.score(self.encoder(x, layers, **inputs), pairs)

    def score(self, z: Tensor, pairs: Tensor) -> Tensor:
        """The scores of `pairs` ([2, P] rows of `z`, the nodes' embeddings)."""
        src, dst = z[pairs[0]], z[pairs[1]]
        return (src * dst).sum(-1) if self.decoder is None else self.decoder(src * dst)


class MLPDecoder(nn.Module):
    """OGB's LinkPredictor: linear, relu, dropout, linear to one logit, on z_src * z_dst."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.hidden, self.out, self.dropout = nn.Linear(width, width), nn.Linear(width, 1), dropout

    def forward(self, h: Tensor) -> Tensor:
        h = F.dropout(F.relu(self.hidden(h)), self.dropout, self.training)
        return self.out(h).view(-1)
