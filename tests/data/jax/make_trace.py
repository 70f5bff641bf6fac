"""Makes cpu_mlp/: a jax.profiler trace of 4 training steps of a jitted MLP on the CPU.

Run with jax installed (CPU is enough): python make_trace.py OUT_DIR. The steps are
StepTraceAnnotation('train', step_num=i), each with TraceAnnotation phases 'data' and 'compute';
both jitted functions are compiled before tracing starts. Only the XSpace (*.xplane.pb) is kept
for the tests (jax also writes the same events as JSON).
"""

import sys

import jax
import jax.numpy as jnp


def init(key, sizes):
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (a, b)) * 0.05, jnp.zeros(b)))
    return params


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


@jax.jit
def next_batch(x, step):
    return x + step


params = init(jax.random.PRNGKey(0), [64, 128, 128, 10])
x = jax.random.normal(jax.random.PRNGKey(1), (32, 64))
y = jnp.zeros((32, 10))
params, loss = train_step(params, next_batch(x, 0.0), y)  # compile both outside the trace
loss.block_until_ready()
jax.profiler.start_trace(sys.argv[1])
for step in range(4):
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
        with jax.profiler.TraceAnnotation("data"):
            xb = next_batch(x, float(step))
        with jax.profiler.TraceAnnotation("compute"):
            params, loss = train_step(params, xb, y)
            loss.block_until_ready()
jax.profiler.stop_trace()
