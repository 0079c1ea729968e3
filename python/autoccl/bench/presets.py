"""Model presets of `autoccl bench train` (GPT-2/GPT-3 style shapes). Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    layers: int
    d_model: int
    heads: int
    vocab: int = 50304
    max_seq: int = 2048

    def params(self) -> int:
        """Parameter count of autoccl.bench.train.GPT (untied embeddings, biases, LayerNorms)."""
        d = self.d_model
        per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 4 * d
        return self.layers * per_block + self.vocab * d * 2 + self.max_seq * d + 2 * d


PRESETS = {
    "tiny": Preset(layers=2, d_model=64, heads=4, vocab=512, max_seq=128),  # CPU tests
    "125m": Preset(layers=12, d_model=768, heads=12),
    "350m": Preset(layers=24, d_model=1024, heads=16),
    "760m": Preset(layers=24, d_model=1536, heads=16),
    "1.3b": Preset(layers=24, d_model=2048, heads=32),
}
