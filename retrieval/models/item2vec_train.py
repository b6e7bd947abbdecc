"""Item2Vec training internals: the noise sampler, per-epoch skip-gram pairs and the compiled SGNS loop.

The public entry point is :func:`retrieval.models.item2vec.train_item2vec`; this module holds the machinery it runs.

Speed and memory (2 CPU cores, ML-1M; ``benchmarks/bench_item2vec.py``, figures in ``docs/item2vec.md``): SGNS
touches ``2 + K`` rows of 64 floats per pair and does ~20 short vector operations on them, so it is bound by
per-operation overhead, not arithmetic. The TensorFlow version (one ``tf.function`` of many steps, closed-form
gradients, XLA-compiled ``scatter_sub``) reached 8M pairs/s once traced, but paid ~0.8 s of tracing and XLA
compilation per run and ~465 MB of TensorFlow in the process (1.9x gensim's peak RSS before training began). The
loop here is one Numba-compiled function (``numba`` installs as a wheel from PyPI, no compiler needed; compiled
code is cached on disk beside this module, so only the first run after an install compiles): per pair it reads the
rows in place, computes the ``1 + K`` dot products, and applies word2vec's SGD update to exactly those rows, with no
gathers, scatters or temporaries. An epoch's pairs are written by a second compiled function straight into their
(shuffled) arrays, in a background thread while the previous epoch trains (both release the GIL, ``nogil``).

Determinism: windows, subsamples and shuffles come from numpy generators keyed by ``(seed, epoch)``; negatives from
a splitmix64 stream keyed by ``(seed, epoch, step)`` inside the loop; pairs are applied in one fixed order. A run is
bit-reproducible under its seed, and a run resumed from a checkpoint (taken between steps) continues the very same
stream.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Callable, Optional

import ml_collections
import numba
import numpy as np
from absl import logging

from retrieval.data.examples import _subsample as subsample_mask  # the one copy of the subsampling rule
from retrieval.data.examples import noise_distribution
from retrieval.data.vocab import NUM_RESERVED
from retrieval.errors import InputError

# fastmath without "nnan"/"ninf": the divergence check must see inf and nan.
_FAST = {"reassoc", "contract", "nsz", "arcp", "afn"}
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# s(x) on a grid over [-LIMIT, LIMIT], read with linear interpolation (error < 2e-6; word2vec and gensim read it
# from a 1,000-entry table over [-6, 6] without interpolation): two loads and a multiply-add instead of an exp.
# Beyond the grid s is 0 or 1 (error < 7e-6).
_LIMIT, _BINS = 12.0, 2048
_SIGMOID = 1.0 / (1.0 + np.exp(-np.linspace(-_LIMIT, _LIMIT, _BINS + 1)))
_SCALE = _BINS / (2 * _LIMIT)
# The loss (exact: softplus) is summed over the pairs whose index in the epoch is a multiple of LOSS_EVERY only: it is
# for the log and the divergence check, and computing it for every pair cost ~10% of the loop.
LOSS_EVERY = 16


def _generator(seed: int, *words: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), *words]))


def _stream_seed(seed: int, epoch: int) -> np.uint64:
    """The 64-bit key of an epoch's negative stream (step ``s`` then uses ``key + s * golden``)."""
    return np.random.SeedSequence([int(seed), int(epoch), 3]).generate_state(1, np.uint64)[0]


@numba.njit(inline="always")
def _splitmix64(state: np.ndarray) -> np.uint64:
    """Next value of the splitmix64 generator whose state is ``state[0]`` (advanced in place)."""
    state[0] += _GOLDEN
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(inline="always")
def _draw(prob: np.ndarray, alias: np.ndarray, state: np.ndarray) -> int:
    """One alias-method draw: the high 32 bits pick a column, the low 32 bits accept it or take its alias."""
    bits = _splitmix64(state)
    column = int((bits >> np.uint64(32)) * np.uint64(len(prob)) >> np.uint64(32))
    accept = float(bits & np.uint64(0xFFFFFFFF)) * (1.0 / 4294967296.0)
    return column if accept < prob[column] else alias[column]


@numba.njit(inline="always", fastmath=_FAST)
def _sigmoid(x: float) -> float:
    """``s(x)`` from the table above (nan gives 0)."""
    if x >= _LIMIT:
        return 1.0
    if not x > -_LIMIT:
        return 0.0
    r = (x + _LIMIT) * _SCALE
    i = min(int(r), _BINS - 1)
    return _SIGMOID[i] + (r - i) * (_SIGMOID[i + 1] - _SIGMOID[i])


