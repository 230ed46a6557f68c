"""Attention variants behind one interface (see base.Attention) and a registry.

Einsum and shape letters, one legend for the whole project (files refer here):
  B batch             T query (or sequence) length       S key length
  D model width       F feed-forward width               C query chunk length
  N query/key heads   H softmax heads                    G value heads
  K key size (per-head query/key width)                  V value size (per-head value width)
  P masked (predicted) positions per sequence
  R head groups (talking heads' block-diagonal mixing); n, h: heads per group
For multi-head attention N = H = G; talking heads calls them h_k, h, h_v; general
bilinear attention has H heads with K = V = D. The vocabulary size is written out as
`vocab`, never a letter (V is the value size).
"""

# No variant is imported here: the registry finds them (attention/registry.py).
from attention.base import Attention
from attention.registry import get, names, register

__all__ = ["Attention", "get", "names", "register"]
