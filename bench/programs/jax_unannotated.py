"""A flax + optax training loop as a JAX user writes it: no step annotations, no dlscope (issue 40).

A small decoder-only transformer LM (flax.linen) trained with ``optax.adamw`` by one ``@jax.jit``
step; each step's tokens are drawn on the host with numpy and passed in. dlscope has to find the
steps itself (the runs of the repeated jit executable, dlscope/importers/jit_steps.py);
bench/jax_steps_check.py compares them with this program's own timer.

    python bench/programs/jax_unannotated.py [--steps 60] [--times-out t.json] [--small]

The timer: iteration i's time runs from the end of iteration i - 1 (the loop's start for the first)
to the return of ``loss.block_until_ready()`` after the i-th call of the step, so the iterations
tile the loop as dlscope's derived steps do (the host's data drawing included). The first
iterations include JAX's compiling: compare from a later one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

# (d_model, layers, heads, seq, batch, vocab): default ~30 M parameters, ~3 TFLOP a step, aimed at
# 20-60 ms on an H200 (float32, XLA's default TF32 matmuls); --small runs on a CPU in ~tens of ms
DEFAULT = (512, 6, 8, 256, 64, 16384)
SMALL = (64, 2, 4, 32, 8, 512)


class Block(nn.Module):
    d: int
    heads: int

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(h)))


class LM(nn.Module):
    d: int
    layers: int
    heads: int
    seq: int
    vocab: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        pos = self.param("pos", nn.initializers.normal(0.02), (self.seq, self.d))
        x = nn.Embed(self.vocab, self.d)(tokens) + pos[: tokens.shape[1]]
        mask = nn.make_causal_mask(tokens)
        for _ in range(self.layers):
            x = Block(self.d, self.heads)(x, mask)
        return nn.Dense(self.vocab)(nn.LayerNorm()(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--times-out", type=Path, help='write {"steps_ms": [...]} (each iteration, this timer)')
    ap.add_argument("--small", action="store_true", help="a tiny model, for a CPU")
    a = ap.parse_args()
    d, layers, heads, seq, batch, vocab = SMALL if a.small else DEFAULT

    model = LM(d, layers, heads, seq, vocab)
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((batch, seq), jnp.int32))
    opt = optax.adamw(3e-4, weight_decay=0.01)
    opt_state = opt.init(params)

    def loss_fn(params, x, y):
        logits = model.apply(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    rng = np.random.default_rng(0)
    times_ms = []
    last = time.perf_counter()
    for _ in range(a.steps):
        tokens = rng.integers(0, vocab, size=(batch, seq + 1), dtype=np.int32)
        params, opt_state, loss = train_step(params, opt_state, tokens[:, :-1], tokens[:, 1:])
        loss.block_until_ready()
        now = time.perf_counter()
        times_ms.append((now - last) * 1e3)
        last = now

    print(f"final loss {float(loss):.4f} after {a.steps} steps on {jax.devices()[0].platform}")
    if a.times_out:
        a.times_out.write_text(json.dumps({"steps_ms": times_ms}))


if __name__ == "__main__":
    main()
