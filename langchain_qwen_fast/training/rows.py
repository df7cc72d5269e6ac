"""Full fine-tuning that moves only the vocabulary rows the data can move.

An SFT loss that reads a fixed set of answer tokens (one step over the labels' first tokens,
or multi-label's yes and no) sends gradient to the output layer's rows of those tokens alone,
and the embedding's rows of the tokens the training prompts hold; a head's loss, to the
embedding's rows of the training texts' tokens alone. Every other vocabulary row
has a zero gradient at every step, and under AdamW without weight decay a row whose gradient
is always zero never moves. :class:`TouchedRows` trains the rows that can move as deltas over
the frozen matrices: the same run, step for step, without the optimiser's pass over the
vocabulary's other rows, which are most of a small model's weights. :meth:`TouchedRows.fold`
writes the deltas back before the model is saved.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


class _RowDeltas(nn.Module):
    """Trainable deltas over some rows of a frozen matrix (the others read as they are)."""

    def __init__(self, weight: torch.Tensor, rows: Iterable[int]) -> None:
        super().__init__()
        kept = torch.tensor(sorted(set(rows)), dtype=torch.long, device=weight.device)
        index = torch.full((weight.shape[0],), -1, dtype=torch.long, device=weight.device)
        index[kept] = torch.arange(len(kept), device=weight.device)
        self.register_buffer("rows", kept, persistent=False)
        self.register_buffer("index", index, persistent=False)
        self.delta = nn.Parameter(torch.zeros(len(kept), weight.shape[1], dtype=weight.dtype, device=weight.device))
        self._weight = (weight,)  # in a tuple: the frozen matrix is its module's, not registered twice

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows at ``ids``, each with its delta where it has one."""
        local = self.index[ids]
        hit = (local >= 0).unsqueeze(-1).to(self.delta.dtype)
        return nn.functional.embedding(ids, self._weight[0]) + self.delta[local.clamp(min=0)] * hit

    def fold(self) -> None:
        """Write the deltas into the matrix's rows."""
        with torch.no_grad():
            self._weight[0][self.rows] += self.delta


class _Embedding(nn.Module):
    """The input embedding, read through the deltas."""

    def __init__(self, deltas: _RowDeltas) -> None:
        super().__init__()
        self.deltas = deltas

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.deltas.lookup(ids)


class TouchedRows(nn.Module):
    """The trained rows of a model's embedding and, for a causal LM, its output layer (one set
    where they are tied, as in Qwen3-0.6B): attached to ``lm`` (as ``lm.touched_rows``, so that its deltas
    are among the model's parameters, checkpoints included), folded back by :meth:`fold`."""

    def __init__(self, lm: Any, inputs: Iterable[int], outputs: Iterable[int]) -> None:
        super().__init__()
        embedding, head = lm.get_input_embeddings(), lm.get_output_embeddings()
        # A sequence-classification model has no output layer over the vocabulary.
        self.tied = head is not None and head.weight is embedding.weight
        # The padding row gets no gradient from the embedding: it stays frozen here too.
        inputs = {t for t in inputs if t != embedding.padding_idx}
        outputs = set(outputs)
        self.input = _RowDeltas(embedding.weight, inputs | outputs if self.tied else inputs)
        self.output = self.input if self.tied or head is None else _RowDeltas(head.weight, outputs)
        embedding.weight.requires_grad_(False)
        if head is not None:
            head.weight.requires_grad_(False)
        self._lm = (lm, embedding)
        lm.set_input_embeddings(_Embedding(self.input))
        lm.add_module("touched_rows", self)

    def output_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The output layer's rows at ``ids`` (answer tokens), deltas included."""
        return self.output.lookup(ids)

    def fold(self) -> None:
        """Write the deltas back, and give ``lm`` its own embedding and weights again."""
        lm, embedding = self._lm
        self.input.fold()
        if self.output is not self.input:
            self.output.fold()
        lm.set_input_embeddings(embedding)
        del lm.touched_rows
        embedding.weight.requires_grad_(True)
        if lm.get_output_embeddings() is not None:
            lm.get_output_embeddings().weight.requires_grad_(True)
