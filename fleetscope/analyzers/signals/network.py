"""Network trouble: nodes whose EFA devices retransmit, log impaired/unresponsive-peer events, or
drop what they receive.

A node like that slows every collective of its job (the straggler detector reports it, and names
``network`` as the cause of its ranks' slowness).

**Send side**: a device whose own retransmit ratio, or event rate, is over its threshold.

**Receive side** (docs/design.md#receive-side-drops): a device that drops packets it received
(``rx_drops``, "packets received and then dropped", AWS's EFA counters) makes its *senders*
retransmit them (SRD retransmits from the sender). The senders spread the cost: with N nodes each
retransmits about 1/(N-1) of the drops, so no sender's own ratio need cross its threshold, while
the receiver concentrates it. So a device is the culprit when its drops are at least
``rx_drop_ratio`` of what it received, stand out against the other devices (at least ten times
their median ratio), and, where the SRD counters are served, the other nodes' retransmits rose by
at least half of them at the same time (the drops were real packets, retransmitted).
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
    rx_bad, rx_ev = _receive_side(feat, lab, aligned, re_rate, ratio)
    bad = bad | rx_bad
    for j, (node, dev) in enumerate(idx):
        if not bad[:, j].any():
            continue
        flag, evidence = out.get(node, (np.zeros(len(feat.times), dtype=bool), {}))
        flag = flag | bad[:, j]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            evidence[f"{dev} retrans_pkts/tx_pkts"] = f"{np.nanmax(ratio[:, j]):.2%}"
            evidence[f"{dev} impaired+unresponsive+timeout events"] = f"{np.nanmax(ev[:, j]) * 60:.1f}/min"
        evidence.update(rx_ev.get(j, {}))
        out[node] = (flag, evidence)
    return out


def _receive_side(
    feat: Features, lab, aligned, re_rate: np.ndarray, send_ratio: np.ndarray
) -> tuple[np.ndarray, dict[int, dict[str, str]]]:
    """Per grid time and device column: the device drops what it receives (see the module
    docstring), and the evidence of each such device. ``re_rate`` and ``send_ratio``: every
    device's retransmit rate and its retransmits over what it sent, as the send side computed them."""
    cfg = feat.config
    bad = np.zeros(re_rate.shape, dtype=bool)
    evidence: dict[int, dict[str, str]] = {}
    if not feat.frames.has(c.EFA_RX_DROPS):
        return bad, evidence
    rx = rate(aligned(c.EFA_RX_PKTS), feat.step, feat.rate_window_steps)
    drops = rate(aligned(c.EFA_RX_DROPS), feat.step, feat.rate_window_steps)
    with np.errstate(all="ignore"):
        ratio = drops / rx
    busy = np.nan_to_num(rx) >= cfg.efa_min_tx_pps
    r = np.where(busy, np.nan_to_num(ratio), np.nan)
    nodes = lab[c.NODE_LABEL].to_numpy().astype(str)
    srd = np.isfinite(re_rate).any()
    for j in range(r.shape[1]):
        own = r[:, j]
        if not (np.nan_to_num(own) >= cfg.rx_drop_ratio).any():
            continue
        others = nodes != nodes[j]
        if not others.any():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            peer = np.nanmedian(r[:, others], axis=1)
        flag = (np.nan_to_num(own) >= cfg.rx_drop_ratio) & (np.nan_to_num(own) >= 10 * np.nan_to_num(peer))
        if srd:  # the drops were real packets: the other nodes sent them again
            resent = np.nansum(np.where(others[None, :], re_rate, 0.0), axis=1)
            flag &= resent >= 0.5 * np.nan_to_num(drops[:, j])
        if not flag.any():
            continue
        bad[:, j] = flag
        dev = str(lab.iloc[j]["device"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ev = {
                f"{dev} rx_drops/rx_pkts": f"{np.nanmax(own[flag]):.2%} (other devices' median "
                f"{np.nanmax(np.nan_to_num(peer[flag])):.2%})"
            }
            if srd:
                sender = np.where(others[None, :], send_ratio, np.nan)[flag]
                worst = float(np.nanmax(sender)) if np.isfinite(sender).any() else float("nan")
                ev["senders' retrans_pkts/tx_pkts"] = (
                    f"at most {worst:.2%} each (threshold {cfg.retrans_ratio:.1%}): the receiver drops, "
                    "the senders retransmit"
                )
        evidence[j] = ev
    return bad, evidence
