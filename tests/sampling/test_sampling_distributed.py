"""FrequencyEstimator under tf.distribute.MirroredStrategy (2 logical CPUs) equals one device.

Runs in a subprocess: logical devices must be configured before TensorFlow initialises its runtime, which other test
modules in this process have already done.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json
import retrieval
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from retrieval.sampling import FrequencyEstimator

items, batch, steps = 200, 64, 300
p = 1.0 / np.arange(1, items + 1)
stream = np.random.default_rng(0).choice(items, size=(steps, batch), p=p / p.sum()) + 2

single = FrequencyEstimator(num_buckets=128, alpha=0.05, num_hashes=2)
single_step = tf.function(single.update)
for ids in stream:
    single_step(tf.constant(ids))

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    mirrored = FrequencyEstimator(num_buckets=128, alpha=0.05, num_hashes=2)
dataset = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(stream).unbatch().batch(batch))

@tf.function
def distributed_step(ids):
    local = strategy.experimental_local_results(ids)
    strategy.run(mirrored.update, args=(ids,))
    return [tf.shape(x)[0] for x in local]

local_sizes = [int(n) for n in distributed_step(next(iter(dataset)))]
for ids in list(dataset)[1:]:
    distributed_step(ids)
query = tf.constant(np.arange(2, items + 12))
print(json.dumps({
    "replicas": strategy.num_replicas_in_sync, "local_sizes": local_sizes,
    "steps": [int(single.step.numpy()), int(mirrored.step.numpy())],
    "single": single.probability(query).numpy().tolist(),
    "mirrored": mirrored.probability(query).numpy().tolist(),
}))
"""


def test_mirrored_strategy_update_equals_single_device():
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and result["local_sizes"] == [32, 32]  # each replica saw half of the batch
    assert result["steps"] == [300, 300]
    assert result["single"] == result["mirrored"]
