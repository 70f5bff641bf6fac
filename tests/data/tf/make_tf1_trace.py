"""Makes cpu_session/: a tf.profiler.experimental trace of a TF1-style program (a graph run by
tf.compat.v1.Session: the variables' initializer, then 4 training runs of a 2-layer MLP).

Run with tensorflow (or tensorflow-cpu) installed: python make_tf1_trace.py OUT_DIR.
"""

import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
x = tf1.placeholder(tf.float32, (32, 64))
w = tf1.get_variable("w", (64, 128))
v = tf1.get_variable("v", (128, 10))
loss = tf.reduce_mean(tf.matmul(tf.nn.relu(tf.matmul(x, w)), v))
train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
data = np.random.default_rng(0).normal(size=(32, 64)).astype("float32")
with tf1.Session() as sess:
    tf.profiler.experimental.start(sys.argv[1])
    sess.run(tf1.global_variables_initializer())
    for _ in range(4):
        sess.run(train, feed_dict={x: data})
    tf.profiler.experimental.stop()
