"""Makes cpu_keras/: a tf.profiler.experimental trace of 4 training steps of a small Keras MLP
(a tf.function train step) on the CPU.

Run with tensorflow (or tensorflow-cpu) installed: python make_trace.py OUT_DIR. The steps are
tf.profiler.experimental.Trace('train', step_num=i, _r=1), each with Trace phases 'data' and
'compute'; the train step is traced and compiled before the profiler starts.
"""

import sys

import numpy as np
import tensorflow as tf

tf.random.set_seed(0)
model = tf.keras.Sequential(
    [tf.keras.Input((64,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
)
opt = tf.keras.optimizers.SGD(0.01)
x = tf.constant(np.random.default_rng(0).normal(size=(32, 64)).astype("float32"))
y = tf.zeros((32, 10))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


train_step(x, y)
tf.profiler.experimental.start(sys.argv[1])
for step in range(4):
    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
        with tf.profiler.experimental.Trace("data"):
            xb = x + float(step)
        with tf.profiler.experimental.Trace("compute"):
            train_step(xb, y).numpy()
tf.profiler.experimental.stop()
