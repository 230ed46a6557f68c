"""BERT's building blocks: embeddings, feed-forward block and the encoder layer.

Einsum and shape letters: the one legend in attention/__init__.py.
Every parameter carries logical axis names (batch, length, embed, heads, kv,
mlp, vocab) that training/sharding.py maps onto the device mesh.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

import attention
from attention.initializers import kernel_init, zeros_init
from models.config import ModelConfig

Array = jax.Array


def layer_norm(config: ModelConfig, name: str) -> nn.LayerNorm:
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps,
        dtype=config.compute_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ("embed",)),
        bias_init=zeros_init(("embed",)),
        name=name,
    )


def dense(config: ModelConfig, features: int, axes: tuple[str | None, str | None], name: str):
    return nn.Dense(
        features,
        dtype=config.compute_dtype,
        kernel_init=kernel_init(config, axes),
        bias_init=zeros_init((axes[1],)),
        name=name,
    )


def embed(config: ModelConfig, rows: int, axes: tuple[str | None, str | None], name: str):
    return nn.Embed(
        rows,
        config.hidden_size,
        dtype=config.compute_dtype,
        embedding_init=kernel_init(config, axes),
        name=name,
    )


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout."""

    config: ModelConfig

    def setup(self) -> None:
        cfg = self.config
        self.word = embed(cfg, cfg.vocab_size, ("vocab", "embed"), "word")
        self.position = embed(cfg, cfg.max_position_embeddings, (None, "embed"), "position")
        self.token_type = embed(cfg, cfg.type_vocab_size, (None, "embed"), "token_type")
        self.norm = layer_norm(cfg, "norm")
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def __call__(self, input_ids: Array, token_type_ids: Array, deterministic: bool) -> Array:
        length = input_ids.shape[1]
        positions = jnp.arange(length)[None, :]
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        x = self.dropout(self.norm(x), deterministic=deterministic)
        return nn.with_logical_constraint(x, ("batch", "length", "embed"))

    def attend(self, x: Array) -> Array:
        """Scores hidden states against the (tied) word embeddings: (.., D) -> (.., vocab)."""
        return self.word.attend(x)


