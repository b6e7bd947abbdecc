"""Negative sampling and candidate frequencies: the ``log Q`` side of the retrieval objectives.

``samplers.CandidateSampler`` draws shared negatives for sampled softmax; ``frequency`` estimates how often a
candidate appears in batches, statically (``static_log_q``) or estimated while training (``FrequencyEstimator``,
Yi et al. 2019), and combines proposals (``mixture_log_q``).
"""

from retrieval.sampling.frequency import FrequencyEstimator, mixture_log_q, static_log_q
from retrieval.sampling.samplers import NUM_RESERVED_IDS, CandidateSampler

__all__ = ["NUM_RESERVED_IDS", "CandidateSampler", "FrequencyEstimator", "mixture_log_q", "static_log_q"]
