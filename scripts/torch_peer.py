"""transformers' PyTorch BertForMaskedLM, trained the way its users train it: the peer
that scripts/benchmark.py times beside ours (--vs_torch: eager; --torch_compile: the
model under torch.compile).

Imported only when one of those flags is given, so a JAX-only machine needs neither
torch nor transformers for the rest of the benchmark.

What runs, per step, at the --config's sizes (vocabulary, layers, width, heads,
feed-forward width, positions, segment types, both dropout rates, LayerNorm epsilon,
init range; exact GELU):

  - `BertForMaskedLM` with `attn_implementation="sdpa"` (PyTorch's fused attention:
    flash or memory-efficient kernels on CUDA), in train mode (dropout on);
  - bf16 autocast where the config's model.dtype is bfloat16 (parameters stay fp32,
    as ours);
  - its own MLM loss: logits at ALL B*T positions (the head is dense), cross-entropy
    at the masked positions, -100 elsewhere; the positions and targets are the
    benchmark's synthetic batch, the same as ours;
  - global-norm gradient clipping to optimizer.grad_clip_norm;
  - AdamW with the config's learning rate, betas, epsilon and weight decay (none on
    biases and LayerNorm, as training/optimizer.py), `fused=True` on CUDA (plain on
    CPU), and Hugging Face's linear warm-up/decay schedule.

torch has no bias-uncorrected AdamW or LAMB: for optimizer.name bert_adamw or lamb
the peer still runs AdamW (`optimizer_note` says so); the cost per step is the same
to within the optimizer's elementwise pass.

Timing: CUDA runs asynchronously, so every timed step ends with
torch.cuda.synchronize(); on CPU the step has finished when the call returns.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import numpy as np
import torch
import transformers

from models import ModelConfig


class PeerError(ValueError):
    """A --config the PyTorch peer cannot stand beside (the message says why)."""


def check_config(cfg: ModelConfig) -> None:
    """Standard BERT only: multi-head attention at D/N per head, post-LayerNorm."""
    if cfg.attention != "multi_head" or cfg.key_size or cfg.value_size:
        raise PeerError(
            "--vs_torch/--torch_compile compare standard BERT (transformers' BertForMaskedLM): "
            f"the --config must be attention=multi_head with key_size/value_size unset, not "
            f"attention={cfg.attention}, key_size={cfg.key_size}, value_size={cfg.value_size}")
    if cfg.norm_placement != "post":
        raise PeerError("--vs_torch/--torch_compile compare standard BERT: the --config must "
                        f"have norm=post, not {cfg.norm_placement}")


def bert_config(cfg: ModelConfig) -> transformers.BertConfig:
    return transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.mlp_dim, hidden_act="gelu",  # exact GELU, as ours
        hidden_dropout_prob=cfg.dropout_rate,
        attention_probs_dropout_prob=cfg.attention_dropout_rate,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size, layer_norm_eps=cfg.layer_norm_eps,
        initializer_range=cfg.initializer_range, attn_implementation="sdpa")


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TorchPeer:
    """One BertForMaskedLM training setup; `step()` runs and times one train step.

    batch: the benchmark's synthetic batch (numpy): input_ids, token_type_ids,
    attention_mask (B, T) and the dense labels/label_weights (B, T) that put the MLM
    targets at the same positions as ours.
    """

    def __init__(self, cfg: ModelConfig, opt_cfg: Any, batch: dict[str, np.ndarray],
                 seed: int, compile: bool = False, device: torch.device | None = None,
                 total_steps: int = 1000):
        """total_steps: the schedule's length (more than optimizer.warmup_steps)."""
        check_config(cfg)
        self.device = device or default_device()
        self.compiled = compile
        self.bf16 = cfg.dtype == "bfloat16"
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        torch.manual_seed(seed)
        self.model = transformers.BertForMaskedLM(bert_config(cfg)).to(self.device)
        self.model.train()
        self.attn_implementation = self.model.config._attn_implementation
        self.forward = torch.compile(self.model) if compile else self.model

        params = [p for p in self.model.parameters() if p.requires_grad]
        self.params = params
        groups = [{"params": [p for p in params if p.ndim > 1],
                   "weight_decay": float(opt_cfg.weight_decay)},
                  {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            groups, lr=float(opt_cfg.learning_rate), betas=(float(opt_cfg.b1), float(opt_cfg.b2)),
            eps=float(opt_cfg.eps), fused=fused)
        self.scheduler = transformers.get_linear_schedule_with_warmup(
            self.optimizer, int(opt_cfg.warmup_steps), total_steps)
        self.clip = float(opt_cfg.grad_clip_norm or 0.0)
        self.optimizer_note = ("AdamW (bias-corrected), fused" if fused else
                               "AdamW (bias-corrected), plain (CPU)")
        if opt_cfg.name != "adamw":
            self.optimizer_note += f", in place of optimizer.name={opt_cfg.name}"
        if opt_cfg.schedule != "linear":
            self.optimizer_note += f"; linear schedule in place of {opt_cfg.schedule}"

        def tensor(key: str) -> torch.Tensor:
            return torch.as_tensor(np.asarray(batch[key]), dtype=torch.long, device=self.device)

        labels = np.where(np.asarray(batch["label_weights"]) > 0, batch["labels"], -100)
        self.inputs = {"input_ids": tensor("input_ids"),
                       "token_type_ids": tensor("token_type_ids"),
                       "attention_mask": tensor("attention_mask"),
                       "labels": torch.as_tensor(labels, dtype=torch.long, device=self.device)}
        self.num_params = int(sum(p.numel() for p in params))
        self.last_loss: torch.Tensor | None = None
        synchronize(self.device)

    def _train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16,
                            enabled=self.bf16):
            loss = self.forward(**self.inputs).loss
        loss.backward()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()

    def step(self) -> float:
        """Seconds of one train step, the device synchronised at both ends."""
        synchronize(self.device)
        start = time.perf_counter()
        self.last_loss = self._train_step()
        synchronize(self.device)
        return time.perf_counter() - start

    def loss(self) -> float:
        """The last step's MLM loss (a device read: call it outside timed steps)."""
        return float("nan") if self.last_loss is None else float(self.last_loss.float())

    def peak_memory_bytes(self) -> int | None:
        """CUDA: torch.cuda.max_memory_allocated since this peer was built; CPU: None
        (the benchmark reports the process's RSS high-water mark there)."""
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        return None

    def info(self) -> dict[str, Any]:
        return {"torch": torch.__version__, "transformers": transformers.__version__,
                "torch_device": str(self.device), "attn_implementation": self.attn_implementation,
                "autocast_bf16": self.bf16, "torch_compile": self.compiled,
                "optimizer": self.optimizer_note, "grad_clip_norm": self.clip}

    def close(self) -> None:
        """Frees the model, optimizer and cached device memory (JAX shares the device)."""
        del self.forward, self.model, self.optimizer, self.scheduler, self.params, self.inputs
        self.last_loss = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
