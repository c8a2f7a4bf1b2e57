"""RdmaParameters (bridge.scenario.hpcc_config) -> the C++ `wormhole::RdmaConfig` (ns3_patches/rdma.h).

No ns-3 import here: the caller passes what makes an empty config (bridge.ns3.network).
"""

from __future__ import annotations

from collections.abc import Callable

from ..scenario.hpcc_config import CC_MODES, RdmaParameters

# RdmaConfig field <- (RdmaParameters field, conversion). Units already agree (ns, bps, bytes, us
# for the pause time). RdmaConfig fields not listed keep their C++ defaults (dataClass,
# rateOnFirstCnp, nackIntervalNs, frame sizes, reserve/resume/headroom). int_multi has no
# RdmaConfig field yet (INT_MULTI only scales the reference's INT counters; 1 in every case).
RDMA_CONFIG_FIELDS: dict[str, tuple[str, Callable[[object], object]]] = {
    "ccMode": ("cc", lambda cc: CC_MODES[cc]),
    "payloadBytes": ("payload_bytes", int),
    "bufferBytes": ("buffer_bytes", int),
    "enableEcn": ("enable_ecn", bool),
    "ackHighPrio": ("ack_high_prio", bool),
    "alphaResumeIntervalNs": ("alpha_resume_interval_ns", int),
    "rateDecreaseIntervalNs": ("rate_decrease_interval_ns", int),
    "rpTimerNs": ("rp_timer_ns", int),
    "ewmaGain": ("ewma_gain", float),
    "fastRecoveryTimes": ("fast_recovery_times", int),
    "rateAiBps": ("rate_ai_bps", int),
    "rateHaiBps": ("rate_hai_bps", int),
    "minRateBps": ("min_rate_bps", int),
    "clampTargetRate": ("clamp_target_rate", bool),
    "uTarget": ("u_target", float),
    "miThresh": ("mi_thresh", int),
    "fastReact": ("fast_react", bool),
    "multiRate": ("multi_rate", bool),
    "sampleFeedback": ("sample_feedback", bool),
    "pintLogBase": ("pint_log_base", float),
    "pintProb": ("pint_prob", float),
    "dctcpRateAiBps": ("dctcp_rate_ai_bps", int),
    "hasWin": ("has_win", bool),
    "globalT": ("global_t", bool),
    "varWin": ("var_win", bool),
    "rateBound": ("rate_bound", bool),
    "ackIntervalBytes": ("ack_interval", int),
    "chunkBytes": ("chunk_bytes", int),
    "rtoNs": ("rto_ns", int),
    "errorRatePerLink": ("error_rate_per_link", float),
    "pauseTimeUs": ("pause_time_us", int),
}


def rdma_config(make: Callable[[], object], params: RdmaParameters):
    """A filled wormhole::RdmaConfig from `make()`: every mapped field, then one ECN entry per link
    rate."""
    config = make()
    for cxx, (name, convert) in RDMA_CONFIG_FIELDS.items():
        if not hasattr(config, cxx):  # a renamed C++ field must not become a silent Python attribute
            raise AttributeError(f"wormhole::RdmaConfig has no field {cxx!r} (see RDMA_CONFIG_FIELDS)")
        setattr(config, cxx, convert(getattr(params, name)))
    for rate_bps, kmin_bytes, kmax_bytes, pmax in params.ecn:
        config.AddEcnThreshold(int(rate_bps), int(kmin_bytes), int(kmax_bytes), float(pmax))
    return config
