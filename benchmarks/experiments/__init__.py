"""One-off experiments (probes, sweeps) run for an issue and kept to reproduce its figures; unlike the benchmarks
beside this package they are not run by ``benchmarks.run_all`` and record nothing in ``results.json``. Each uses the
library's public functions only (e.g. ``retrieval.jobs.tuning``), never a private method of the job."""
