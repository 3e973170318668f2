"""Model FLOPs of a decoder-only transformer, the numerator of MFU.

PaLM (Chowdhery et al. 2022, appendix B), also nanoGPT's ``estimate_mfu``, torchtitan and Composer::

    flops_per_token = 6·N + 12·L·H·Q·T

``N`` non-embedding parameters, ``L`` layers, ``H`` attention heads, ``Q`` head dimension, ``T``
sequence length. ``6·N``: 2 FLOPs per multiply-accumulate, times 3 for forward plus a backward twice
as expensive. ``12·L·H·Q·T``: the ``QKᵀ`` and ``AV`` matmuls, forward and backward, with no discount
for the causal mask. Recomputation (activation checkpointing, FlashAttention's backward) is not
counted: that would be hardware FLOPs (HFU), not model FLOPs.

Megatron-LM's ``num_floating_point_operations`` halves the attention term for the causal mask
(``6·L·H·Q·T``). Both conventions are selectable; the monitor records the one used in the
``flops_convention`` label of ``training_info`` so MFU numbers from different jobs can be compared
honestly. The gap matters at long sequence lengths.
"""

from __future__ import annotations

from typing import Any, Literal

Convention = Literal["palm", "megatron"]
CONVENTIONS: tuple[str, ...] = ("palm", "megatron")
#: The convention recorded when FLOPs are passed in directly, without this module's formula.
CUSTOM = "custom"


class FlopsPerToken(float):
    """A FLOPs-per-token number that remembers which convention produced it."""

    convention: str

    def __new__(cls, value: float, convention: str = CUSTOM) -> FlopsPerToken:
        obj = super().__new__(cls, value)
        obj.convention = convention
        return obj

    def __repr__(self) -> str:
        return f"FlopsPerToken({float(self)!r}, convention={self.convention!r})"


def flops_per_token(
    n_params: float,
    n_layers: int,
    n_heads: int,
    head_dim: int,
    seq_len: int,
    *,
    convention: Convention = "palm",
) -> FlopsPerToken:
    """Training FLOPs per token: ``6·N + 12·L·H·Q·T`` (``palm``) or ``6·N + 6·L·H·Q·T`` (``megatron``).

    ``n_params`` excludes the embedding tables (count a tied output projection once, in ``N``, if
    you want its matmul included, as torchtitan does).
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown FLOPs convention {convention!r}; use one of {', '.join(CONVENTIONS)}")
    for name, value in (
        ("n_params", n_params),
        ("n_layers", n_layers),
        ("n_heads", n_heads),
        ("head_dim", head_dim),
        ("seq_len", seq_len),
    ):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    attention = 12.0 * n_layers * n_heads * head_dim * seq_len
    if convention == "megatron":
        attention /= 2.0
    return FlopsPerToken(6.0 * n_params + attention, convention)


def dense_decoder_params(n_layers: int, d_model: int, ffn_hidden: int | None = None) -> int:
    """Non-embedding parameters of a standard decoder block stack, weights only.

    Per layer: ``4·d²`` for the Q, K, V and output projections plus ``2·d·f`` for a two-matrix MLP
    (``f = 4·d`` by default), i.e. ``12·L·d²`` for the classic GPT shape. Biases and norms are left
    out (they are < 0.1% of large models).
    """
    f = 4 * d_model if ffn_hidden is None else ffn_hidden
    return n_layers * (4 * d_model * d_model + 2 * d_model * f)


def non_embedding_params(model: Any) -> int:
    """Parameters of a ``torch.nn.Module`` outside its ``nn.Embedding`` modules (torch imported lazily).

    Parameters shared between an embedding and another module (tied weights) count as embedding.
    """
    import torch  # the library must not import torch at module level

    embedding_ids = {
        id(p)
        for module in model.modules()
        if isinstance(module, torch.nn.Embedding)
        for p in module.parameters(recurse=False)
    }
    return sum(p.numel() for p in model.parameters() if id(p) not in embedding_ids)
