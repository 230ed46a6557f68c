"""Attention variants behind one interface (see base.Attention) and a registry.

Einsum letters used throughout this package:
  B batch            T query length     S key length      D model width
  N query/key heads  H softmax heads    G value heads
  K key size (per-head query/key width) V value size (per-head value width)
For multi-head attention N = H = G.
"""

from attention import multi_head, talking_heads  # noqa: F401  (registers the variants)
from attention.base import Attention
from attention.registry import get, names, register

__all__ = ["Attention", "get", "names", "register"]
