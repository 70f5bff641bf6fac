"""A Keras MLP trained by a tf.function, with tf.profiler.experimental.Trace steps and phases."""

import numpy as np
import tensorflow as tf

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


for step in range(5):
    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
        with tf.profiler.experimental.Trace("data"):
            xb = x + float(step)
        with tf.profiler.experimental.Trace("compute"):
            loss = train_step(xb, y).numpy()
print("loss", loss)
