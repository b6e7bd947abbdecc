"""Settings the configuration files and their validation need without loading TensorFlow: the choices of keys
read by TensorFlow modules, and the documented defaults of ``config.train``.

``retrieval.jobs.config_checks`` checks a whole configuration before any work; importing the modules that read
these keys (``retrieval.training``, ``retrieval.distributed``, ``retrieval.evaluation``, ``retrieval.jobs.job``)
would load TensorFlow first (seconds to a minute), so their choices live here and those modules import them.
"""

from __future__ import annotations

import ml_collections

from retrieval import locations
from retrieval.config_keys import (
    BATCH,
    COUNT,
    EPOCHS,
    MAX_CHECKPOINTS,
    MAX_EPOCHS,
    MAX_K,
    SEED,
    STEPS,
    Key,
    Needs,
    Section,
    flag,
    integer,
    names,
    number,
    one_of,
    text,
)

MODEL_TYPES = ("two_tower", "item2vec")  # retrieval.jobs.job: which trainer runs
STRATEGIES = ("default", "mirrored", "multi_worker", "parameter_server")  # retrieval.distributed
DEFAULT_KS = (10, 20, 50, 100)  # retrieval.evaluation.evaluator: cut-offs reported by default
CI_METRICS = ("recall", "ndcg")  # retrieval.evaluation.evaluator: metrics with bootstrap intervals
# retrieval.training
OPTIMIZERS = ("adam", "adagrad", "rowwise_adagrad")
JIT_COMPILE = ("auto", "on", "off")
SCHEDULES = ("constant", "cosine")
TEACHER_WHEN = ("always", "item_item_leads")  # retrieval.jobs.tuning: when train.teacher_items trains the towers
TEACHER_WEIGHTING = ("equal", "score")  # retrieval.jobs.teacher: what a teacher pair weighs in the loss
# retrieval.jobs.teacher: the baselines that can teach the towers (retrieval.evaluation.baselines.BASELINES, each
# scoring every item for a user from her items); adding a teacher: its baseline, and its name here.
TEACHERS = ("rp3beta", "item_knn", "ease")
VARIANTS = ("softer", "self_attention", "user_ids")  # retrieval.jobs.variants: what the tuning phase may try beside the configured towers
SPARSE_UPDATES = ("auto", "on", "off")
PS_MIN_SHARD_BYTES = 256 << 10  # retrieval.parameter_server: MinSizePartitioner's default, tables up to 256 KiB whole
PS_TIMEOUT_S = 120.0  # retrieval.parameter_server: the default wait for a lost task (train.ps_timeout_s)
SPARSE_UPDATES_MIN_ROWS = 30_000  # "auto": lazy optimizer from this many rows in the largest embedding table


# The train section (``config.train``), declared once (retrieval.config_keys): each key's default, rule and meaning.
# The top-level keys of every pipeline config.
TOP = Section("", (
    Key("name", "run", text(pattern=locations.NAME_PATTERN.pattern, pattern_doc=locations.NAME_RULE),
        "Name of the model directory: runs go to <output_dir>/<name>/<run_id>/, the published one is <name>/latest."),
    Key("seed", 42, SEED,
        "Seed of every random choice (split, sampling, initialisation, shuffling); recorded in the run's manifest."),
    Key("model_type", "two_tower", one_of(MODEL_TYPES),
        'Which trainer runs: "two_tower" (TwoTowerModel) or "item2vec".'),
), __name__)