@numba.njit(inline="always", fastmath=_FAST)
def _softplus(x: float) -> float:
    """``log(1 + e^x) = -log s(-x)``, stable; nan and inf pass through."""
    return max(x, 0.0) + np.log1p(np.exp(-abs(x)))


@numba.njit(nogil=True, cache=True)
def _sample(prob: np.ndarray, alias: np.ndarray, n: int, key: np.uint64) -> np.ndarray:
    state = np.array([key], np.uint64)
    out = np.empty(n, np.int32)
    for i in range(n):
        out[i] = _draw(prob, alias, state)
    return out


class NoiseSampler:
    """Draws item indices from the SGNS noise ``P(i) = count_i^alpha / sum_j count_j^alpha`` (``noise_distribution``).

    Vose's alias method: O(V) to build, O(1) per draw (one 64-bit random number: a column and an acceptance test),
    exact up to float64 rounding of ``P``. Chosen over inverse-CDF search (O(log V) per draw, ~5x slower here) and
    word2vec's fixed-size unigram table (which rounds every probability to a multiple of 1 / table size and never
    draws the rarest items). Pad / OOV (count 0) are never drawn: their column always takes its alias.
    """

    def __init__(self, counts: np.ndarray, alpha: float = 0.75):
        p = noise_distribution(counts, alpha)
        n = len(p)
        scaled = p * n
        prob, alias = np.zeros(n, np.float64), np.arange(n, dtype=np.int32)
        small, large = [i for i in range(n) if scaled[i] < 1.0], [i for i in range(n) if scaled[i] >= 1.0]
        while small and large:
            s, g = small.pop(), large.pop()
            prob[s], alias[s] = scaled[s], g
            scaled[g] -= 1.0 - scaled[s]
            (small if scaled[g] < 1.0 else large).append(g)
        for i in large + small:  # what is left has probability 1 up to rounding (never a zero-count column)
            prob[i] = 1.0 if p[i] > 0 else 0.0
        self.prob, self.alias = prob, alias

    def sample(self, n: int, key: int) -> np.ndarray:
        """``n`` int32 draws of the stream keyed by ``key`` (the same stream the training loop draws from)."""
        return _sample(self.prob, self.alias, int(n), np.uint64(key))


