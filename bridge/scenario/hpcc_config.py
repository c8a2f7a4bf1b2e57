"""The HPCC reference simulator's `config.txt` and the RDMA transport parameters it sets.

The reference ("HPCC-sim", the ns-3.17 simulator published with the HPCC paper) reads one
`KEY value...` per line (we also skip blank lines and lines starting with `#`). `parse_hpcc_config` reads such a file into an `HpccConfig` holding every
value in our units (ns, bps, bytes); `resolve_rdma` merges defaults < config file < a scenario's
`transport.parameters` < `transport.cc` into one `RdmaParameters`. No ns-3 here.

Units in the file: times in microseconds (ALPHA_RESUME_INTERVAL, RATE_DECREASE_INTERVAL, RP_TIMER,
PAUSE_TIME), SIMULATOR_STOP_TIME in seconds, BUFFER_SIZE in MiB (the reference multiplies by
1024 * 1024), rates as ns-3 DataRate strings (`50Mb/s`, `1Gb/s`, a bare int is bps), and the ECN
maps `n rate1 v1 rate2 v2 ...` with rates in bps and KMIN/KMAX in KB of 1000 bytes (the reference's
switch MMU multiplies by 1000).

Every problem is a one-line `ScenarioError` whose field names the file, the line and the key:
`config_dcqcn.txt line 12: RATE_AI: 'fifty' is not a rate (expected e.g. '50Mb/s')`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType

from bridge.errors import ScenarioError
from bridge.topology import read_lines
from bridge.units import parse_rate

_U32 = 2**32 - 1
_I64 = 2**63 - 1
_MAX_RATE = 2**64 - 1
FRAME_OVERHEAD_BYTES = 48  # the reference's data-packet headers: frame = payload + 48
LINK_DOWN_BASE_NS = 2 * 10**9  # LINK_DOWN counts from 2 s, where the reference's flows start

CC_MODES = {"dcqcn": 1, "hpcc": 3, "timely": 7, "dctcp": 8, "hpcc-pint": 10}
_CC_NAMES = {mode: name for name, mode in CC_MODES.items()}


# --- the merged parameters ------------------------------------------------------------------

@dataclass(frozen=True)
class RdmaParameters:
    """Every RDMA transport parameter in our units (ns, bps, bytes), after all overrides."""

    cc: str                          # "dcqcn", "hpcc", "timely", "dctcp" or "hpcc-pint" (CC_MODE 1, 3, 7, 8, 10)
    payload_bytes: int               # PACKET_PAYLOAD_SIZE
    buffer_bytes: int                # BUFFER_SIZE (MiB in the file), per switch
    enable_ecn: bool                 # ENABLE_QCN
    ack_high_prio: bool              # ACK_HIGH_PRIO
    alpha_resume_interval_ns: int    # ALPHA_RESUME_INTERVAL (us in the file)
    rate_decrease_interval_ns: int   # RATE_DECREASE_INTERVAL (us)
    rp_timer_ns: int                 # RP_TIMER (us)
    ewma_gain: float                 # EWMA_GAIN
    fast_recovery_times: int         # FAST_RECOVERY_TIMES
    rate_ai_bps: int                 # RATE_AI
    rate_hai_bps: int                # RATE_HAI
    min_rate_bps: int                # MIN_RATE
    clamp_target_rate: bool          # CLAMP_TARGET_RATE
    u_target: float                  # U_TARGET
    mi_thresh: int                   # MI_THRESH
    fast_react: bool                 # FAST_REACT
    multi_rate: bool                 # MULTI_RATE (HPCC: a rate per hop)
    sample_feedback: bool            # SAMPLE_FEEDBACK (HPCC: between full updates, hops with a queue)
    pint_log_base: float             # PINT_LOG_BASE
    pint_prob: float                 # PINT_PROB
    dctcp_rate_ai_bps: int           # DCTCP_RATE_AI
    has_win: bool                    # HAS_WIN
    global_t: bool                   # GLOBAL_T
    var_win: bool                    # VAR_WIN
    rate_bound: bool                 # RATE_BOUND
    chunk_bytes: int                 # L2_CHUNK_SIZE
    ack_interval: int                # L2_ACK_INTERVAL (the reference: bytes between ACK milestones)
    error_rate_per_link: float       # ERROR_RATE_PER_LINK
    ecn: tuple[tuple[int, int, int, float], ...]  # (rate_bps, kmin_bytes, kmax_bytes, pmax), by rate
    pause_time_us: int               # PAUSE_TIME
    rto_ns: int                      # transport.rto (0: none, as the reference)
    int_multi: int                   # INT_MULTI
    qlen_mon_start_ns: int           # QLEN_MON_START: switch queue samples (qlen.csv) from ...
    qlen_mon_end_ns: int             # QLEN_MON_END: ... until (the same: no samples)
    qlen_mon_interval_ns: int        # QLEN_MON_INTERVAL (ours; the reference samples every 100 ns)

    @property
    def mtu(self) -> int:
        """Bytes of a full data frame on the wire (payload + the reference's 48 header bytes)."""
        return self.payload_bytes + FRAME_OVERHEAD_BYTES

    def ecn_rates(self) -> frozenset[int]:
        return frozenset(e[0] for e in self.ecn)


# --- value parsers: tokens -> value in our units, or ValueError with a message ---------------

def _one(tokens: list[str]) -> str:
    if len(tokens) != 1:
        raise ValueError(f"expected one value, got {len(tokens)}: {' '.join(tokens)!r}")
    return tokens[0]


def _decimal(tok: str, what: str) -> Decimal:
    try:
        d = Decimal(tok)
    except InvalidOperation:
        raise ValueError(f"{tok!r} is not {what}") from None
    if not d.is_finite():
        raise ValueError(f"{tok!r} is not {what}")
    return d


def _int_token(tok: str, lo: int, hi: int, what: str = "an int") -> int:
    if not re.fullmatch(r"[+-]?\d+", tok):
        raise ValueError(f"{tok!r} is not {what}")
    n = int(tok)
    if not lo <= n <= hi:
        raise ValueError(f"{tok} is out of range (expected {lo}..{hi})")
    return n


def _int(lo: int, hi: int = _U32) -> Callable[[list[str]], int]:
    return lambda tokens: _int_token(_one(tokens), lo, hi)


def _flag(tokens: list[str]) -> bool:
    tok = _one(tokens)
    if tok not in ("0", "1"):
        raise ValueError(f"{tok!r} is not 0 or 1")
    return tok == "1"


def _float(lo: float, hi: float, lo_open: bool = False) -> Callable[[list[str]], float]:
    def parse(tokens: list[str]) -> float:
        tok = _one(tokens)
        return _float_token(tok, lo, hi, lo_open)
    return parse


def _float_token(tok: str, lo: float, hi: float, lo_open: bool = False) -> float:
    d = _decimal(tok, "a number")
    if d < Decimal(lo) or d > Decimal(hi) or (lo_open and d == Decimal(lo)):
        raise ValueError(f"{tok} is out of range (expected {'>' if lo_open else '>='} {lo:g} "
                         f"and <= {hi:g})")
    return float(d)


def _scaled(tok: str, scale: Decimal, lo: int, hi: int, what: str) -> int:
    d = _decimal(tok, what)
    n = int((d * scale).to_integral_value(rounding=ROUND_HALF_UP))
    if n < lo:
        raise ValueError(f"{tok} must be > 0" if lo == 1 else f"{tok} is out of range")
    if n > hi:
        raise ValueError(f"{tok} is too large")
    return n


def _micros(tokens: list[str]) -> int:
    """Microseconds (the reference reads a double) -> ns, > 0 (a 0 timer would never advance)."""
    tok = _one(tokens)
    return _scaled(tok, Decimal(1000), 1, _I64, "a time in microseconds")


def _seconds(tokens: list[str]) -> int:
    tok = _one(tokens)
    return _scaled(tok, Decimal(10**9), 1, _I64, "a time in seconds")


def _mebibytes(tokens: list[str]) -> int:
    tok = _one(tokens)
    return _scaled(tok, Decimal(2**20), 1, _I64, "a size in MiB")


# ns-3 DataRate units beyond bridge.units' bit rates: byte rates (x8) and binary prefixes.
_EXTRA_RATE_UNITS = {
    "Bps": 8, "B/s": 8,
    "KBps": 8 * 10**3, "kBps": 8 * 10**3, "KB/s": 8 * 10**3, "kB/s": 8 * 10**3,
    "MBps": 8 * 10**6, "MB/s": 8 * 10**6, "GBps": 8 * 10**9, "GB/s": 8 * 10**9,
    "Kib/s": 2**10, "KiB/s": 8 * 2**10, "Mib/s": 2**20, "MiB/s": 8 * 2**20,
    "Gib/s": 2**30, "GiB/s": 8 * 2**30,
}
_RATE_TEXT = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([A-Za-z/]+)?")


def parse_config_rate(tok: str) -> int:
    """An ns-3 DataRate string ('50Mb/s', '1Gb/s', '100Gbps', '12.5MB/s', a bare int = bps) -> bps."""
    if re.fullmatch(r"\d+", tok):
        return int(tok)
    m = _RATE_TEXT.fullmatch(tok)
    if m is not None and m.group(2) in _EXTRA_RATE_UNITS:
        exact = Decimal(m.group(1)) * _EXTRA_RATE_UNITS[m.group(2)]
        if exact != exact.to_integral_value() or abs(exact) >= 10**30:
            raise ValueError(f"{tok!r} is not a whole number of bps")
        return int(exact)
    try:
        return parse_rate(tok)
    except ValueError:
        raise ValueError(f"{tok!r} is not a rate (expected e.g. '50Mb/s')") from None


def _rate(lo: int) -> Callable[[list[str]], int]:
    def parse(tokens: list[str]) -> int:
        tok = _one(tokens)
        bps = parse_config_rate(tok)
        if not lo <= bps <= _MAX_RATE:
            raise ValueError(f"{tok!r} must be {'> 0' if lo else '>= 0'}")
        return bps
    return parse


def _cc_mode(tokens: list[str]) -> str:
    tok = _one(tokens)
    mode = _int_token(tok, 0, _U32)
    if mode not in _CC_NAMES:
        raise ValueError(f"{mode} is not supported (expected 1 = DCQCN, 3 = HPCC, 7 = TIMELY, 8 = DCTCP "
                         "or 10 = HPCC-PINT)")
    return _CC_NAMES[mode]


def _zero_only(tokens: list[str]) -> int:
    tok = _one(tokens)
    if _int_token(tok, 0, _U32) != 0:
        raise ValueError(f"{tok} is not supported (only 0)")
    return 0


def _link_down(tokens: list[str]) -> tuple[int, int, int] | None:
    """`time node_a node_b`: the link goes down `time` us after 2 s (where the reference's flows
    start); '0 0 0' (time 0) is no failure -> (time ns, node_a, node_b) or None."""
    if len(tokens) != 3:
        raise ValueError(f"expected 'time node_a node_b', got {' '.join(tokens)!r}")
    time_us, a, b = (_int_token(t, 0, _U32) for t in tokens)
    if time_us == 0:
        if a or b:
            raise ValueError(f"{' '.join(tokens)!r}: time 0 means no failure (the reference ignores "
                             "the nodes); give the time in us after 2 s")
        return None
    if a == b:
        raise ValueError(f"{' '.join(tokens)!r}: a link joins two different nodes")
    return (LINK_DOWN_BASE_NS + time_us * 1000, a, b)


def _ecn_map(kind: str) -> Callable[[list[str]], tuple[tuple[int, object], ...]]:
    """`n rate1 v1 ...` -> ((rate_bps, value), ...) sorted by rate; K in KB (x1000), P in 0..1."""
    def parse(tokens: list[str]) -> tuple[tuple[int, object], ...]:
        n = _int_token(tokens[0], 1, 10_000, "an entry count")
        if len(tokens) != 1 + 2 * n:
            raise ValueError(f"says {n} entries but has {len(tokens) - 1} values after the count "
                             f"(expected {2 * n}: 'n rate1 value1 ... rate_n value_n')")
        out: dict[int, object] = {}
        for i in range(n):
            rate_tok, value_tok = tokens[1 + 2 * i], tokens[2 + 2 * i]
            rate = parse_config_rate(rate_tok)
            if not 1 <= rate <= _MAX_RATE:
                raise ValueError(f"rate {rate_tok!r} must be > 0")
            if rate in out:
                raise ValueError(f"rate {rate_tok} listed twice")
            if kind == "p":
                out[rate] = _float_token(value_tok, 0, 1)
            else:
                out[rate] = _int_token(value_tok, 0, _U32, "a threshold in KB (an int)") * 1000
        return tuple(sorted(out.items()))
    return parse


def _text(tokens: list[str]) -> str:
    return _one(tokens)


def _anything(tokens: list[str]) -> None:
    return None


# Reference key -> (parser, RdmaParameters field or None). Keys whose field is None are checked
# and otherwise ignored; the ECN maps are combined into `ecn` by resolve_rdma.
_KEYS: dict[str, tuple[Callable[[list[str]], object], str | None]] = {
    "CC_MODE": (_cc_mode, "cc"),
    "PACKET_PAYLOAD_SIZE": (_int(1, 65535 - FRAME_OVERHEAD_BYTES), "payload_bytes"),
    "BUFFER_SIZE": (_mebibytes, "buffer_bytes"),
    "ENABLE_QCN": (_flag, "enable_ecn"),
    "ACK_HIGH_PRIO": (_flag, "ack_high_prio"),
    "ALPHA_RESUME_INTERVAL": (_micros, "alpha_resume_interval_ns"),
    "RATE_DECREASE_INTERVAL": (_micros, "rate_decrease_interval_ns"),
    "RP_TIMER": (_micros, "rp_timer_ns"),
    "EWMA_GAIN": (_float(0, 1, lo_open=True), "ewma_gain"),
    "FAST_RECOVERY_TIMES": (_int(0), "fast_recovery_times"),
    "RATE_AI": (_rate(0), "rate_ai_bps"),
    "RATE_HAI": (_rate(0), "rate_hai_bps"),
    "MIN_RATE": (_rate(1), "min_rate_bps"),
    "CLAMP_TARGET_RATE": (_flag, "clamp_target_rate"),
    "U_TARGET": (_float(0, 1, lo_open=True), "u_target"),
    "MI_THRESH": (_int(0), "mi_thresh"),
    "FAST_REACT": (_flag, "fast_react"),
    "DCTCP_RATE_AI": (_rate(0), "dctcp_rate_ai_bps"),
    "HAS_WIN": (_flag, "has_win"),
    "GLOBAL_T": (_flag, "global_t"),
    "VAR_WIN": (_flag, "var_win"),
    "RATE_BOUND": (_flag, "rate_bound"),
    "INT_MULTI": (_int(1), "int_multi"),
    "L2_CHUNK_SIZE": (_int(1), "chunk_bytes"),
    "L2_ACK_INTERVAL": (_int(1), "ack_interval"),
    "L2_BACK_TO_ZERO": (_zero_only, None),
    "MULTI_RATE": (_flag, "multi_rate"),
    "SAMPLE_FEEDBACK": (_flag, "sample_feedback"),
    "PINT_LOG_BASE": (_float(1, 1000, lo_open=True), "pint_log_base"),
    "PINT_PROB": (_float(0, 1, lo_open=True), "pint_prob"),
    "ERROR_RATE_PER_LINK": (_float(0, 1), "error_rate_per_link"),
    "KMIN_MAP": (_ecn_map("k"), None),
    "KMAX_MAP": (_ecn_map("k"), None),
    "PMAX_MAP": (_ecn_map("p"), None),
    "PAUSE_TIME": (_int(0), "pause_time_us"),
    "QLEN_MON_START": (_int(0), "qlen_mon_start_ns"),
    "QLEN_MON_END": (_int(0), "qlen_mon_end_ns"),
    "QLEN_MON_INTERVAL": (_int(1), "qlen_mon_interval_ns"),
}
# Keys of a config file that are not transport parameters: the run's files, stop time and link
# failure, and what we accept and ignore (monitors, tracing, the PFC threshold mode).
_FILE_KEYS: dict[str, Callable[[list[str]], object]] = {
    "TOPOLOGY_FILE": _text,
    "FLOW_FILE": _text,
    "SIMULATOR_STOP_TIME": _seconds,
    "TRACE_FILE": _anything,
    "TRACE_OUTPUT_FILE": _anything,
    "FCT_OUTPUT_FILE": _anything,
    "PFC_OUTPUT_FILE": _anything,
    "QLEN_MON_FILE": _anything,
    "USE_DYNAMIC_PFC_THRESHOLD": _anything,
    "ENABLE_TRACE": _anything,
    "LINK_DOWN": _link_down,
}

PARAMETER_KEYS: frozenset[str] = frozenset(_KEYS)
"""Reference keys that are transport parameters (usable in a scenario's transport.parameters)."""
ECN_KEYS = ("KMIN_MAP", "KMAX_MAP", "PMAX_MAP")

# The reference's mix/config values (ECN maps: rate -> KB, KB, probability).
_ECN_DEFAULTS = {25: (100, 400), 50: (200, 800), 100: (400, 1600), 200: (800, 3200),
                 400: (1600, 6400)}
DEFAULTS: Mapping[str, object] = MappingProxyType({
    "CC_MODE": "dcqcn",
    "PACKET_PAYLOAD_SIZE": 1000,
    "BUFFER_SIZE": 32 * 2**20,
    "ENABLE_QCN": True,
    "ACK_HIGH_PRIO": False,
    "ALPHA_RESUME_INTERVAL": 1_000,
    "RATE_DECREASE_INTERVAL": 4_000,
    "RP_TIMER": 900_000,
    "EWMA_GAIN": 1 / 256,
    "FAST_RECOVERY_TIMES": 1,
    "RATE_AI": 50 * 10**6,
    "RATE_HAI": 100 * 10**6,
    "MIN_RATE": 100 * 10**6,
    "CLAMP_TARGET_RATE": False,
    "U_TARGET": 0.95,
    "MI_THRESH": 0,
    "FAST_REACT": True,
    "DCTCP_RATE_AI": 1000 * 10**6,   # the reference's own fallback
    "HAS_WIN": True,
    "GLOBAL_T": True,
    "VAR_WIN": True,
    "RATE_BOUND": True,
    "INT_MULTI": 1,
    "L2_CHUNK_SIZE": 4000,
    "L2_ACK_INTERVAL": 1,
    "L2_BACK_TO_ZERO": 0,
    "MULTI_RATE": False,
    "SAMPLE_FEEDBACK": False,
    "PINT_LOG_BASE": 1.05,
    "PINT_PROB": 1.0,
    "ERROR_RATE_PER_LINK": 0.0,
    "KMIN_MAP": tuple((g * 10**9, kmin * 1000) for g, (kmin, _) in _ECN_DEFAULTS.items()),
    "KMAX_MAP": tuple((g * 10**9, kmax * 1000) for g, (_, kmax) in _ECN_DEFAULTS.items()),
    "PMAX_MAP": tuple((g * 10**9, 0.2) for g in _ECN_DEFAULTS),
    "PAUSE_TIME": 5,
    "QLEN_MON_START": 0,
    "QLEN_MON_END": 0,
    "QLEN_MON_INTERVAL": 1000,
})
# What the reference's run.py writes for DCTCP where it differs from the defaults above: its alpha
# gain, additive increase and step marking at K = 3 KB per Gbps (pmax 1). They stand in for the
# defaults when cc is dctcp; a config file or parameters still override them.
CC_DEFAULTS: Mapping[str, Mapping[str, object]] = MappingProxyType({
    "dctcp": MappingProxyType({
        "EWMA_GAIN": 1 / 16,
        "DCTCP_RATE_AI": 615 * 10**6,
        "KMIN_MAP": tuple((g * 10**9, 3000 * g) for g in _ECN_DEFAULTS),
        "KMAX_MAP": tuple((g * 10**9, 3000 * g) for g in _ECN_DEFAULTS),
        "PMAX_MAP": tuple((g * 10**9, 1.0) for g in _ECN_DEFAULTS),
    }),
})


class ParameterError(ValueError):
    """A bad entry of transport.parameters; `key` completes the field path."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key, self.message = key, message


def _unknown(key: str, keys) -> str:
    close = difflib.get_close_matches(key, sorted(keys), n=1)
    return "unknown key" + (f" (did you mean {close[0]}?)" if close else "")


# --- the config file ------------------------------------------------------------------------

@dataclass(frozen=True)
class HpccConfig:
    """A parsed reference config file. `values` holds the transport parameters it sets (by
    reference key, in our units); `lines` the line of every key it has."""

    path: Path
    label: str                              # how errors name the file
    values: Mapping[str, object]
    lines: Mapping[str, int]
    topology_file: str | None               # TOPOLOGY_FILE as written
    flow_file: str | None                   # FLOW_FILE as written
    stop_time: str | None                   # SIMULATOR_STOP_TIME as written (seconds)
    stop_time_ns: int | None
    link_down: tuple[int, int, int] | None  # LINK_DOWN as (at ns, node_a, node_b), None: no failure

    @property
    def cc(self) -> str | None:
        """CC_MODE as "dcqcn", "hpcc", "timely", "dctcp" or "hpcc-pint"; None if the file has none."""
        return self.values.get("CC_MODE")  # type: ignore[return-value]

    def where(self, key: str) -> str:
        """The field naming `key`'s line: 'config_dcqcn.txt line 12: RATE_AI'."""
        return f"{self.label} line {self.lines[key]}: {key}"


def looks_like_hpcc_config(text: str) -> bool:
    """True if the first line that is neither blank nor a `#` comment starts with an upper-case
    KEY token (a YAML mapping's first token ends with a colon)."""
    for line in text.splitlines():
        tokens = line.split()
        if tokens and not tokens[0].startswith("#"):
            return re.fullmatch(r"[A-Z][A-Z0-9_]*", tokens[0]) is not None
    return False


def parse_hpcc_config(path: str | Path, label: str | None = None) -> HpccConfig:
    """Read a reference config.txt. Errors name `label` (default: the path), the line and key."""
    label = label or str(path)
    values: dict[str, object] = {}
    lines: dict[str, int] = {}
    other: dict[str, object] = {}
    raw: dict[str, str] = {}
    for line_no, tokens in read_lines(Path(path), label):
        key, rest = tokens[0], tokens[1:]
        if key.startswith("#"):  # a comment line (ours; the reference has none)
            continue

        def fail(message: str, key: str = key, line_no: int = line_no):
            raise ScenarioError(None, f"{label} line {line_no}: {key}", message)

        if key in _KEYS:
            parse = _KEYS[key][0]
        elif key in _FILE_KEYS:
            parse = _FILE_KEYS[key]
        else:
            fail(_unknown(key, [*_KEYS, *_FILE_KEYS]))
        if key in lines:
            fail(f"duplicate key (first on line {lines[key]})")
        if not rest:
            fail("missing value")
        try:
            value = parse(rest)
        except ValueError as e:
            fail(str(e))
        lines[key] = line_no
        raw[key] = " ".join(rest)
        (values if key in _KEYS else other)[key] = value
    if not lines:
        raise ScenarioError(None, label, "file is empty (expected 'KEY value' lines)")
    config = HpccConfig(Path(path), label, MappingProxyType(values), MappingProxyType(lines),
                        other.get("TOPOLOGY_FILE"), other.get("FLOW_FILE"),
                        raw.get("SIMULATOR_STOP_TIME"),
                        other.get("SIMULATOR_STOP_TIME"), other.get("LINK_DOWN"))
    _check_ecn_maps(values, {k: config.where(k) for k in values})
    return config


# --- transport.parameters -------------------------------------------------------------------

def parse_parameters(parameters: Mapping[object, object]) -> dict[str, object]:
    """A scenario's `transport.parameters` ({KEY: value}) -> {KEY: value in our units}.

    Values are written as in a config file (a string, or a number for one-token values).
    Raises ParameterError naming the key for an unknown key or a bad value.
    """
    out: dict[str, object] = {}
    for key, value in parameters.items():
        if not isinstance(key, str) or key not in PARAMETER_KEYS:
            name = str(key)
            if name in _FILE_KEYS:
                raise ParameterError(name, "not a transport parameter (it only means something "
                                     "in a config file)")
            raise ParameterError(name, _unknown(name, PARAMETER_KEYS) + " (expected a key of the "
                                 "reference's config.txt such as RATE_AI or KMAX_MAP)")
        if isinstance(value, bool):
            tokens = ["1" if value else "0"]
        elif isinstance(value, int):
            tokens = [str(value)]
        elif isinstance(value, float):
            tokens = [repr(value)]
        elif isinstance(value, str):
            tokens = value.split()
        else:
            raise ParameterError(key, f"expected a string or a number, got {type(value).__name__}")
        if not tokens:
            raise ParameterError(key, "missing value")
        try:
            out[key] = _KEYS[key][0](tokens)
        except ValueError as e:
            raise ParameterError(key, str(e)) from None
    return out


# --- merging --------------------------------------------------------------------------------

def resolve_rdma(config: HpccConfig | None, parameters: Mapping[str, object], cc: str | None,
                 rto_ns: int = 0, parameters_field: str = "transport.parameters") -> RdmaParameters:
    """defaults (those of CC_DEFAULTS for the merged cc) < config file < parameters (parsed, by
    key) < cc, as one RdmaParameters.

    Raises ScenarioError (field: the config line or `parameters_field`.KEY) if the merged ECN
    maps disagree (different rates, kmin above kmax).
    """
    merged = dict(DEFAULTS)
    source = {k: "defaults" for k in merged}
    if config is not None:
        merged.update(config.values)
        source.update({k: config.where(k) for k in config.values})
    merged.update(parameters)
    source.update({k: f"{parameters_field}.{k}" for k in parameters})
    if cc is not None:
        merged["CC_MODE"] = cc
    for key, value in CC_DEFAULTS.get(str(merged["CC_MODE"]), {}).items():
        if source[key] == "defaults":
            merged[key] = value
    _check_ecn_maps(merged, source)
    kmin, kmax, pmax = (dict(merged[k]) for k in ECN_KEYS)  # type: ignore[call-overload]
    ecn = tuple((rate, kmin[rate], kmax[rate], pmax[rate]) for rate in sorted(kmin))
    fields = {f: merged[k] for k, (_, f) in _KEYS.items() if f is not None}
    return RdmaParameters(**fields, ecn=ecn, rto_ns=rto_ns)  # type: ignore[arg-type]


def _check_ecn_maps(values: Mapping[str, object], source: Mapping[str, str]) -> None:
    """The three maps list the same rates, and kmin <= kmax at each (those present in `values`)."""
    present = [k for k in ECN_KEYS if k in values]
    if not present:
        return
    maps = {k: dict(values[k]) for k in present}  # type: ignore[call-overload]
    # blame the map given last (the highest override, or the later line)
    order = sorted(present, key=lambda k: _rank(source.get(k, "defaults")))
    first = order[0]
    for key in order[1:]:
        if set(maps[key]) != set(maps[first]):
            raise ScenarioError(None, source[key] if source[key] != "defaults" else source[first],
                                f"lists rates {_rates(maps[key])} but {first} "
                                f"({_from(source[first])}) lists {_rates(maps[first])}; the "
                                "three ECN maps must list the same rates")
    if "KMIN_MAP" in maps and "KMAX_MAP" in maps:
        for rate, kmin in maps["KMIN_MAP"].items():
            kmax = maps["KMAX_MAP"].get(rate)
            if kmax is not None and kmin > kmax:
                key = max(("KMIN_MAP", "KMAX_MAP"), key=lambda k: _rank(source.get(k, "defaults")))
                raise ScenarioError(None, source[key],
                                    f"at {format_rate(rate)} kmin {kmin // 1000} KB is above kmax "
                                    f"{kmax // 1000} KB")


def _rank(source: str) -> tuple[int, int]:
    """Sort key: defaults < config lines (by line) < parameters."""
    if source == "defaults":
        return (0, 0)
    m = re.search(r" line (\d+): \w+$", source)
    return (1, int(m.group(1))) if m else (2, 0)


def _from(source: str) -> str:
    return "default" if source == "defaults" else source.rsplit(": ", 1)[0]


def _rates(m: Mapping[int, object]) -> str:
    return ", ".join(format_rate(r) for r in sorted(m)) or "none"


def format_rate(bps: int) -> str:
    """'100Gbps', '25Gbps', '40Mbps', '1234bps': the largest unit that divides evenly."""
    for unit, scale in (("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6), ("kbps", 10**3)):
        if bps and bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bps"
