"""Offline evaluation: full-corpus ranking, RecBole-defined metrics, baselines, bootstrap intervals, reports.

Modules, one job each: ``csr`` (per-user item sets), ``metrics`` (per-user metrics), ``ranking`` (blocked exact and
approximate top-k), ``baselines`` (popularity, random, item kNN), ``bootstrap`` (intervals, paired tests),
``protocols`` (splits and indexing), ``evaluator`` (one evaluation on arrays), ``loading`` (what a run directory
holds), ``runs`` (``evaluate_run``), ``report`` (metrics.json, report.md, recall_at_k.png), ``inference`` (batch
top-k for every user).
"""