TRAIN = Section("train", (
    Key("epochs", 8, EPOCHS,
        "Passes over the training examples; training runs exactly epochs * ceil(examples / batch_size) steps. "
        "(Validation recall plateaus after 4-8 epochs on the bundled data and MovieLens-1M.)"),
    Key("batch_size", 1024, BATCH,
        "Global batch size (split across replicas). In-batch negatives: larger batches give more negatives."),
    Key("optimizer", "adam", one_of(OPTIMIZERS),
        'Optimizer: "adam", "adagrad" or "rowwise_adagrad" (embedding tables keep one Adagrad accumulator per row, the '
        "mean of the row's squared gradient: the cheapest step for large catalogues; other weights get Adagrad; "
        "docs/sparse-updates.md), its peak learning rate and decoupled weight decay (AdamW-style; 0: none; biases are "
        "exempt)."),
    Key("learning_rate", 0.003, number(0, 100)),
    Key("weight_decay", 0.0, number(0, 100)),
    Key("schedule", "cosine", one_of(SCHEDULES),
        'Learning-rate schedule: "constant" or "cosine" (decay to min_learning_rate_ratio * learning_rate at the last '
        "step), after warmup_steps of linear warmup from 0 (both schedules)."),
    Key("warmup_steps", 100, integer(0, COUNT)),
    Key("min_learning_rate_ratio", 0.0, number(0, 1)),
    Key("checkpoint_every_steps", 1000, STEPS,
        "Save a checkpoint every this many steps (and always at the end); keep this many."),
    Key("keep_checkpoints", 3, integer(1, MAX_CHECKPOINTS)),
    Key("log_every_steps", 100, STEPS,
        "Log loss and examples/s through absl (and to TensorBoard) every this many steps."),
    Key("steps_per_execution", 4, integer(1, 1000),
        "Training steps per call into TensorFlow (Keras steps_per_execution): fewer Python round trips per step, "
        "+10-25% examples/s at 4 on 2 CPU cores (benchmarks/bench_training.py). Callbacks (logging, checkpoints, the "
        "stop at the last step) run between calls, at the first step reaching their multiple; the value used divides "
        "checkpoint_every_steps and log_every_steps, and is 1 under parameter-server training and in a run resumed "
        "mid-epoch."),
    Key("eval_every_epochs", 1, EPOCHS,
        "Early stopping on the validation metric returned by evaluate_fn (higher is better), run every "
        "eval_every_epochs epochs (at least 1); stop after early_stopping_patience evaluations without improvement and "
        "restore the best weights. early_stopping_patience 0: never stop early."),
    Key("early_stopping_patience", 0, integer(0, MAX_EPOCHS)),
    Key("validation_fraction", 0.1, number(0, 0.5, high_open=False),
        "With early stopping and no validation data given (data.validation_path, data.validation), the run holds out "
        "this share of each user's training items itself (sets: at random; sequences: the last item, of a sample of "
        "train.sequence_holdout_users users), early-stops on "
        "it, and then, with refit, trains the final model on all training data for the best epoch count (the test data "
        "is not used for either). 0: no automatic holdout (early stopping then needs validation data)."),
    Key("sequence_holdout_users", 5000, integer(0, 10**9),
        "On sequences, the automatic holdout is the last item of a seeded sample of this many users (0: of every "
        "user; every user too where there are no more). The tuned model then has the other users' last items among "
        "its targets, so a refit from scratch adds little (the self-attentive variant skips it), and early stopping "
        "ranks a sample's users, not all."),
    Key("refit", True, flag()),
    Key("refit_epochs", 0, integer(0, MAX_EPOCHS),
        "With refit: 0 trains the final model from scratch for the best epoch count; N > 0 continues from the tuned "
        "model's best weights on all training data for N epochs instead (the holdout's items enter the model), from the "
        "learning rate the tuning schedule had reached at its best epoch and decaying by the schedule to its end: the "
        'refit then costs N epochs, not best-epoch-many (benchmarks/JOURNAL.md, "Issue 36").'),
    Key("teacher_items", 0, integer(0, 1000),
        "Set data held in memory: each user's top N unseen items under the run's train.teacher (its parameters tuned on "
        "the automatic holdout as the report's baseline is, fitted on the phase's training pairs) join the training "
        "targets, their histories the user's own items (retrieval.jobs.teacher). 0: no teacher."),
    Key("teacher", "rp3beta", one_of(TEACHERS),
        "With train.teacher_items: the item-item baseline that teaches the towers (retrieval.evaluation.baselines), with "
        "the parameters the run tunes for its report when eval.baselines lists it, else its defaults. RP3beta, where "
        'item-item structure is strong (Gowalla: benchmarks/JOURNAL.md, "Issue 47").'),
    Key("teacher_weighting", "equal", one_of(TEACHER_WEIGHTING),
        'With train.teacher_items: "equal" weighs every teacher pair as one click; "score" weighs it by its teacher '
        "score over the user's best teacher score (her first teacher item 1, the others as sure as the teacher is)."),
    Key("teacher_when", "always", one_of(TEACHER_WHEN),
        'With train.teacher_items: "always", or "item_item_leads": the towers are tuned without the teacher first, and '
        "again with it only when the run's tuned teacher reads a higher validation recall than their best epoch; the "
        "better of the two on the holdout is kept, and the refit follows it (retrieval/jobs/tuning.py, tune; needs the "
        "automatic holdout, else no teacher)."),
    Key("teacher_probe_epochs", 0, integer(0, MAX_EPOCHS),
        'With train.teacher_when = "item_item_leads": N > 0 makes the first tuning a probe, which gives up after its '
        "epoch N when the towers read below 0.9 x the tuned teacher's validation recall there, and the towers are "
        "tuned with the teacher at once (kept: the probe is not a finished tuning to compare with); 0: the first "
        "tuning runs to its end (retrieval/jobs/tuning.py, PROBE_SHARE)."),
    Key("teacher_variant", "", one_of(("",) + VARIANTS),
        'With train.teacher_when = "item_item_leads": a variant of train.variants\' registry the towers tuned with the '
        'teacher also take ("user_ids": a user-id embedding, which with the teacher lifted Gowalla\'s holdout above '
        "the tuned RP3beta; retrieval/jobs/variants.py). Empty: the teacher alone."),
    Key("variants", (), names(VARIANTS),
        "With the automatic holdout: variants of the configured towers tuned after them, each on the same holdout, the "
        "one with the highest validation metric kept, by more than train.variant_min_gain (the refit and the export "
        "follow it; the report says which): "
        '"softer" doubles model.temperature; "self_attention" (sequences held in memory) trains the self-attentive user '
        "tower of configs/sequential.py (retrieval/jobs/variants.py). Tried only where the tuning part has at most "
        "train.variant_max_examples training examples, so small logs get the choice and large ones keep one tuning."),
    Key("variant_max_examples", 250_000, integer(0, COUNT),
        "See train.variants: the size of the tuning part's examples up to which variants are tried (a count of the "
        "data, not a time, so the choice is the same on a loaded machine and an idle one). 250,000: the bundled "
        "data, MovieLens-100K, Last.fm and Amazon Beauty (60k-130k) get it, MovieLens-1M's sets (530k), Gowalla and "
        "Yelp2018 do not."),
    Key("variant_min_gain", 0.02, number(0, 1),
        "A variant replaces the towers kept so far only when its validation metric is higher by more than this "
        "fraction of theirs: a near tie keeps the earlier, simpler towers, so the choice does not flip between "
        'machines on a difference the holdout cannot resolve (measured: docs/objectives.md, "Measurements behind the '
        'keys").'),
    Key("time_budget_s", 0.0, number(0, 7 * 86_400),
        "Seconds the whole run should take (0: no budget, train.epochs epochs): the baselines are tuned before training "
        "and the rest of the run is estimated, then training measures its first epoch and takes as many epochs as the "
        "time left holds (at most train.epochs; the cosine spans them; early stopping still ends it sooner), keeping "
        "room for the refit. Where a slower or busier machine left too little for it, a warm refit "
        "(train.refit_epochs) plans its own epochs the same way (at least one) and a refit from scratch is skipped: "
        "the tuned model is the final one (retrieval/jobs/budget.py). A target, not a guarantee: the estimates are a "
        "2-core machine's."),
    Key("large_catalogue_items", 0, integer(0, COUNT),
        "From this many catalogue items on (0: never), the run trains on the large-catalogue schedule: the keys under "
        "train.large_catalogue replace their train.* namesakes (logged, recorded in the train stage's summary). "
        "configs/two_tower.py sets 20,000: on set-splits/yelp2018 (38,048 items, ~1M training pairs) its own schedule "
        "takes over 15 minutes on 2 cores, and the shorter one reads as well there, while on the smaller sets it "
        'measured (ml-1m, lastfm, amazon-beauty) the shorter one cost quality (benchmarks/JOURNAL.md, "Issue 36").'),
    Key("large_catalogue.epochs", 12, EPOCHS),
    Key("large_catalogue.early_stopping_patience", 3, integer(0, MAX_EPOCHS)),
    Key("large_catalogue.min_learning_rate_ratio", 0.1, number(0, 1)),
    Key("large_catalogue.eval_max_users", 10_000, integer(0, COUNT)),
    Key("large_catalogue.refit_epochs", 2, integer(0, MAX_EPOCHS)),
    Key("large_catalogue.teacher_probe_epochs", 3, integer(0, MAX_EPOCHS)),
    Key("eval_metric_name", "val_recall", text(nonempty=True),
        "Name under which the validation metric is logged (Keras logs, TensorBoard)."),
    Key("eval_k", 20, integer(1, MAX_K),
        "Cut-off of the validation recall the pipeline computes for early stopping (validation data required: "
        'data.validation_path with split "files", or data.validation with leave_last_n).'),
    Key("eval_max_users", 0, integer(0, COUNT),
        "Validation recall on a seeded uniform sample of this many validation users (only their rows are read): each "
        "evaluation then costs a fraction of the full-corpus ranking of every user, and the sample is the same at every "
        "epoch, so epochs compare on the same users. 0: eval.max_users (itself 0: every validation user)."),
    Key("strategy", "default", one_of(STRATEGIES),
        'Distribution strategy: "default" (one device), "mirrored" (local GPUs), "multi_worker" (TF_CONFIG), or '
        '"parameter_server" (TF_CONFIG with ps tasks: tables too large for a worker, split across the ps tasks).'),
    Key("ps_shards", 0, integer(0, 4096),
        "parameter_server: shards per large table (0: one per ps task); a table (or dense kernel) of S bytes gets "
        "min(ps_shards, ceil(S / ps_min_shard_bytes)) shards, so tables up to ps_min_shard_bytes stay whole "
        "(tf.distribute.experimental.partitioners.MinSizePartitioner)."),
    Key("ps_min_shard_bytes", PS_MIN_SHARD_BYTES, integer(1, 1 << 40)),
    Key("ps_timeout_s", PS_TIMEOUT_S, number(0, 86_400, low_open=True),
        "parameter_server: seconds the chief waits for a lost ps task, or for any worker when none is reachable, before "
        "it stops with exit 2 (the run keeps its last checkpoint: restart the tasks and rerun the run id to resume)."),
    Key("seed", 42, SEED,
        "Seed of the shuffling (the pipelines set it from the top-level `seed`)."),
    Key("jit_compile", "auto", one_of(JIT_COMPILE),
        'XLA-compile the training step: "auto" (on when the objective samples no negatives (in-batch without extra '
        'negatives, full softmax) and training runs on one replica), "on" or "off". XLA fuses the step, sums the '
        "embedding gradients densely and pools the history in chunks fused with its lookup (layers.sum_over_positions): "
        "2.1x the examples/s on 2 CPU cores (benchmarks/bench_training.py).",
        needs=(Needs(lambda jit, c: jit != "on" or c["train.strategy"] != "parameter_server",
                     "XLA is not available under parameter_server; use 'auto' or 'off'"),)),
    Key("sparse_updates", "auto", one_of(SPARSE_UPDATES),
        "Lazy (row-wise sparse) optimizer updates of the embedding tables (retrieval/optimizers.py, "
        "docs/sparse-updates.md): a step updates only the rows the batch looked up, and their moments, so its cost does "
        "not grow with the catalogue; Adam's lazy form pays each row the moves dense Adam made while it was not looked "
        "up (CatchUpAdam), and a table a batch reads by at least half its rows in slots steps densely. "
        '"auto": on when the largest embedding table has at least SPARSE_UPDATES_MIN_ROWS '
        'rows (30,000: Gowalla, Yelp2018); "on" or "off". Dense layers always get the optimizer\'s ordinary update.'),
), __name__)


def default_train_config() -> ml_collections.ConfigDict:
    """Returns a new ``config.train`` section of the declared defaults."""
    return TRAIN.config()