class FeedForward(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = self.config
        h = dense(cfg, cfg.mlp_dim, ("embed", "mlp"), "intermediate")(x)  # (B, T, F)
        h = nn.with_logical_constraint(nn.gelu(h, approximate=False), ("batch", "length", "mlp"))
        return dense(cfg, cfg.hidden_size, ("mlp", "embed"), "output")(h)  # (B, T, D)


class EncoderLayer(nn.Module):
    """One transformer layer; the attention comes from the registry by name.

    With `positions` [B, P] the layer's output exists only at those positions:
    queries, residuals, LayerNorms and the feed-forward block run on P rows,
    while keys and values still come from all T. Each output row equals the
    dense layer's row at that position, because nothing after attention mixes
    positions.
    """

    config: ModelConfig

    @nn.compact
    def __call__(
        self, x: Array, mask: Array, deterministic: bool, positions: Array | None = None
    ) -> Array:
        cfg = self.config
        attention_cls = attention.get(cfg.attention)
        attend = attention_cls(cfg, name="attention")
        feed_forward = FeedForward(cfg, name="mlp")
        drop = nn.Dropout(cfg.dropout_rate)
        attention_norm = layer_norm(cfg, "attention_norm")
        mlp_norm = layer_norm(cfg, "mlp_norm")

        def rows(h: Array) -> Array:
            return h if positions is None else gather_positions(h, positions)

        residual = rows(x)  # gathered once: the query rows and the residual are the same rows
        if cfg.norm_placement == "pre":
            h = attention_norm(x)
            x = residual + drop(attend(h, mask, deterministic, rows(h)), deterministic)
            x = x + drop(feed_forward(mlp_norm(x)), deterministic)
        else:  # post-LN, original BERT
            attended = attend(x, mask, deterministic, residual)
            x = attention_norm(residual + drop(attended, deterministic))
            x = mlp_norm(x + drop(feed_forward(x), deterministic))
        return nn.with_logical_constraint(x, ("batch", "length", "embed"))


def gather_positions(hidden: Array, positions: Array) -> Array:
    """(B, T, D), (B, P) int -> (B, P, D)."""
    return jnp.take_along_axis(hidden, positions[..., None], axis=1)


REMAT_POLICIES = {
    "full": None,  # save nothing, recompute the layer in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


class Encoder(nn.Module):
    """The layers. With `final_positions` [B, P] the last layer runs on those P
    positions only and the output is [B, P, D]: the MLM loss reads only the
    masked positions and a classifier only [CLS], so the rest of the last
    layer's queries, output projection and feed-forward block are skipped
    (models/config.py's sparse_final_layer).

    config.scan_layers=false: one EncoderLayer per layer (`layer_i`), each traced and
    compiled on its own, so compile time grows with depth. true: the layers' parameters
    are stacked along a leading axis (`layers`, models/layout.py) and one layer is
    traced once and run in a `jax.lax.scan` over that axis; the compiler sees one layer
    whatever the depth."""

    config: ModelConfig

    @nn.compact
    def __call__(
        self, x: Array, mask: Array, deterministic: bool, final_positions: Array | None = None
    ) -> Array:
        cfg = self.config
        if cfg.scan_layers:
            x = self.scanned_layers(x, mask, deterministic, final_positions)
        else:
            layer_cls = EncoderLayer
            if cfg.remat != "none":
                # Arguments counted with self as 0: deterministic (3) is a Python bool.
                layer_cls = nn.remat(
                    EncoderLayer, policy=REMAT_POLICIES[cfg.remat], static_argnums=(3,)
                )
            for i in range(cfg.num_layers):
                positions = final_positions if i == cfg.num_layers - 1 else None
                x = layer_cls(cfg, name=f"layer_{i}")(x, mask, deterministic, positions)
        if cfg.norm_placement == "pre":
            x = layer_norm(cfg, "final_norm")(x)
        return x

    def scanned_layers(self, x: Array, mask: Array, deterministic: bool,
                       final_positions: Array | None) -> Array:
        """The layers as one scanned layer over stacked parameters.

        Flax's nn.scan carries one shape through every step, but a sparse final layer
        changes the shape (T rows in, P out); so the stack is one parameter holding the
        whole layer tree, `jax.lax.scan` runs the first L-1 layers (all L when the last
        is dense) and the last runs after it on its own slice. Layer i's dropout key is
        fold_in(the encoder's key, i).
        """
        cfg = self.config
        layer = EncoderLayer(cfg, parent=None)  # unbound: applied to each slice
        stack = self.param(STACKED_PARAMS, init_layer_stack, cfg)
        rng = None if deterministic else self.make_rng("dropout")

        def run(params: dict, h: Array, index: Array, positions: Array | None) -> Array:
            rngs = {} if rng is None else {"dropout": jax.random.fold_in(rng, index)}
            return layer.apply({"params": params}, h, mask, deterministic, positions,
                               rngs=rngs)

        if cfg.remat != "none":
            # prevent_cse=False: inside a scan, CSE cannot undo the recomputation (JAX's
            # advice for checkpoint under scan), and keeping it costs speed.
            run = jax.checkpoint(run, policy=REMAT_POLICIES[cfg.remat], prevent_cse=False,
                                 static_argnums=(3,))

        scanned = cfg.num_layers - (0 if final_positions is None else 1)

        def body(h: Array, layer_input: tuple[dict, Array]) -> tuple[Array, None]:
            params, index = layer_input
            return run(params, h, index, None), None

        head = jax.tree.map(lambda p: p[:scanned], stack)
        # The carry keeps one dtype: the layers' output dtype (the embeddings already
        # hand over the compute dtype; an fp32 input would come back bf16).
        x = x.astype(cfg.compute_dtype)
        x, _ = jax.lax.scan(body, x, (head, jnp.arange(scanned)))
        if final_positions is not None:
            last = jax.tree.map(lambda p: p[-1], stack)
            x = run(last, x, jnp.asarray(cfg.num_layers - 1), final_positions)
        return x


STACKED_PARAMS = "layers"  # encoder/layers: models/layout.py's scanned layout


def init_layer_stack(rng: Array, cfg: ModelConfig) -> dict:
    """Every layer's parameters drawn as an unrolled layer draws them (one key per
    layer), stacked along a leading axis that carries the logical name `layers` (the
    sharding rules never split it)."""
    layer = EncoderLayer(cfg, parent=None)
    sample = jnp.zeros((1, 1, cfg.hidden_size), jnp.float32)
    sample_mask = jnp.ones((1, 1), bool)

    def draw(key: Array) -> dict:
        return layer.init(key, sample, sample_mask, True)["params"]

    boxed = jax.eval_shape(draw, rng)
    values = jax.vmap(lambda key: nn.unbox(draw(key)))(jax.random.split(rng, cfg.num_layers))

    def rebox(box: Any, value: Array) -> Any:
        if isinstance(box, nn.Partitioned):
            return box.replace(value=value, names=("layers", *box.names))
        return value

    return jax.tree.map(rebox, boxed, values, is_leaf=lambda b: isinstance(b, nn.Partitioned))