def initial_tables(num_items: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """word2vec's initialisation: the target (input) table ``U(-0.5/d, 0.5/d)``, the context (output) table zero;
    float32 ``[num_items, dim]`` each."""
    target = _generator(seed, 4).uniform(-0.5 / dim, 0.5 / dim, size=(num_items, dim)).astype(np.float32)
    return target, np.zeros((num_items, dim), np.float32)


def table_vectors(target: np.ndarray, context: np.ndarray, which: str) -> np.ndarray:
    """Item vectors by index: the target table (``"input"``) or the mean of both tables (``"average"``); rows 0 and
    1 (pad, OOV) zero."""
    table = (target + context) / 2 if which == "average" else target.copy()
    table[:NUM_RESERVED] = 0.0
    return table.astype(np.float32)


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def sgns_steps(target_table, context_table, targets, contexts, prob, alias, negatives, group, batch_size, key,
               first_step, num_steps, lr_start, lr_slope):
    """Runs SGD steps ``first_step .. first_step + num_steps - 1`` (step ``s``: pairs ``s * batch_size ..``, in
    order) on the tables in place and returns the summed SGNS loss (float64) of those pairs whose index is a multiple
    of ``LOSS_EVERY``.

    For a pair (target ``t``, context ``c``) with negatives ``n_1..n_K`` (a fresh draw for every ``group``
    consecutive pairs of a step, from the stream ``key + s * golden``), with ``u = target_table[t]`` and
    ``v_x = context_table[x]``: ``loss = softplus(-u.v_c) + sum_k softplus(u.v_{n_k})`` (``= -log s(u.v_c) -
    sum_k log s(-u.v_{n_k})``), and one SGD step of size ``lr`` on it: ``v_c -= lr (s(u.v_c) - 1) u``,
    ``v_{n_k} -= lr s(u.v_{n_k}) u``, ``u -= lr ((s(u.v_c) - 1) v_c + sum_k s(u.v_{n_k}) v_{n_k})``, every
    gradient taken at the rows before the update (repeated rows accumulate): word2vec's update, Mikolov et al. 2013.
    ``lr = lr_start + lr_slope * s``: the learning rate is constant within a step. ``s`` is read from an
    interpolated table (``_sigmoid``).
    Calls on disjoint step ranges may run concurrently on the same tables (Hogwild; ``train_epochs``' threads).
    """
    dim = target_table.shape[1]
    neu = np.empty(dim, np.float32)
    drawn = np.empty(negatives, np.int32)
    grads = np.empty(negatives, np.float32)
    state = np.empty(1, np.uint64)
    total = 0.0
    num_pairs = len(targets)
    for step in range(first_step, first_step + num_steps):
        lr = lr_start + lr_slope * step
        state[0] = key + np.uint64(step) * np.uint64(0x9E3779B97F4A7C15)
        start = step * batch_size
        for p in range(start, min(start + batch_size, num_pairs)):
            if (p - start) % group == 0:
                for k in range(negatives):
                    drawn[k] = _draw(prob, alias, state)
            u = target_table[targets[p]]
            v = context_table[contexts[p]]
            score = np.float32(0.0)
            for j in range(dim):
                score += u[j] * v[j]
            g_pos = np.float32(lr * (1.0 - _sigmoid(score)))
            sampled = p % LOSS_EVERY == 0
            if sampled:
                total += _softplus(-score)
            for k in range(negatives):
                n = context_table[drawn[k]]
                s = np.float32(0.0)
                for j in range(dim):
                    s += u[j] * n[j]
                grads[k] = np.float32(-lr * _sigmoid(s))
                if sampled:
                    total += _softplus(s)
            for j in range(dim):
                neu[j] = g_pos * v[j]
            for k in range(negatives):
                n = context_table[drawn[k]]
                g = grads[k]
                for j in range(dim):
                    neu[j] += g * n[j]
            for j in range(dim):
                v[j] += g_pos * u[j]
            for k in range(negatives):
                n = context_table[drawn[k]]
                g = grads[k]
                for j in range(dim):
                    n[j] += g * u[j]
            for j in range(dim):
                u[j] += neu[j]
    return total


def compile_loop() -> float:
    """Compiles the training loop and the sampler into Numba's on-disk cache (or loads them from it); returns the
    seconds it took. Training does this on its first call anyway; benchmarks call it first to time the cached
    state, which is what every run after the first one sees."""
    started = time.perf_counter()
    tables = initial_tables(4, 2, 0)
    sampler = NoiseSampler(np.array([0, 0, 1, 1]))
    sampler.sample(1, 0)
    pairs = np.array([2, 3], np.int32)
    sgns_steps(*tables, pairs, pairs[::-1].copy(), sampler.prob, sampler.alias, 1, 1, 2, np.uint64(0), 0, 1, 0.0, 0.0)
    _window_pairs(np.zeros(2, np.int64), pairs, np.ones(1, np.int64), np.uint64(0))
    return time.perf_counter() - started


@numba.njit(nogil=True, cache=True)
def _window_pairs(users: np.ndarray, items: np.ndarray, windows: np.ndarray, key: np.uint64):
    """Both directions of every two entries of the same user at most ``windows[user]`` positions apart (``users``
    sorted), as two int32 arrays, shuffled in place (Fisher-Yates on the splitmix64 stream ``key``)."""
    n, count = len(items), 0
    for i in range(n):
        for j in range(i + 1, min(i + windows[users[i]] + 1, n)):
            if users[j] != users[i]:
                break
            count += 2
    targets, contexts = np.empty(count, np.int32), np.empty(count, np.int32)
    at = 0
    for i in range(n):
        for j in range(i + 1, min(i + windows[users[i]] + 1, n)):
            if users[j] != users[i]:
                break
            targets[at], contexts[at], targets[at + 1], contexts[at + 1] = items[i], items[j], items[j], items[i]
            at += 2
    state = np.array([key], np.uint64)
    for i in range(count - 1, 0, -1):
        j = int((_splitmix64(state) >> np.uint64(32)) * np.uint64(i + 1) >> np.uint64(32))
        targets[i], targets[j] = targets[j], targets[i]
        contexts[i], contexts[j] = contexts[j], contexts[i]
    return targets, contexts


def epoch_pairs(users: np.ndarray, items: np.ndarray, counts: np.ndarray, config: ml_collections.ConfigDict,
                epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Shuffled (target, context) int32 arrays of one epoch: the pairs of ``skipgram_pairs`` over time-ordered
    sequences (``users``/``items`` sorted by user, then time; pad/OOV dropped, then frequent items subsampled with a
    fresh draw per epoch, as word2vec draws it again on every pass), built in one compiled pass into their final
    arrays (no per-distance temporaries: the fixed-window epoch of ML-1M holds ~5.7M pairs).

    With ``shrink_window``, each user gets a window ``b ~ U{1..window}`` for the epoch (word2vec's dynamic window,
    drawn per user and epoch instead of per target occurrence): a pair ``k`` positions apart is then trained with
    probability ``(window - k + 1) / window``, word2vec's expected weighting of near context, from about
    ``(window + 1) / (2 * window)`` of the pairs.
    """
    windows = np.full(int(users.max(initial=0)) + 1, config.window, np.int64)
    if config.shrink_window:
        windows = _generator(config.seed, epoch, 2).integers(1, config.window + 1, size=len(windows))
    kept = items >= NUM_RESERVED
    if config.subsample:
        kept &= subsample_mask(np.where(kept, items, 0), np.asarray(counts, np.float64), config.subsample,
                               _generator(config.seed, epoch, 0))
    key = np.random.SeedSequence([int(config.seed), int(epoch), 1]).generate_state(1, np.uint64)[0]
    return _window_pairs(np.asarray(users, np.int64)[kept], np.asarray(items, np.int32)[kept], windows, key)


def _checked_pairs(users, items, counts, config, epoch) -> tuple[np.ndarray, np.ndarray]:
    targets, contexts = epoch_pairs(users, items, counts, config, epoch)
    if len(targets) == 0:
        raise InputError("no skip-gram pairs: no user has two (kept) known items", field="item2vec")
    return targets, contexts


def train_epochs(tables: tuple[np.ndarray, np.ndarray], sampler: NoiseSampler, users: np.ndarray,
                 items: np.ndarray, counts: np.ndarray, config: ml_collections.ConfigDict, state: dict,
                 save: Optional[Callable[[], None]] = None) -> None:
    """Trains ``tables`` in place from ``state`` (``{"epoch", "step"}``: the next step to run, updated as it goes)
    to the end, logging loss, learning rate and pairs/s every ``log_every_steps`` and calling ``save`` every
    ``checkpoint_every_steps`` and at each epoch's end. The learning rate decays linearly with the fraction of all
    steps done, ``(epoch + step / steps_in_epoch) / epochs``, as word2vec's does with words processed; it depends
    on the step only, so a resumed run continues the same schedule. The next epoch's pairs are built in a
    background thread while this one trains."""
    chunk = max(int(config.log_every_steps), 1)
    batch, lr0, lr1 = int(config.batch_size), float(config.learning_rate), float(config.min_learning_rate)
    threads = int(config.threads)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1 + threads) as pool:
        upcoming = pool.submit(_checked_pairs, users, items, counts, config, state["epoch"])
        while state["epoch"] < config.epochs:
            epoch = state["epoch"]
            targets, contexts = upcoming.result()
            if epoch + 1 < config.epochs:
                upcoming = pool.submit(_checked_pairs, users, items, counts, config, epoch + 1)
            steps = -(-len(targets) // batch)
            key, since_save = _stream_seed(config.seed, epoch), 0
            lr_start = lr0 + (lr1 - lr0) * epoch / config.epochs
            lr_slope = (lr1 - lr0) / (config.epochs * steps)
            while state["step"] < steps:
                first = state["step"]
                count = min(chunk, steps - first)
                started = time.perf_counter()
                bounds = np.linspace(first, first + count, min(threads, count) + 1).astype(int)
                ranges = zip(bounds[:-1], bounds[1:], strict=True)
                parts = [pool.submit(sgns_steps, tables[0], tables[1], targets, contexts, sampler.prob, sampler.alias,
                                     int(config.negatives), int(config.negative_group), batch, key, int(lo),
                                     int(hi - lo), lr_start, lr_slope) for lo, hi in ranges]
                loss = sum(part.result() for part in parts)
                seconds = time.perf_counter() - started
                if not np.isfinite(loss):
                    raise InputError(f"item2vec diverged (loss {loss}) in epoch {epoch + 1}: lower learning_rate",
                                     field="item2vec.learning_rate")
                lo, hi = first * batch, min((first + count) * batch, len(targets))
                state["step"] = first + count
                logging.info("item2vec epoch %d/%d step %d/%d  loss %.4f  lr %.3g  %.0f pairs/s", epoch + 1,
                             config.epochs, first + count, steps, loss / max(len(range(lo, hi, LOSS_EVERY)), 1),
                             lr_start + lr_slope * (first + count), (hi - lo) / max(seconds, 1e-9))
                since_save += count
                if save is not None and since_save >= config.checkpoint_every_steps and first + count < steps:
                    save()
                    since_save = 0
            state["epoch"], state["step"] = epoch + 1, 0
            if save is not None:
                save()
