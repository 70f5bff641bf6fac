"""A jitted MLP training loop with jax.profiler step and phase annotations, inside a dlscope phase
'loop' (whose times, taken by dlscope's clock, bound the steps taken by JAX's)."""

import sys

import jax
import jax.numpy as jnp

import dlscope


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


key = jax.random.PRNGKey(0)
params = [(jax.random.normal(key, (a, b)) * 0.05, jnp.zeros(b)) for a, b in ((64, 128), (128, 128), (128, 10))]
x = jax.random.normal(key, (32, 64))
y = jnp.zeros((32, 10))
with dlscope.phase("loop"):
    for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 6):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            with jax.profiler.TraceAnnotation("data"):
                xb = x * (1.0 + step)
            with jax.profiler.TraceAnnotation("compute"):
                params, loss = train_step(params, xb, y)
                loss.block_until_ready()
print("loss", float(loss))
