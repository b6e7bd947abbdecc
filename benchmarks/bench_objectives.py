"""Every two-tower objective on the same model, data and training time: quality, popularity, MI bound, gradient bias.

The model is ``models.default_config()`` (ID-only item tower, mean-pooled history -> Dense(128) -> 64, both towers
L2-normalised, T = 0.15, no example age), Adam at a constant 0.003, batch 1024, trained for the same wall-clock
budget per objective (``--seconds``, default 50; steps counted). Sampled negatives: 1024 per batch from
unigram^0.75 (the YoutubeDNN choice). In-batch negatives: the other rows of the batch, static log-Q (the expected
count among a row's noise for the binary losses). Binary objectives carry the learned logit bias of
``models.objectives.LogitBias``.

Data and protocols (stated in every row):

* ``ml-1m-set``: ``set-splits/ml-1m`` (LightGCN++ authors' random per-user holdout), ``train.txt`` -> ``test.txt``.
  The lines are sets (ids sorted), not sequences; this branch has no set-aware example builder yet, so each user's
  training items are shuffled with a fixed seed before building next-item examples (history = the items before in
  that random order) and the user vector at evaluation is the mean-pooled set of all training items.
* ``beauty-seq``: ``amazon-beauty/Beauty.txt`` (time-ordered), leave-last-one-out next-item; history = the last
  50 items before.

Evaluation: full-corpus exact ranking, the user's training items excluded, recall@20 and NDCG@20 (RecBole
definitions) with 95% bootstrap intervals over users, avg_popularity@20 and tail_share@20 (items outside the head
holding 80% of training interactions), most-popular from the same evaluation. ``infonce_bound_nats``: InfoNCE's
lower bound on the mutual information between history and next item, ``log N - L`` with ``L`` the uncorrected
in-batch softmax loss of the trained critic ``s / T`` on 8 batches of ``N = 1024`` training examples (valid for any
critic; the softmax objectives optimise it).

Gradient bias (``study = gradient``): on a Zipf toy (2,000 items, d = 16, 64 queries, a self-normalised model),
the cosine between the draw-averaged negative phase of each sampled objective (16 draws from unigram^1 with
replacement) and the full-softmax one, as a function of the number of negatives ``S``.

    python -m benchmarks.bench_objectives [--smoke] [--seconds=50] [--plot=objectives.png]
    python -m benchmarks.bench_objectives --from_rows=rows.jsonl --plot=benchmarks/objectives.png  # plot only
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from retrieval.data import Vocabulary, from_files, leave_last_n_out, next_item_examples, read_interactions, synthetic

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
MAX_HISTORY, BATCH, NUM_NEGATIVES, LEARNING_RATE, SEED = 50, 1024, 1024, 0.003, 0
SECONDS = 50.0
PROTOCOLS = {
    "ml-1m-set": "set-splits/ml-1m train -> test (random holdout); items shuffled per user (seed 0) into next-item "
                 "examples (no set path in this branch); full ranking, train items excluded",
    "beauty-seq": "amazon-beauty leave-last-one-out next-item; full ranking, train items excluded",
    "synthetic-smoke": "synthetic, leave-last-one-out (smoke: not representative)",
}
# (row name, objective overrides): every objective, sampled and in-batch negatives where both make sense.
OBJECTIVES = [
    ("sampled_softmax", {"name": "sampled_softmax"}),
    ("in_batch softmax", {"name": "in_batch", "log_q": "static"}),
    ("full_softmax", {"name": "full_softmax"}),
    ("nce, sampled", {"name": "nce", "negatives": "sampled"}),
    ("nce, in_batch", {"name": "nce", "negatives": "in_batch", "log_q": "static"}),
    ("negative_sampling, sampled", {"name": "negative_sampling", "negatives": "sampled"}),
    ("negative_sampling, in_batch", {"name": "negative_sampling", "negatives": "in_batch"}),
    ("sampled_logistic, sampled", {"name": "sampled_logistic", "negatives": "sampled"}),
    ("sampled_logistic, in_batch", {"name": "sampled_logistic", "negatives": "in_batch", "log_q": "static"}),
    ("full_logistic", {"name": "full_logistic"}),
]
GRADIENT_SIZES, GRADIENT_SIZES_SMOKE = (16, 64, 256, 1024), (16, 64)


def load(dataset: str) -> tuple:
    """``(train, test)`` interaction frames (``user_id``, ``item_id``, ``timestamp``) of one dataset."""
    if dataset == "ml-1m-set":
        folder = DATASETS / "set-splits" / "ml-1m"
        split = from_files(folder / "train.txt", folder / "test.txt", format="user_items")
        train = split.train.copy()
        rng = np.random.default_rng(SEED)  # a random order within each user's set (see the module docstring)
        train["timestamp"] = rng.permutation(len(train))
        return train, split.test
    if dataset == "beauty-seq":
        split = leave_last_n_out(read_interactions(DATASETS / "amazon-beauty" / "Beauty.txt", format="user_items"))
        return split.train, split.test
    frame, _, _ = synthetic.generate(num_users=120, num_items=80, interactions_per_user=12, seed=1)
    split = leave_last_n_out(frame)
    return split.train, split.test


def _histories(user_idx: np.ndarray, item_idx: np.ndarray, timestamps: np.ndarray, n_users: int) -> np.ndarray:
    """``[n_users, MAX_HISTORY]`` the last training items of each user, most recent first, 0-padded."""
    order = np.lexsort((-timestamps, user_idx))
    users, items = user_idx[order], item_idx[order]
    starts = np.searchsorted(users, np.arange(n_users))
    rank = np.arange(len(users)) - starts[users]
    keep = rank < MAX_HISTORY
    out = np.zeros((n_users, MAX_HISTORY), np.int32)
    out[users[keep], rank[keep]] = items[keep]
    return out


def prepare(dataset: str) -> dict:
    """Vocabularies, next-item examples, evaluation histories and the train/test CSR of a dataset."""
    from retrieval.evaluation import csr

    train, test = load(dataset)
    users, items = Vocabulary.from_ids(train["user_id"]), Vocabulary.from_ids(train["item_id"])
    user_idx, item_idx = users.lookup(train["user_id"]), items.lookup(train["item_id"])
    timestamps = train["timestamp"].to_numpy()
    test_users, test_items = users.lookup(test["user_id"]), items.lookup(test["item_id"])
    known = (test_users >= 2) & (test_items >= 2)
    return {"users": users, "items": items,
            "examples": next_item_examples(user_idx, item_idx, timestamps, max_history=MAX_HISTORY),
            "histories": _histories(user_idx, item_idx, timestamps, users.size),
            "train": csr.from_pairs(user_idx, item_idx, users.size),
            "test": csr.from_pairs(test_users[known], test_items[known], users.size)}


def _config(overrides: dict, num_items: int):
    from retrieval import models

    config = models.default_config()
    config.seed = SEED
    config.user_tower.use_example_age = False
    config.objective.num_negatives = min(NUM_NEGATIVES, num_items)
    for key, value in overrides.items():
        config.objective[key] = value
    if overrides["name"] == "in_batch" or overrides.get("negatives") == "in_batch":
        config.objective.num_negatives = 0  # the batch alone (no mixed negatives)
    return config


def train(model, examples: dict, seconds: float, max_steps: int) -> tuple[int, float]:
    """Adam at a constant learning rate until ``seconds`` of wall time (tracing included) or ``max_steps``."""
    import tensorflow as tf

    from retrieval.data import to_dataset

    class Budget(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.start, self.steps = time.perf_counter(), 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps >= max_steps or time.perf_counter() - self.start >= seconds:
                self.model.stop_training = True

    model.compile(optimizer=tf.keras.optimizers.Adam(LEARNING_RATE), jit_compile=model.xla_compatible)
    budget = Budget()
    dataset = to_dataset(examples, BATCH, shuffle=True, seed=SEED, repeat=True)
    model.fit(dataset, epochs=1, steps_per_epoch=10**9, callbacks=[budget], verbose=0)
    return budget.steps, time.perf_counter() - budget.start


def infonce_bound(model, examples: dict, batches: int = 8) -> float:
    """``log N - L`` in nats: InfoNCE's bound with the trained critic ``s / T`` on ``batches`` batches of ``N``."""
    import tensorflow as tf

    from retrieval import losses

    rows = np.random.default_rng(SEED).permutation(len(examples["label"]))
    n = min(BATCH, len(rows))
    values = []
    for b in range(min(batches, len(rows) // n)):
        take = rows[b * n:(b + 1) * n]
        query = model({key: tf.constant(examples[key][take]) for key in ("user", "history")})
        candidates = model.item_tower(tf.constant(examples["label"][take]))
        values.append(float(tf.reduce_mean(losses.in_batch_softmax(query, candidates,
                                                                   temperature=model.temperature))))
    return float(np.log(n) - np.mean(values))


def quality_rows(dataset: str, seconds: float, max_steps: int, n_bootstrap: int) -> list[dict]:
    import tensorflow as tf

    from retrieval import models
    from retrieval.evaluation import evaluator

    data = prepare(dataset)
    items, users = data["items"], data["users"]
    rows, metrics = [], {}
    for name, overrides in OBJECTIVES:
        tf.keras.utils.set_random_seed(SEED)
        model = models.build_model(_config(overrides, items.size - 2), items, users)
        steps, train_s = train(model, data["examples"], seconds, max_steps)
        user_vectors = model.user_vectors(tf.range(users.size), tf.constant(data["histories"])).numpy()
        item_vectors = model.item_vectors(tf.range(items.size)).numpy()
        metrics = evaluator.evaluate(user_vectors, item_vectors, data["train"], data["test"], ks=(20,),
                                     popularity=items.counts, baselines=("most_popular",), n_bootstrap=n_bootstrap,
                                     seed=SEED)
        rows.append({"study": "quality", "dataset": dataset, "objective": name, **_quality(metrics, ""),
                     "train_s": round(train_s, 1), "steps": steps,
                     "infonce_bound_nats": round(infonce_bound(model, data["examples"]), 3),
                     "protocol": PROTOCOLS[dataset]})
    rows.append({"study": "quality", "dataset": dataset, "objective": "most-popular (baseline)",
                 **_quality(metrics, "baseline/most_popular/"), "protocol": PROTOCOLS[dataset]})
    return rows


def _quality(metrics: dict, prefix: str) -> dict:
    row = {}
    for key in ("recall@20", "ndcg@20"):
        row[key] = round(metrics[prefix + key], 4)
        if f"{prefix}{key}_ci_low" in metrics:
            row[f"{key} 95% CI"] = f"[{metrics[prefix + key + '_ci_low']:.4f}, {metrics[prefix + key + '_ci_high']:.4f}]"
    row["avg_popularity@20"] = round(metrics[prefix + "avg_popularity@20"], 1)
    row["tail_share@20"] = round(metrics[prefix + "tail_share@20"], 4)
    return row


def self_normalised(raw_query, table) -> tuple:
    """``(query, items)`` of a self-normalised model: each query carries ``-log Z`` (over the items from index 2) as
    one more dimension against a constant 1 on every item, so ``sum_j exp(q_i . e_j) = 1``."""
    import tensorflow as tf

    items = tf.concat([table, tf.ones([table.shape[0], 1])], axis=1)
    log_z = tf.reduce_logsumexp(tf.matmul(raw_query, table, transpose_b=True)[:, 2:], axis=1, keepdims=True)
    return tf.concat([raw_query, -log_z], axis=1), items


def negative_phase_gradient(query, items, labels, loss_fn) -> np.ndarray:
    """Gradient of ``mean(loss + positive score)`` w.r.t. the queries and per-item biases (zero): the negative phase
    of a loss, whose direction an unbiased estimator of the full softmax shares. ``loss_fn(bias)`` -> ``[B]``."""
    import tensorflow as tf

    bias = tf.zeros([items.shape[0]])
    with tf.GradientTape() as tape:
        tape.watch([query, bias])
        positive = tf.reduce_sum(query * tf.gather(items, labels), 1) + tf.gather(bias, labels)
        loss = tf.reduce_mean(loss_fn(bias) + positive)
    grad_query, grad_bias = tape.gradient(loss, [query, bias])
    return np.r_[grad_query.numpy().ravel(), tf.convert_to_tensor(grad_bias).numpy()]


def gradient_rows(sizes: tuple, draws: int = 16) -> list[dict]:
    """Cosine of each sampled objective's draw-averaged negative phase with the full softmax's, per ``S``."""
    import tensorflow as tf

    from retrieval import losses
    from retrieval.sampling import CandidateSampler

    num_items, dim, batch = 2000, 16, 64
    vocab = num_items + 2
    rng = np.random.default_rng(SEED)
    tf.random.set_seed(SEED)
    counts = np.r_[0, 0, 1e6 / np.arange(1, num_items + 1)]
    table = tf.constant(rng.normal(scale=0.3, size=(vocab, dim)).astype(np.float32))
    raw_query = tf.constant(rng.normal(size=(batch, dim)).astype(np.float32))
    labels = tf.constant(rng.choice(vocab, size=batch, p=counts / counts.sum()), tf.int64)
    query, items = self_normalised(raw_query, table)

    def negative_phase(loss_fn) -> np.ndarray:
        return negative_phase_gradient(query, items, labels, loss_fn)

    full = negative_phase(lambda bias: losses.full_softmax(tf.concat([query, tf.ones([batch, 1])], 1),
                                                           tf.concat([items, bias[:, None]], 1), labels))
    rows = []
    for name in ("sampled_softmax", "nce", "negative_sampling", "sampled_logistic"):
        loss = getattr(losses, name)
        row = {"study": "gradient", "objective": name}
        for size in sizes:
            sampler = CandidateSampler("unigram", size, vocab, unigrams=counts, distortion=1.0, unique=False,
                                       seed=SEED)

            def sampled(bias, loss=loss, sampler=sampler, name=name):
                ids, log_q, true_log_q = sampler.sample(labels)
                log_q_args = () if name == "negative_sampling" else (true_log_q, log_q)
                ids_args = (labels, ids) if name in ("sampled_softmax", "sampled_logistic") else ()
                return loss(query, tf.gather(items, labels), tf.gather(items, ids), *log_q_args, *ids_args,
                            positive_bias=tf.gather(bias, labels), negative_bias=tf.gather(bias, ids))

            mean = np.mean([negative_phase(sampled) for _ in range(draws)], axis=0)
            row[f"cosine_S{size}"] = round(float(mean @ full / np.linalg.norm(mean) / np.linalg.norm(full)), 3)
        rows.append(row)
    return rows


def run(smoke: bool, seconds: float = SECONDS) -> list[dict]:
    """Quality rows per dataset (every objective, then most-popular), then the gradient-bias rows."""
    if smoke:
        rows = quality_rows("synthetic-smoke", seconds=60.0, max_steps=3, n_bootstrap=0)
        return rows + gradient_rows(GRADIENT_SIZES_SMOKE, draws=2)
    rows = []
    for dataset in ("ml-1m-set", "beauty-seq"):
        rows += quality_rows(dataset, seconds=seconds, max_steps=10**9, n_bootstrap=200)
    return rows + gradient_rows(GRADIENT_SIZES)


def plot(rows: list[dict], path: str) -> None:
    """The study in one figure: recall@20 against the tail share of the recommendations per objective and dataset
    (quality bought with exposure), and each sampled objective's gradient cosine with the full softmax against the
    number of negatives (its bias)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quality = [r for r in rows if r.get("study") == "quality" and "tail_share@20" in r]
    gradient = [r for r in rows if r.get("study") == "gradient"]
    datasets = sorted({r["dataset"] for r in quality})
    figure, axes = plt.subplots(1, len(datasets) + 1, figsize=(5 * (len(datasets) + 1), 4.2))
    for axis, dataset in zip(axes, datasets, strict=False):
        for r in (r for r in quality if r["dataset"] == dataset):
            axis.scatter(r["tail_share@20"], r["recall@20"], s=25)
            axis.annotate(r["objective"], (r["tail_share@20"], r["recall@20"]), fontsize=7, xytext=(3, 2),
                          textcoords="offset points")
        axis.set(title=dataset, xlabel="tail share of the top 20", ylabel="recall@20")
    axis = axes[-1]
    for r in gradient:
        sizes = sorted(int(k.split("_S")[1]) for k in r if k.startswith("cosine_S"))
        axis.plot(sizes, [r[f"cosine_S{size}"] for size in sizes], marker="o", label=r["objective"])
    axis.set(xscale="log", title="gradient vs full softmax", xlabel="negatives S", ylabel="cosine")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, 3 steps per objective")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="training wall time per objective")
    parser.add_argument("--plot", default="", help="also draw the study into this PNG file")
    parser.add_argument("--from_rows", default="", help="plot the rows of an earlier run (JSON lines) instead of "
                                                        "running the study")
    args = parser.parse_args()
    if args.from_rows:
        with open(args.from_rows) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    else:
        rows = run(args.smoke, args.seconds)
        for row in rows:
            print(json.dumps(row))
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
