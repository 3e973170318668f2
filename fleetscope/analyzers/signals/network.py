"""Network trouble: nodes whose EFA devices retransmit or log impaired/unresponsive-peer events.

A node like that slows every collective of its job (the straggler detector reports it, and names
``network`` as the cause of its ranks' slowness).
"""

from __future__ import annotations

import warnings

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import Features, place_columns, row_positions
from fleetscope.window.frames import rate

#: Node -> (per-time degraded flag, evidence) of nodes whose EFA devices misbehave.
NetTrouble = dict[str, tuple[np.ndarray, dict[str, str]]]


def node_network_trouble(feat: Features) -> NetTrouble:
    """Node -> (per-time degraded flag, evidence) for nodes whose EFA devices misbehave."""
    frames = feat.frames
    cfg = feat.config
    out: NetTrouble = {}
    if not frames.has(c.EFA_TX_PKTS):
        return out
    keys = (c.NODE_LABEL, "device")
    lab, tx = frames.get(c.EFA_TX_PKTS).group(keys, "sum")
    idx = {tuple(r): i for i, r in enumerate(lab.itertuples(index=False, name=None))}

    def aligned(name: str) -> np.ndarray:
        out_ = np.full(tx.shape, np.nan)
        if frames.has(name):
            l2, v2 = frames.get(name).group(keys, "sum")
            place_columns(out_, row_positions(lab, l2, keys), v2)
        return out_

    tx_rate = rate(tx, feat.step, feat.rate_window_steps)
    re_rate = rate(aligned(c.EFA_RETRANS_PKTS), feat.step, feat.rate_window_steps)
    ev = np.zeros(tx.shape)
    for name in (
        c.EFA_RETRANS_TIMEOUT_EVENTS,
        c.EFA_IMPAIRED_REMOTE_CONN_EVENTS,
        c.EFA_UNRESPONSIVE_REMOTE_EVENTS,
    ):
        r = rate(aligned(name), feat.step, feat.rate_window_steps)
        ev = ev + np.where(np.isnan(r), 0, r)
    with np.errstate(all="ignore"):
        ratio = re_rate / tx_rate
    busy_link = np.nan_to_num(tx_rate) >= cfg.efa_min_tx_pps
    bad = (busy_link & (np.nan_to_num(ratio) >= cfg.retrans_ratio)) | (ev * 60 >= cfg.efa_events_per_min)
    for j, (node, dev) in enumerate(idx):
        if not bad[:, j].any():
            continue
        flag, evidence = out.get(node, (np.zeros(len(feat.times), dtype=bool), {}))
        flag = flag | bad[:, j]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            evidence[f"{dev} retrans_pkts/tx_pkts"] = f"{np.nanmax(ratio[:, j]):.2%}"
            evidence[f"{dev} impaired+unresponsive+timeout events"] = f"{np.nanmax(ev[:, j]) * 60:.1f}/min"
        out[node] = (flag, evidence)
    return out
