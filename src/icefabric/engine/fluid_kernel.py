"""Compiled main loop of the fluid engine (:mod:`icefabric.engine.fluid` has the model).

:func:`advance` runs steps, flow starts and completions until the run ends or the caller
must act (a link failure or reroute is due, an end-side window closed, the sample buffer is
full). All state lives in a few 2-D arrays ("banks", one per dtype): :class:`Net` (the
routing, replaced on a reroute) and :class:`State` (everything that evolves). The per-step
helpers are compiled without reference counting (see ``step_fn``). The running flows'
routes, queue entries, NIC groups and per-link FIFO lists are gathered into the
``a_*``/``lk_*``/``nic_*`` index rows whenever the running set changes (once per event), so
a step costs O(running entries + links), not O(all flows).

The arithmetic follows the numpy engine it replaced operation by operation (same sums in
the same order), so results were those of that engine, to the bit, until the model itself
changed (issue 28: CNP timing; tests/engine/fluid_regression.json).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from icefabric.dataplane.dcqcn import (
    CC_ALPHA,
    CC_DEC_CNP,
    CC_LINE,
    CC_RC,
    CC_RT,
    CC_STARTED,
    CC_T_ALPHA,
    CC_T_DEC,
    CC_T_INC,
    PV_BC,
    PV_DEC_INT,
    dcqcn_update_qp,
)
from icefabric.engine.jit import compiled_or_cached

_TINY = 1e-12
_INF = np.inf

def kernel_cached() -> bool:
    """Whether :func:`advance` is compiled in this process or in numba's cache for this
    source (reads the cache's small index file; True when unsure): the first run after an
    install compiles it instead, which takes a while (issue 12)."""
    return compiled_or_cached(advance)


# advance() return codes
DONE, FAIL_DUE, ENDSIDE_DUE, SAMPLES_FULL, MAX_STEPS, CNP_FULL = 0, 1, 2, 3, 4, 5

#: run-wide numbers (cfg vector indices)
(C_DT, C_DT_QUIET, C_DT_PFC, C_TAU, C_QUIET_TOL, C_COALESCE, C_MAX_TIME, C_MAX_STEPS,
 C_ACK_RATIO, C_PKT_WIRE, C_FB_BW, C_PFC_ON, C_PFC_DYN, C_RESERVE, C_RESUME, C_XOFF, C_XON,
 C_DCQCN, C_ACK_QUEUE, C_CAP_MAX, C_ABOVE, C_WO, C_CNP_INT, C_ES_ON, C_SAMPLE_INT,
 C_DT_FREE, N_CFG) = range(27)
#: evolving scalars (sf: float, si: int)
(F_T, F_QUIET, F_MARKS_UNTIL, F_NEXT_SAMPLE, F_ES_NEXT, F_FAIL_T, F_QMAX, N_SF) = range(8)
(I_STEPS, I_DONE, I_HEAP, I_FB_LAST, I_REBUILD, I_HAS_USE, I_NAF, I_NAR, I_NAE, I_NQ,
 I_NLK, I_NLV, I_NNIC, I_NSMP, I_ES_DUE, I_NNEW, I_FB_ROWS, I_NREG, I_WORK, I_NCC, I_NING,
 I_PASS, I_FREE, I_ENDS, I_OVER, I_FB_MAX, I_CNP_TOP, I_CNP_FREE, N_SI) = range(29)

#: rows of the state and network banks: one 2-D array per dtype (``f`` float, ``i`` int,
#: ``b`` bool), each row as wide as the widest extent (links + 1, flows + 1, routes, entries,
#: nodes) and indexed by what its group says. A namedtuple of a few arrays compiles far
#: faster than one of many (every helper copies the tuple's arrays): with one array per
#: size and dtype (34 in the two tuples, now 22) LLVM took about twice as long.
ST_BANKS = {
    "f": ["up", "pfc_allow", "pfc_use", "pfc_xoff", "pfc_xon", "pause_ns", "pause_cnt",  # links
          "link_bytes", "peak_util", "max_q", "marked_bytes", "qlink", "serv", "serv_eff",
          "lk_sum", "lk_qsum", "lk_tsum",
          "q", "arr", "drain", "dep",  # entries (by net entry: canonical between runs)
          "wq", "warr", "wdrain", "wdep", "wnew",  # running entries by position (_positions)
          "inj", "start", "finish", "flow_cap", "a_rf", "heap_t", "t_end",  # flows
          "deliv", "last_cnp", "es_cnps", "nic_dem", "nic_alloc", "a_x", "a_w",
          "a_cap", "nic_lv",  # routes
          "tmp0", "tmp1", "tmp2", "tmp3", "tmp4", "tmp5"],  # per-step scratch (widest)
    "i": ["lk_link", "lk_ptr", "lv_ptr", "nic_link", "nic_ptr",  # links (+1)
          "ae", "ae_route", "ae_link", "ae_rev", "q_ent", "lk_ent", "pos", "p_up", "p_link",
          "p_ing", "p_route",  # entries
          "n_deps_left", "heap_f", "a_f", "a_fstart", "new_f",  # flows (+1)
          "a_r", "a_rflow", "a_estart", "a_ne", "wf_order",  # routes
          "wf_tmp", "a_cc", "nic_slot", "a_last", "nic_g", "nic_r",
          "scr_a", "scr_b", "scr_c", "scr_d",  # rebuild's scratch (links + 1, flows + 1)
          "ing_link",  # links
          "cnp_head", "cnp_tail",  # routes: their pending CNPs (``State.cnp_node``)
          "cnp_hint"],  # entries: the node of their last mark
    "b": ["pfc_reg",  # links
          "running", "done", "a_sending"],  # flows
}
NET_BANKS = {
    "f": ["cap", "kmin", "kmax", "pmax", "pfc_alpha", "pfc_gap",  # links
          "w",  # routes
          "fb_lat",  # entries
          "size_w", "lat", "flow_start"],  # flows
    "i": ["rev", "sw_of", "level",  # links
          "links", "hop",  # entries
          "first_link",  # routes
          "f_rptr", "dptr",  # flows (+1)
          "ingress_sw"],  # links (0/1)
    "b": [],
}
(S_UP, S_PFC_ALLOW, S_PFC_USE, S_PFC_XOFF, S_PFC_XON, S_PAUSE_NS, S_PAUSE_CNT, S_LINK_BYTES,
 S_PEAK_UTIL, S_MAX_Q, S_MARKED_BYTES, S_QLINK, S_SERV, S_SERV_EFF, S_LK_SUM, S_LK_QSUM,
 S_LK_TSUM,
 S_Q, S_ARR, S_DRAIN, S_DEP, S_WQ, S_WARR, S_WDRAIN, S_WDEP, S_WNEW,
 S_INJ, S_START, S_FINISH, S_FLOW_CAP, S_A_RF, S_HEAP_T, S_T_END,
 S_DELIV, S_LAST_CNP, S_ES_CNPS, S_NIC_DEM, S_NIC_ALLOC, S_A_X, S_A_W, S_A_CAP,
 S_NIC_LV, S_TMP0, S_TMP1, S_TMP2, S_TMP3, S_TMP4, S_TMP5) = range(48)  # st.f
(S_LK_LINK, S_LK_PTR, S_LV_PTR, S_NIC_LINK, S_NIC_PTR,
 S_AE, S_AE_ROUTE, S_AE_LINK, S_AE_REV, S_Q_ENT, S_LK_ENT, S_POS, S_P_UP, S_P_LINK, S_P_ING,
 S_P_ROUTE,
 S_N_DEPS_LEFT, S_HEAP_F, S_A_F, S_A_FSTART, S_NEW_F,
 S_A_R, S_A_RFLOW, S_A_ESTART, S_A_NE, S_WF_ORDER, S_WF_TMP, S_A_CC,
 S_NIC_SLOT, S_A_LAST, S_NIC_G, S_NIC_R, S_SCR_A, S_SCR_B, S_SCR_C, S_SCR_D,
 S_ING_LINK, S_CNP_HEAD, S_CNP_TAIL, S_CNP_HINT) = range(40)  # st.i
(S_PFC_REG, S_RUNNING, S_DONE, S_A_SENDING) = range(4)  # st.b
(N_CAP, N_KMIN, N_KMAX, N_PMAX, N_PFC_ALPHA, N_PFC_GAP, N_W, N_FB_LAT, N_SIZE_W, N_LAT,
 N_FLOW_START) = range(11)  # net.f
(N_REV, N_SW_OF, N_LEVEL, N_LINKS, N_HOP, N_FIRST_LINK, N_F_RPTR, N_DPTR,
 N_INGRESS_SW) = range(9)  # net.i
#: ``net.dims``: the number of links and of flows (the banks are wider), the largest link
#: level
D_L, D_F, D_MAX_LV = range(3)

Net = namedtuple("Net", ["f", "i", "b", "dims", "indptr", "r_order", "dependants", "pfc_pool",
                         "rec_links", "rec_flows", "dcqcn", "cfg"])
State = namedtuple("State", ["sf", "si", "f", "i", "b", "cc", "cnp_node", "cnp_val", "smp"])
#: What the per-step helpers read and write (the arrays of ``Net`` and ``State`` they use,
#: ``L`` the number of links): a call passes every array of its tuples as separate
#: arguments (7 + 2 x ndim words each), and the helpers are called ~15 times a step, so
#: passing the whole ``Net`` and ``State`` (207 words then, 83 for ``Work``) was a third of
#: a small run's step (issue 26). Single-call-site helpers are inlined for the same reason.
Work = namedtuple("Work", ["nf", "ni", "cfg", "pool", "L", "sf", "si", "f", "i", "b", "cc"])
#: the CNP delay line (its node pool: ``node[n]`` = (slot, next, previous, route),
#: ``val[n]`` the CNPs due in the slot; node 0 is none) and the DCQCN parameters, for the
#: ECN and CNP helpers
Feedback = namedtuple("Feedback", ["node", "val", "dcqcn"])
#: ``tmp0``-``tmp5`` (``st.f``): per-step scratch rows (as wide as links, routes, flows and
#: nodes), so a step allocates nothing; rows of the bank, not arrays of their own, for the
#: same reason


#: How the helpers compile. The first run after an install compiles the kernel (then it
#: loads from numba's cache), so compile time is part of the user's wait (issue 12):
#: - ``step_fn``: a per-step helper, compiled on its own (many small functions compile in
#:   about half the time of the same code inlined into one giant) and without reference
#:   counting (``_nrt=False``): it reads and writes arrays its caller owns and returns no
#:   array, so the atomic reference-count updates of every state array at every call
#:   (which otherwise dominated a step) buy nothing. numba refuses any allocation there,
#:   and the functions they call inherit the setting (so they may not allocate either).
#: - ``inline_fn``: a few lines, or a helper with one call site, inlined into its caller
#:   (and helpers returning an array, which a function without reference counting may not
#:   hand to one with it).
step_fn = njit(cache=True, no_cpython_wrapper=True, _nrt=False)
inline_fn = njit(cache=True, inline="always")


# --------------------------------------------------------------------------------------
# start events: a binary heap of (time, flow), popped in (time, flow) order
# --------------------------------------------------------------------------------------


@inline_fn
def _zeroed(buf, n):
    """``buf`` (a scratch row) with its first ``n`` slots set to zero."""
    for i in range(n):
        buf[i] = 0.0
    return buf


@inline_fn
def _less(ht, hf, a, b) -> bool:
    return ht[a] < ht[b] or (ht[a] == ht[b] and hf[a] < hf[b])


@step_fn
def heap_push(st, t, f) -> None:
    st_si = st.si
    stf = st.f
    sti = st.i
    ht, hf = stf[S_HEAP_T], sti[S_HEAP_F]
    i = st_si[I_HEAP]
    st_si[I_HEAP] += 1
    ht[i], hf[i] = t, f
    while i > 0:
        p = (i - 1) // 2
        if not _less(ht, hf, i, p):
            break
        ht[i], ht[p] = ht[p], ht[i]
        hf[i], hf[p] = hf[p], hf[i]
        i = p


@inline_fn
def _heap_pop(st) -> int:
    st_si = st.si
    stf = st.f
    sti = st.i
    ht, hf = stf[S_HEAP_T], sti[S_HEAP_F]
    f = hf[0]
    n = st_si[I_HEAP] - 1
    st_si[I_HEAP] = n
    ht[0], hf[0] = ht[n], hf[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _less(ht, hf, c + 1, c):
            c += 1
        if not _less(ht, hf, c, i):
            break
        ht[i], ht[c] = ht[c], ht[i]
        hf[i], hf[c] = hf[c], hf[i]
        i = c
    return f


@inline_fn
def release(net, st, f, t_fin) -> None:
    """Flow ``f`` finished at ``t_fin``: dependants whose last prerequisite it was start."""
    sti = st.i
    ntf = net.f
    nti = net.i
    net_dependants = net.dependants
    for j in range(nti[N_DPTR, f], nti[N_DPTR, f + 1]):
        g = net_dependants[j]
        sti[S_N_DEPS_LEFT, g] -= 1
        if sti[S_N_DEPS_LEFT, g] == 0:
            heap_push(st, max(t_fin, ntf[N_FLOW_START, g]), g)


# --------------------------------------------------------------------------------------
# running set
# --------------------------------------------------------------------------------------


@inline_fn
def _gather_routes(net, st) -> None:
    """Running flows, their routes (flow order) and entries (route order, hop order)."""
    st_si = st.si
    sti = st.i
    stb = st.b
    nti = net.i
    net_indptr = net.indptr
    net_r_order = net.r_order
    si = st_si
    # running flows in id order: the previous set (already in id order) less finished
    # flows, merged with the new starts (sorted here)
    cand = _merge_sorted(sti[S_A_F], si[I_NAF], _heapsort(sti[S_NEW_F], si[I_NNEW]),
                         sti[S_SCR_A])
    si[I_NNEW] = 0
    nf = nr = ne = 0
    for f in cand:
        if not stb[S_RUNNING, f]:
            continue
        sti[S_A_F, nf] = f
        sti[S_A_FSTART, nf] = nr
        for j in range(nti[N_F_RPTR, f], nti[N_F_RPTR, f + 1]):
            k = net_r_order[j]
            sti[S_A_R, nr] = k
            sti[S_A_RFLOW, nr] = nf
            sti[S_A_ESTART, nr] = ne
            sti[S_A_NE, nr] = net_indptr[k + 1] - net_indptr[k]
            st.f[S_A_W, nr] = net.f[N_W, k]  # (read in route order every step)
            st.f[S_A_CAP, nr] = net.f[N_CAP, nti[N_FIRST_LINK, k]]
            for e in range(net_indptr[k], net_indptr[k + 1]):
                sti[S_AE, ne] = e
                sti[S_AE_ROUTE, ne] = nr
                sti[S_AE_LINK, ne] = nti[N_LINKS, e]
                sti[S_AE_REV, ne] = nti[N_REV, nti[N_LINKS, e]]  # where its ACKs go
                ne += 1
            nr += 1
        nf += 1
    sti[S_A_FSTART, nf] = nr
    si[I_NAF], si[I_NAR], si[I_NAE] = nf, nr, ne
    # the routes ECN can mark (a link with a finite Kmin): only their DCQCN state can
    # change (the others, NVLink routes, never see a CNP, so their timers never start)
    ncc = 0
    for r in range(nr):
        e0 = sti[S_A_ESTART, r]
        for j in range(e0, e0 + sti[S_A_NE, r]):
            if net.f[N_KMIN, sti[S_AE_LINK, j]] < _INF:
                sti[S_A_CC, ncc] = r
                ncc += 1
                break
    si[I_NCC] = ncc


@inline_fn
def _heapsort(a, n):
    """``a[:n]`` sorted in place (ascending); returns that slice. Hand-written: numba's
    ``ndarray.sort`` costs seconds of compilation (issue 12: first run)."""
    v = a[:n]
    for start in range(n // 2 - 1, -1, -1):
        _sift_down(v, start, n)
    for end in range(n - 1, 0, -1):
        v[0], v[end] = v[end], v[0]
        _sift_down(v, 0, end)
    return v


@inline_fn
def _sift_down(v, i, n) -> None:
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and v[c + 1] > v[c]:
            c += 1
        if not v[c] > v[i]:
            return
        v[i], v[c] = v[c], v[i]
        i = c


@inline_fn
def _merge_sorted(a, na, b, buf):
    """The ascending ``a[:na]`` and ``b`` merged into ``buf`` (ascending); returns the
    merged slice of ``buf``."""
    out = buf[:na + len(b)]
    i = j = 0
    for p in range(len(out)):
        if j >= len(b) or (i < na and a[i] <= b[j]):
            out[p] = a[i]
            i += 1
        else:
            out[p] = b[j]
            j += 1
    return out


@inline_fn
def _gather_links(net, st) -> None:
    """Queue entries (hop >= 1) grouped by link, links ordered by topological level."""
    sti = st.i
    nti = net.i
    si = st.si
    L = net.dims[D_L]
    cnt, slot, per, fill = sti[S_SCR_A], sti[S_SCR_B], sti[S_SCR_C], sti[S_SCR_D]
    for li in range(L):
        cnt[li] = 0
    nq = 0
    for j in range(si[I_NAE]):
        if nti[N_HOP, sti[S_AE, j]] > 0:
            sti[S_Q_ENT, nq] = j
            cnt[sti[S_AE_LINK, j]] += 1
            nq += 1
    si[I_NQ] = nq
    # links ordered by (level, id): count per level, then place in id order
    max_lv = 0
    for v in range(net.dims[D_MAX_LV] + 2):
        per[v] = 0
    for li in range(L):
        if cnt[li] > 0:
            v = nti[N_LEVEL, li]
            max_lv = max(max_lv, v)
            per[v + 1] += 1
    for v in range(1, max_lv + 2):
        per[v] += per[v - 1]
    nl = per[max_lv + 1]
    nv = 0
    for v in range(1, max_lv + 1):
        if per[v + 1] > per[v]:
            sti[S_LV_PTR, nv] = per[v]
            nv += 1
    sti[S_LV_PTR, nv] = nl
    si[I_NLK], si[I_NLV] = nl, nv
    for li in range(L):
        if cnt[li] > 0:
            v = nti[N_LEVEL, li]
            sti[S_LK_LINK, per[v]] = li
            slot[li] = per[v]
            per[v] += 1
    sti[S_LK_PTR, 0] = 0
    for i in range(nl):
        fill[i] = sti[S_LK_PTR, i]
        sti[S_LK_PTR, i + 1] = fill[i] + cnt[sti[S_LK_LINK, i]]
    for i in range(nq):
        j = sti[S_Q_ENT, i]
        s = slot[sti[S_AE_LINK, j]]
        sti[S_LK_ENT, fill[s]] = j
        fill[s] += 1
    _positions(net, st)


@inline_fn
def _positions(net, st) -> None:
    """Where each running entry's state lives while steps run: ``lk_ent[p]`` is the entry
    at position ``p`` (queue entries in the sweep's link order, then the first hops in
    entry order), ``pos`` its inverse, ``p_up[p]`` the position of the hop before a queue
    entry, ``p_link[p]`` its link, ``p_ing[p]`` the port its bytes arrived on,
    ``p_route[p]`` its running route and ``a_last[r]`` the position of route ``r``'s last
    hop. The FIFO sweep then walks its state rows in memory order (stored in entry order
    and visited link by link, every entry cost a handful of cache misses: most of a step
    at 4,096 GPUs, issue 26)."""
    sti = st.i
    nti = net.i
    nq, ne = st.si[I_NQ], st.si[I_NAE]
    p = nq
    for j in range(ne):
        if nti[N_HOP, sti[S_AE, j]] == 0:
            sti[S_LK_ENT, p] = j
            p += 1
    for p in range(ne):
        j = sti[S_LK_ENT, p]
        sti[S_POS, j] = p
        sti[S_P_LINK, p] = sti[S_AE_LINK, j]
        sti[S_P_ROUTE, p] = sti[S_AE_ROUTE, j]
    for r in range(st.si[I_NAR]):  # where each route's last hop (its delivery) lives
        sti[S_A_LAST, r] = sti[S_POS, sti[S_A_ESTART, r] + sti[S_A_NE, r] - 1]
    for p in range(nq):
        j = sti[S_LK_ENT, p]
        sti[S_P_UP, p] = sti[S_POS, j - 1]
        sti[S_P_ING, p] = sti[S_AE_LINK, j - 1]  # the port its bytes arrived on


@inline_fn
def _gather_ports(net, st) -> None:
    """``ing_link``: the ports (links) the running queue entries arrive on, ascending (the
    only ones PFC can pause while none is paused, :func:`_pfc`)."""
    sti = st.i
    mark = sti[S_SCR_A]
    for li in range(net.dims[D_L]):
        mark[li] = 0
    for p in range(st.si[I_NQ]):
        mark[sti[S_P_ING, p]] = 1
    n = 0
    for li in range(net.dims[D_L]):
        if mark[li]:
            sti[S_ING_LINK, n] = li
            n += 1
    st.si[I_NING] = n


@step_fn
def _load_work(st) -> None:
    """The running entries' state from its rows by entry (``q``, ``drain``, ``dep``) into
    its rows by position (``wq``, ... in the same order; ``warr`` is rewritten by every
    step's sweep before it is read, so it never moves)."""
    _move_work(st, True)
    st.si[I_WORK] = 1


@step_fn
def _store_work(st) -> None:
    """The inverse of :func:`_load_work` (before the running set changes, or the caller
    reads or rewrites the entries)."""
    if st.si[I_WORK] == 0:
        return
    _move_work(st, False)
    st.si[I_WORK] = 0


@inline_fn
def _move_work(st, load) -> None:
    stf = st.f
    sti = st.i
    for p in range(st.si[I_NAE]):
        e = sti[S_AE, sti[S_LK_ENT, p]]
        for o in range(S_WQ - S_Q):  # q, drain, dep (the sweep rewrites arr first)
            if o == S_ARR - S_Q:
                continue
            if load:
                stf[S_WQ + o, p] = stf[S_Q + o, e]
            else:
                stf[S_Q + o, e] = stf[S_WQ + o, p]


@inline_fn
def _gather_nics(net, st) -> None:
    """Sender NICs (sorted link ids) and their routes, for the NIC's max-min scheduler:
    ``nic_slot[r]`` is running route ``r``'s NIC position (a NIC's routes contiguous, in
    route order); demands and shares live by NIC position
    (``nic_dem``, ``nic_alloc``), so the scheduler walks them in order (a GPU's NVLink
    routes belong to different channels, far apart in route order)."""
    st_si = st.si
    sti = st.i
    nti = net.i
    L = net.dims[D_L]
    cnt, fill = sti[S_SCR_A], sti[S_SCR_B]
    for li in range(L):
        cnt[li] = 0
    for i in range(st_si[I_NAR]):
        cnt[nti[N_FIRST_LINK, sti[S_A_R, i]]] += 1
    n = 0
    sti[S_NIC_PTR, 0] = 0
    for li in range(L):
        if cnt[li] > 0:
            sti[S_NIC_LINK, n] = li
            fill[li] = sti[S_NIC_PTR, n]  # the NIC's next free position
            sti[S_NIC_PTR, n + 1] = sti[S_NIC_PTR, n] + cnt[li]
            n += 1
    st_si[I_NNIC] = n
    for g in range(n):
        for p in range(sti[S_NIC_PTR, g], sti[S_NIC_PTR, g + 1]):
            sti[S_NIC_G, p] = g
    for i in range(st_si[I_NAR]):
        li = nti[N_FIRST_LINK, sti[S_A_R, i]]
        sti[S_NIC_SLOT, i] = fill[li]
        sti[S_NIC_R, fill[li]] = i
        sti[S_WF_ORDER, fill[li]] = fill[li]  # the waterfill's sort starts from here
        fill[li] += 1


@step_fn
def rebuild(net, st) -> None:
    """The running set's index rows (``a_*``, ``lk_*``, ``nic_*``, positions) gathered
    afresh after flows started or finished (scratch in ``scr_*``: allocates nothing); the
    running entries' state goes back to its rows by entry first and comes out at its new
    positions after (one call, not three: every call passes ~170 words)."""
    if st.si[I_WORK]:
        _move_work(st, False)
    _gather_routes(net, st)
    _gather_links(net, st)
    _gather_nics(net, st)
    _gather_ports(net, st)
    st.si[I_REBUILD] = 0
    st.sf[F_QUIET] = 0.0
    _move_work(st, True)
    st.si[I_WORK] = 1


# --------------------------------------------------------------------------------------
# one step
# --------------------------------------------------------------------------------------


@inline_fn
def _service(ws) -> None:
    """Link service rates: capacity less the ACKs of last step's deliveries, and PFC."""
    st_si = ws.si
    stf = ws.f
    sti = ws.i
    ntf = ws.nf
    net_cfg = ws.cfg
    L = ws.L
    ack = _zeroed(ws.f[S_TMP0], L)
    ratio = net_cfg[C_ACK_RATIO]
    if ratio > 0:
        for r in range(st_si[I_NAR]):  # a route's entries are contiguous, in hop order
            e0 = sti[S_A_ESTART, r]
            a = ratio * stf[S_WDEP, sti[S_A_LAST, r]]
            for j in range(e0, e0 + sti[S_A_NE, r]):
                rv = sti[S_AE_REV, j]
                if rv >= 0:
                    ack[rv] += a
    for li in range(L):
        s = ntf[N_CAP, li] * stf[S_UP, li]
        if ratio > 0:
            s = max(s - ack[li], 0.0)
        stf[S_SERV, li] = s
        stf[S_SERV_EFF, li] = min(s, stf[S_PFC_ALLOW, li])


@step_fn
def _allocate(ws, t, dt) -> None:
    """The links' service rates (:func:`_service`), then the demands and NIC shares of the
    running routes over the step ``[t, t + dt]`` and each flow's rate ``a_rf`` (its mean
    over the step).

    A flow starts and stops injecting inside the step at its own time: its demand is its
    rate limit (:func:`_limit`) times the part of the step it is active, and at most its
    remaining bytes over the step, so its bytes are exact and its rate is its mean over
    the step (``fluid.py``, "Stepping"). The NIC shares its capacity max-min among its
    QPs: sort a NIC's demands, the fair level (``nic_lv``, by NIC position) is the first
    ``(cap − Σ smaller) / n_rest`` that does not exceed the next demand (``I_OVER``: some
    NIC is; else ``nic_lv`` holds the part of the step each QP is active, for
    :func:`_free_share`). ``I_ENDS``: the remaining bytes of some flow bound its demand
    (it ends inside the step).
    """
    _service(ws)
    st_si = ws.si
    stf = ws.f
    sti = ws.i
    stb = ws.b
    nr, nf = st_si[I_NAR], st_si[I_NAF]
    ends = _demands(ws, t, dt)
    nn = st_si[I_NNIC]
    over = False
    for g in range(nn):
        tot = 0.0
        for j in range(sti[S_NIC_PTR, g], sti[S_NIC_PTR, g + 1]):
            tot += stf[S_NIC_DEM, j]
        if not tot <= stf[S_SERV_EFF, sti[S_NIC_LINK, g]] * (1 + 1e-12):
            over = True
            break
    if nn == nr or not over:
        for g in range(nn):
            c = stf[S_SERV_EFF, sti[S_NIC_LINK, g]]
            for j in range(sti[S_NIC_PTR, g], sti[S_NIC_PTR, g + 1]):
                d = stf[S_NIC_DEM, j]
                stf[S_NIC_ALLOC, j] = min(d, c) if nn == nr else d
        st_si[I_OVER] = 0
    else:
        _waterfill(ws, nn)
        st_si[I_OVER] = 1
    st_si[I_ENDS] = ends
    for i in range(nf):
        rf = _INF
        for r in range(sti[S_A_FSTART, i], sti[S_A_FSTART, i + 1]):
            w = stf[S_A_W, r]
            rf = min(rf, stf[S_NIC_ALLOC, sti[S_NIC_SLOT, r]] / w if w > 0 else _INF)
        if not np.isfinite(rf) or not stb[S_A_SENDING, i]:
            rf = 0.0
        stf[S_A_RF, i] = rf
        for r in range(sti[S_A_FSTART, i], sti[S_A_FSTART, i + 1]):  # each route's share
            stf[S_A_X, r] = stf[S_A_W, r] * rf


@inline_fn
def _demands(ws, t, dt) -> bool:
    """Each running route's demand on its NIC over the step (``nic_dem``, by NIC position);
    returns whether some flow's remaining bytes bound it (the flow ends inside the step)."""
    stf, sti, stb, ntf = ws.f, ws.i, ws.b, ws.nf
    phi, rdt = ws.f[S_TMP2], ws.f[S_TMP3]  # by running flow: active part, remaining / dt
    for i in range(ws.si[I_NAF]):
        f = sti[S_A_F, i]
        size = ntf[N_SIZE_W, f]
        rem = size - stf[S_INJ, f]
        stb[S_A_SENDING, i] = rem > 1e-9 * max(size, 1.0)
        phi[i] = _active(stf[S_START, f], t, dt)
        rdt[i] = rem / dt
    ends = False
    for i in range(ws.si[I_NAR]):
        fi = sti[S_A_RFLOW, i]
        w = stf[S_A_W, i]
        d = _limit(ws, i) * phi[fi]
        if w * rdt[fi] <= d:
            d = w * rdt[fi]
            ends = True
        stf[S_NIC_DEM, sti[S_NIC_SLOT, i]] = d if stb[S_A_SENDING, fi] else 0.0
    return ends


@inline_fn
def _limit(ws, r) -> float:
    """Running route ``r``'s rate limit: its first link, its DCQCN rate, its flow's pacer."""
    d = ws.f[S_A_CAP, r]
    if ws.cfg[C_DCQCN] > 0:
        d = min(d, ws.cc[CC_RC, ws.i[S_A_R, r]] / 8e9)
    return min(d, ws.f[S_A_W, r] * ws.f[S_FLOW_CAP, ws.i[S_A_F, ws.i[S_A_RFLOW, r]]])


@inline_fn
def _free_share(ws, p) -> float:
    """The rate the QP at NIC position ``p`` sends at while it sends, its NIC not being
    overloaded: what the NIC's QPs active the whole step leave it, or its share of what
    they use, whichever is more (8 QPs sharing a NIC that all end inside a step take turns,
    not the line rate each; a QP whose successor starts after it ended had the NIC to
    itself)."""
    stf, sti = ws.f, ws.i
    phi, dem = stf[S_TMP2], stf[S_NIC_DEM]  # (by running flow: the part of the step active)
    g = sti[S_NIC_G, p]
    c = stf[S_SERV_EFF, sti[S_NIC_LINK, g]]
    s1 = 0.0
    for j in range(sti[S_NIC_PTR, g], sti[S_NIC_PTR, g + 1]):
        if phi[sti[S_A_RFLOW, sti[S_NIC_R, j]]] >= 1.0:
            s1 += dem[j]
    others = s1 - dem[p] if phi[sti[S_A_RFLOW, sti[S_NIC_R, p]]] >= 1.0 else s1
    return max(c - others, c * dem[p] / s1) if s1 > 0 else c


@inline_fn
def _active(start, t, dt) -> float:
    """The part of the step ``[t, t + dt]`` after ``start``."""
    return min(max((t + dt - start) / dt, 0.0), 1.0) if start > t else 1.0


@inline_fn
def _waterfill(ws, nn) -> None:
    stf = ws.f
    sti = ws.i
    dem, alloc = stf[S_NIC_DEM], stf[S_NIC_ALLOC]  # by NIC position
    order, tmp = sti[S_WF_ORDER], sti[S_WF_TMP]
    # the numpy engine sorted all demands by (NIC, demand) (stable) and took one running
    # sum over them; the same sorted values and sums here, without allocating (the order
    # of equal demands changes no sum, level or share)
    cs = 0.0
    for g in range(nn):
        a, b = sti[S_NIC_PTR, g], sti[S_NIC_PTR, g + 1]
        cap = stf[S_SERV_EFF, sti[S_NIC_LINK, g]]
        n = b - a
        d0 = dem[a]
        same = True
        for p in range(a + 1, b):
            same = same and dem[p] == d0
        if not same:  # (equal demands, often a GPU's NVLink QPs, are in order)
            _sort_by(dem, order, a, b, tmp)
        cs0 = cs
        level = _INF
        for p in range(n):
            dv = d0 if same else dem[order[a + p]]
            before = cs - cs0
            n_rest = n - p
            if level == _INF and before + n_rest * dv >= cap:
                level = (cap - before) / n_rest
            cs += dv
        lv = max(level, 0.0)
        for p in range(a, b):
            alloc[p] = min(dem[p], lv)
            stf[S_NIC_LV, p] = lv


@inline_fn
def _sort_by(key, order, a, b, tmp) -> None:
    """``order[a:b]``, a NIC's positions ``a:b``, sorted by ``key``: an insertion sort of
    the last step's order for a NIC's few QPs (demands change order rarely, so it costs a
    pass), a stable merge sort of ``a:b`` (``tmp`` its scratch) beyond. ``_gather_nics``
    starts ``order`` in position order."""
    n = b - a
    if n > 48:
        for p in range(a, b):
            order[p] = p
        _merge_sort_by(key, order, a, b, tmp)
        return
    for p in range(a + 1, b):
        m = order[p]
        kv = key[m]
        q = p
        while q > a and key[order[q - 1]] > kv:
            order[q] = order[q - 1]
            q -= 1
        order[q] = m


@step_fn
def _merge_sort_by(key, order, a, b, tmp) -> None:
    """``order[a:b]`` sorted by ``key`` with a stable bottom-up merge sort (the permutation
    ``np.argsort(kind="mergesort")`` gives), ``tmp`` as scratch. Hand-written: numba's
    argsort costs seconds of compilation, and the step kernel does not allocate."""
    n = b - a
    src, dst = order[a:b], tmp[:n]
    in_tmp = False
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for p in range(lo, hi):
                # a right element goes first only if strictly smaller: stable
                if j < hi and (i >= mid or key[src[j]] < key[src[i]]):
                    dst[p] = src[j]
                    j += 1
                else:
                    dst[p] = src[i]
                    i += 1
        src, dst = dst, src
        in_tmp = not in_tmp
        width *= 2
    if in_tmp:  # the last pass wrote to the scratch
        for p in range(n):
            order[a + p] = tmp[p]


@step_fn
def _quiet_dt(ws, t) -> float:
    """The length of a quiet step (:func:`_advance` caps it at the next failure or sample):
    it runs to the next event (a flow's start or end, a DCQCN timer) or its horizon, but
    lasts at least ``dt_ns`` (``dt_free_ns`` when a flow event ends it while the fabric
    is free-flowing, :func:`_free_flowing`): flows start and stop inside a step at their
    own time (:func:`_allocate`) and timers fire at its end, as in active steps (which
    last ``dt_ns``).

    (Flow events used to end steps too: the 64-GPU rack-order ring of the validation set
    took 13,045 steps, one per start and end of its 8,064 flows, most far below 2 µs.)"""
    sf, si, stf, sti, cfg = ws.sf, ws.si, ws.f, ws.i, ws.cfg
    dt = max(sf[F_QUIET], cfg[C_DT])
    ev = _INF
    for i in range(si[I_NAF]):  # the next end of injection (steady: the same rates)
        rf = stf[S_A_RF, i]
        f = sti[S_A_F, i]
        rem = ws.nf[N_SIZE_W, f] - stf[S_INJ, f]
        if rf > 0 and rem > 1e-6 * max(ws.nf[N_SIZE_W, f], 1.0):
            ev = min(ev, rem / rf)
    if si[I_HEAP] > 0:
        ev = min(ev, stf[S_HEAP_T, 0] - t)
    # free-flowing: longer steps hold the flow events (dt_free_ns)
    dt = min(dt, max(ev, cfg[C_DT_FREE]) if si[I_FREE] else ev)
    if cfg[C_DCQCN] > 0:
        # a quiet jump must not skip a rate increase (or a pending decrease) by more
        # than a step (cutting the step at every timer cost a third of the steps at
        # 1,024 GPUs: thousands of QPs' timers, one every few hundred ns)
        for c in range(si[I_NCC]):
            k = sti[S_A_R, sti[S_A_CC, c]]
            dt = min(dt, ws.cc[CC_T_INC, k] - t)
            if ws.cc[CC_DEC_CNP, k]:
                dt = min(dt, ws.cc[CC_T_DEC, k] - t)
    return max(dt, cfg[C_DT])


@inline_fn
def _sweep_level(ws, dt, lo, hi) -> float:
    """FIFO service of the links ``lk_link[lo:hi]`` (one topological level); returns the
    largest departure change.

    One pass takes every entry's arrivals and each link's sums (arrivals, content, what
    draining entries release); a second moves the bytes (the FIFO, :func:`_fifo_shares`;
    for an empty link that is not overloaded its arithmetic reduces to ``out = in``, done
    directly), or passes the arrivals straight through when nothing at the level queues
    and no link is overloaded. (The draining rule needs content, so the first pass's updates hold in
    every case.) The second pass also makes the departures current and sums each link's
    bytes and content, entry by entry (:func:`_serve_link`; a third pass did it)."""
    stf = ws.f
    sti = ws.i
    views = (stf[S_WQ], stf[S_WDRAIN], stf[S_WARR], stf[S_WNEW], stf[S_WDEP], ws.f[S_TMP0])
    q, drain, arr, new, dep_old, lb = views
    up = sti[S_P_UP]
    ddep = 0.0
    passthru = True
    for i in range(lo, hi):
        asum = 0.0
        qsum = 0.0
        tsum = 0.0
        for p in range(sti[S_LK_PTR, i], sti[S_LK_PTR, i + 1]):
            a_in = new[up[p]]
            arr[p] = a_in
            qv = q[p]
            dr = drain[p]
            if a_in * dt > 0:
                dr = 0.0
            elif dr <= 0 and qv > 0:
                dr = dep_old[p]
            drain[p] = dr
            asum += a_in * dt
            qsum += qv
            tsum += min(qv, dr * dt)
        stf[S_LK_SUM, i] = asum
        stf[S_LK_QSUM, i] = qsum
        stf[S_LK_TSUM, i] = tsum
        if qsum != 0.0 or not asum <= stf[S_SERV_EFF, sti[S_LK_LINK, i]] * dt:
            passthru = False
    if not passthru:
        ws.si[I_PASS] = 0
    qmax = 0.0
    for i in range(lo, hi):
        d, qs = _serve_link(stf, sti, views, dt, i, passthru)
        ddep = max(ddep, d)
        qmax = max(qmax, qs)
    ws.sf[F_QMAX] = max(ws.sf[F_QMAX], qmax)  # (once: a store per link slowed the loop)
    return ddep


@inline_fn
def _serve_link(stf, sti, views, dt, i, passthru) -> tuple[float, float]:
    """Link ``lk_link[i]``'s entries served (see :func:`_sweep_level`) and settled in one
    pass: departures made current, the link's bytes this step (into ``lb``) and content
    (``qlink``). Returns the largest departure change and the link's content."""
    q, drain, arr, new, dep_old, lb = views
    li = sti[S_LK_LINK, i]
    asum = stf[S_LK_SUM, i]
    # 0: nothing queued at the level and no link overloaded, arrivals pass through;
    # 1: an empty link not overloaded (the FIFO's arithmetic reduces to out = in);
    # 2: the FIFO (:func:`_fifo_shares`)
    mode = 0 if passthru else (
        1 if (stf[S_LK_QSUM, i] == 0.0 and asum > _TINY
              and asum <= stf[S_SERV_EFF, li] * dt) else 2)
    tscale, fq, fa = _fifo_shares(stf, sti, dt, i) if mode == 2 else (1.0, 0.0, 0.0)
    ddep = 0.0
    lbs = lb[li]
    qs = 0.0
    for p in range(sti[S_LK_PTR, i], sti[S_LK_PTR, i + 1]):
        if mode == 0:
            nw = arr[p]
        elif mode == 1:
            nw = arr[p] * dt / dt  # (as the FIFO computes it, to the bit)
            q[p] = 0.0
        else:
            qv = q[p]
            in_b = arr[p] * dt
            take = min(qv, drain[p] * dt) * tscale
            out_b = take + (qv - take) * fq + in_b * fa
            nw = out_b / dt
            q[p] = max(qv + in_b - out_b, 0.0)
        new[p] = nw
        ddep = max(ddep, abs(nw - dep_old[p]))
        dep_old[p] = nw
        lbs += nw * dt
        qs += q[p]
    lb[li] = lbs
    stf[S_QLINK, li] = qs
    return ddep, qs


@inline_fn
def _fifo_shares(stf, sti, dt, i) -> tuple[float, float, float]:
    """One link's FIFO: present content leaves first (entries whose arrivals stopped drain
    linearly at their last departure rate, scaled by ``tscale`` when they release more
    than the link serves), then the rest of the content (fraction ``fq``), then this
    step's arrivals pro rata (fraction ``fa``)."""
    asum, qsum, tsum = stf[S_LK_SUM, i], stf[S_LK_QSUM, i], stf[S_LK_TSUM, i]
    served = min(stf[S_SERV_EFF, sti[S_LK_LINK, i]] * dt, qsum + asum)
    tscale = served / tsum if tsum > served else 1.0
    tsum = min(tsum, served)
    rest = served - tsum
    qrsum = qsum - tsum
    from_q = min(rest, qrsum)
    fq = from_q / qrsum if qrsum > _TINY else 0.0
    fa = (rest - from_q) / asum if asum > _TINY else 0.0
    return tscale, fq, fa


@step_fn
def _sweep(ws, dt) -> float:
    """Move every running entry's bytes one step; returns the largest departure change."""
    st_si = ws.si
    stf = ws.f
    sti = ws.i
    ntf = ws.nf
    ne, nq = st_si[I_NAE], st_si[I_NQ]
    L = ws.L
    lb = ws.f[S_TMP0]
    for li in range(L):
        lb[li] = 0.0
        stf[S_QLINK, li] = 0.0
    for p in range(nq, ne):  # first hops: what the sources inject
        stf[S_WNEW, p] = stf[S_A_X, sti[S_P_ROUTE, p]]
    ddep = 0.0
    st_si[I_PASS] = 1  # every level passed its arrivals through (cleared where not)
    ws.sf[F_QMAX] = 0.0  # the largest link content at the step's end
    for v in range(st_si[I_NLV]):
        ddep = max(ddep, _sweep_level(ws, dt, sti[S_LV_PTR, v], sti[S_LV_PTR, v + 1]))
    # the first hops after the queue entries (a link's sums in position order, as before)
    for p in range(nq, ne):
        nw = stf[S_WNEW, p]
        ddep = max(ddep, abs(nw - stf[S_WDEP, p]))
        stf[S_WDEP, p] = nw
        lb[sti[S_P_LINK, p]] += nw * dt
    for li in range(L):
        if lb[li] != 0.0:  # (an idle link's bytes and peak stay as they are)
            stf[S_LINK_BYTES, li] += lb[li]
            den = ntf[N_CAP, li] * dt + _TINY
            # the division only where the step may raise the peak (well clear of rounding)
            if lb[li] >= stf[S_PEAK_UTIL, li] * den * (1 - 1e-9):
                stf[S_PEAK_UTIL, li] = max(stf[S_PEAK_UTIL, li], lb[li] / den)
        stf[S_MAX_Q, li] = max(stf[S_MAX_Q, li], stf[S_QLINK, li])
    for i in range(st_si[I_NAF]):
        if stf[S_A_RF, i] > 0:
            _inject(ws, i, dt)
    for r in range(st_si[I_NAR]):
        stf[S_DELIV, sti[S_A_R, r]] += stf[S_WDEP, sti[S_A_LAST, r]] * dt
    return ddep


@inline_fn
def _inject(ws, i, dt) -> None:
    """Running flow ``i`` injects its step's bytes; if that was its last, ``t_end`` is when
    it stopped: the step's end, or, when its remaining bytes bound its demand, after them
    at the rate it sends at (its rate limit, or what its NIC gives it: the fair level of an
    overloaded NIC, else :func:`_free_share`), from when it became active."""
    stf, ntf, f = ws.f, ws.nf, ws.i[S_A_F, i]
    rem = ntf[N_SIZE_W, f] - stf[S_INJ, f]
    stf[S_INJ, f] += stf[S_A_RF, i] * dt
    if ntf[N_SIZE_W, f] - stf[S_INJ, f] <= 1e-6 * max(ntf[N_SIZE_W, f], 1.0):
        ri = _send_rate(ws, i) if ws.si[I_ENDS] else _INF
        t = ws.sf[F_T]
        te = max(t, stf[S_START, f]) + rem / ri if 0 < ri < _INF else t + dt
        stf[S_T_END, f] = min(te, t + dt)


@step_fn
def _send_rate(ws, i) -> float:
    """The rate running flow ``i`` sends at while it sends (compiled on its own: a flow's
    end is rare, and inlined it grew the first run's compilation)."""
    stf, sti = ws.f, ws.i
    ri = _INF
    for r in range(sti[S_A_FSTART, i], sti[S_A_FSTART, i + 1]):
        w = stf[S_A_W, r]
        if w > 0:
            p = sti[S_NIC_SLOT, r]
            lv = stf[S_NIC_LV, p] if ws.si[I_OVER] else _free_share(ws, p)
            ri = min(ri, min(_limit(ws, r), lv) / w)
    return ri


@inline_fn
def _queue_wait(ws, li) -> float:
    """Time (ns) link ``li``'s egress queue takes to drain at its line rate: what a packet
    joining it now waits (at most 1 s; a link that is down would never drain)."""
    return min(ws.f[S_QLINK, li] / max(ws.nf[N_CAP, li] * ws.f[S_UP, li], _TINY), 1e9)


@inline_fn
def rev_delay(ws, out) -> np.ndarray:
    """Queueing delay (ns) an ACK meets on the reverse direction of each link, written
    to ``out``."""
    nti = ws.ni
    L = ws.L
    _zeroed(out, L)
    for li in range(L):
        rv = nti[N_REV, li]
        if rv >= 0:
            out[li] = _queue_wait(ws, rv)
    return out


@inline_fn
def _bucket(t, bw, inv) -> np.int64:
    """``t // bw`` for ``t >= 0`` (the CNP delay line's slot of time ``t``), without the
    float floor division, which calls ``fmod`` (a quarter of a marking step's time): the
    floor of ``t`` times ``inv`` (``1 / bw``: no division's latency per mark), corrected
    by one where the product rounded across an integer (``b * bw`` is exact for the slot
    counts of a run), so exactly ``t // bw``."""
    b = np.floor(t * inv)
    if b * bw > t:
        b -= 1.0
    elif (b + 1.0) * bw <= t:
        b += 1.0
    return np.int64(b)


@inline_fn
def _red(ws, li, q) -> float:
    """RED marking probability of link ``li`` at queue ``q`` (dataplane/ecn.py)."""
    ntf = ws.nf
    net_cfg = ws.cfg
    kmin, kmax = ntf[N_KMIN, li], ntf[N_KMAX, li]
    if not q > kmin:
        return 0.0
    if q > kmax:
        return net_cfg[C_ABOVE]
    span = max(kmax - kmin, 1e-9)
    return min(max((q - kmin) / span, 0.0), 1.0) * ntf[N_PMAX, li]


@inline_fn
def _marks(ws, fb, t_new, dt) -> bool:
    """ECN marks of this step into the CNP delay line; returns whether any was made.

    When the CNP reaches the sender (HPCC ns-3, ``simulation/src/point-to-point/model``):
    a switch marks a packet as it leaves an egress queue (``SwitchNode::SwitchNotifyDequeue``
    -> ``SwitchMmu::ShouldSendCN``); the marked packet still crosses, and queues at, every
    later hop of its route; the receiver sets the CNP flag on the ACK it returns
    (``RdmaHw::ReceiveUdp``: ``seqh.SetCnp()``), the ACK queues on the reverse path, and the
    sender reacts when it arrives (``RdmaHw::ReceiveAck`` -> ``cnp_received_mlx``). So a
    mark made at hop j is due at: now + the path latency from hop j on and back
    (``fb_lat`` of the entry) + the queue wait of every hop after j (its content over its
    line rate, at mark time) + the reverse path's queue waits. The delay line holds every
    delay the run's buffers allow (``FluidSim._feedback_slots``; it grows as delays need,
    :func:`_line_rows`); a longer one is clamped to its last slot, never wrapped onto an
    earlier one. Runs after :func:`_cnps` of the step, so the slots after the step's
    bucket hold nothing yet collected.
    """
    pl = ws.f[S_TMP0]
    anyp = False
    for li in range(ws.L):
        pl[li] = _red(ws, li, ws.f[S_QLINK, li])
        anyp = anyp or pl[li] > 0
    if not anyp:
        return False
    mlink = _zeroed(ws.f[S_TMP1], ws.L)
    _queue_waits(ws)
    cur_b = _bucket(t_new, ws.cfg[C_FB_BW], 1.0 / ws.cfg[C_FB_BW])
    anyk = False
    for c in range(ws.si[I_NCC]):  # (the other routes cross no marking link)
        anyk = _mark_route(ws, fb, ws.i[S_A_CC, c], t_new, dt, cur_b) or anyk
    for li in range(ws.L):
        ws.f[S_MARKED_BYTES, li] += mlink[li]
    return anyk


@inline_fn
def _queue_waits(ws) -> None:
    """Every link's queue wait (``tmp2``; once per link, a division, rather than per
    entry; an empty queue's is zero, as the division gives) and the queue wait its ACKs
    (which carry CNPs) meet on the reverse link (``tmp3``)."""
    rd = _zeroed(ws.f[S_TMP3], ws.L)
    qw = ws.f[S_TMP2]
    for li in range(ws.L):
        qw[li] = _queue_wait(ws, li) if ws.f[S_QLINK, li] != 0.0 else 0.0
    if ws.cfg[C_ACK_QUEUE] > 0:
        for li in range(ws.L):
            rv = ws.ni[N_REV, li]
            if rv >= 0:
                rd[li] = qw[rv]


@inline_fn
def _mark_route(ws, fb, r, t_new, dt, cur_b) -> bool:
    """Running route ``r``'s marks of this step (marking probability by link in ``tmp0``)
    into the delay line, each due after the queues downstream of its hop and on the
    reverse path; its marked bytes by link into ``tmp1``. Returns whether it made one."""
    sti, pl, mlink = ws.i, ws.f[S_TMP0], ws.f[S_TMP1]
    qw, rd = ws.f[S_TMP2], ws.f[S_TMP3]
    e0, e1 = sti[S_A_ESTART, r], sti[S_A_ESTART, r] + sti[S_A_NE, r]
    hit = False
    rq = 0.0  # the reverse path's queueing, over the route's entries in order
    for j in range(e0, e1):
        li = sti[S_AE_LINK, j]
        hit = hit or pl[li] > 0
        rq += rd[li]
    if not hit:
        return False
    bw, k, rows = ws.cfg[C_FB_BW], sti[S_A_R, r], ws.si[I_FB_ROWS]
    inv = 1.0 / bw
    last = -1  # the last bucket a mark is due in
    down = 0.0  # queue wait at the hops after entry j
    for j in range(e1 - 1, e0 - 1, -1):
        li = sti[S_AE_LINK, j]
        mb = ws.f[S_WDEP, sti[S_POS, j]] * dt * pl[li]
        if mb != 0.0:
            mlink[li] += mb
            due = t_new + ws.nf[N_FB_LAT, sti[S_AE, j]] + down + rq
            b = max(_bucket(due, bw, inv), cur_b + 1)
            if b > cur_b + rows:
                rows = _line_rows(ws, cur_b, b)
                b = min(b, cur_b + rows)
            _cnp_add(fb.node, fb.val, sti, ws.si, k, sti[S_AE, j], b, mb / ws.cfg[C_PKT_WIRE])
            last = max(last, b)
        down += qw[li]
    if last < 0:
        return False
    # no quiet (long) step before the last of them is due
    ws.sf[F_MARKS_UNTIL] = max(ws.sf[F_MARKS_UNTIL], last * bw)
    return True


@inline_fn
def _line_rows(ws, cur_b, need) -> int:
    """The delay line's length in slots (``si[I_FB_ROWS]``), doubled (at most to
    ``si[I_FB_MAX]``) until slot ``need`` fits; returns it. Only the clamp of the longest
    delays depends on it: the slots live in the node pool (:func:`_cnp_add`)."""
    rows = ws.si[I_FB_ROWS]
    while need > cur_b + rows and 2 * rows <= ws.si[I_FB_MAX]:
        rows *= 2
    ws.si[I_FB_ROWS] = rows
    return rows


@step_fn
def _cnp_add(node, val, sti, si, k, e, b, m) -> None:
    """``m`` more CNPs due in slot ``b`` for route ``k``, marked at its entry ``e``. A
    route's pending slots are a list of pool nodes in slot order (``cnp_head``/``cnp_tail``):
    ``m`` adds to the node of slot ``b``, or goes in a new node (the free list's first,
    else the pool's next unused). (A dense ring of slots x routes swept by the clock missed
    the cache at every mark: the AllToAll's 2,048 x 240 slots, a tenth of its run time; the
    pool holds the pending slots alone, ~130 a route there.) Compiled on its own, with few
    arguments: inlined, its loops doubled :func:`_cnps`' first-run compilation."""
    nxt, prev = _cnp_place(node, sti, k, e, b)
    if nxt != 0 and node[nxt, 0] == b:
        val[nxt] += m
        sti[S_CNP_HINT, e] = nxt
        return
    n = si[I_CNP_FREE]
    if n != 0:
        si[I_CNP_FREE] = node[n, 1]
    else:
        n = si[I_CNP_TOP]
        si[I_CNP_TOP] = n + 1
    node[n, 0], node[n, 1], node[n, 2], node[n, 3] = b, nxt, prev, k
    val[n] = m  # (as a dense slot's 0.0 + m: the same value)
    if prev != 0:
        node[prev, 1] = n
    else:
        sti[S_CNP_HEAD, k] = n
    if nxt != 0:
        node[nxt, 2] = n
    else:
        sti[S_CNP_TAIL, k] = n
    sti[S_CNP_HINT, e] = n


@inline_fn
def _cnp_place(node, sti, k, e, b) -> tuple[int, int]:
    """Where slot ``b`` goes in route ``k``'s list: (the first node of slot >= ``b``, the
    one before it; 0: none). The search starts at entry ``e``'s last node while it is in
    route ``k``'s list (a collected node's route is -1 until it is reused; entries are
    renumbered on a reroute): a few slots before ``b`` (its delay moves with the queues),
    past the other hops' marks in between; else from the tail (a new mark's slot is
    mostly the route's latest)."""
    x = sti[S_CNP_HINT, e]
    if not (x != 0 and node[x, 3] == k):
        x = sti[S_CNP_TAIL, k]
        if x == 0:
            return 0, 0
    if node[x, 0] < b:  # forward to the last node before b
        while node[x, 1] != 0 and node[node[x, 1], 0] < b:
            x = node[x, 1]
        return node[x, 1], x
    while node[x, 2] != 0 and node[node[x, 2], 0] >= b:  # back to the first node >= b
        x = node[x, 2]
    return x, node[x, 2]


@step_fn
def _cnps(ws, fb, t_new, dt, rng) -> bool:
    """Collect the CNPs due now, draw which QPs see one, and run DCQCN on every QP (only
    the routes ECN can mark, ``a_cc``: the others' state never changes), in one pass over
    them (each QP's draw, CNP filter and update touch its own state only); then this
    step's marks (:func:`_marks`, after the collection freed the slots it writes to;
    nothing queues at the end of a step that passed every arrival through). Returns
    whether a mark was made. (One call, not two: a call passes ~90 words.)

    A draw per QP with CNPs due (in route order): one without cannot see one, so the stream
    does not depend on which other routes are running. A CNP within the CNP interval of the
    last one is ignored; a QP without a CNP whose timers are not due keeps its state (the
    update is skipped; its byte counter runs only after its first CNP)."""
    _collect_cnps(ws, fb, t_new)
    stf, sti, st_cc, dq = ws.f, ws.i, ws.cc, fb.dcqcn
    acc, cnp_n = sti[S_A_CC], ws.f[S_TMP0]
    interval = ws.cfg[C_CNP_INT]
    idle_ok = dq[PV_DEC_INT] > 0
    no_bc = dq[PV_BC] <= 0
    for c in range(ws.si[I_NCC]):
        r = acc[c]
        k = sti[S_A_R, r]
        cnp = cnp_n[c] > 0 and rng.random() < 1.0 - np.exp(-cnp_n[c])
        if cnp and interval > 0:
            if t_new - stf[S_LAST_CNP, k] >= interval:
                stf[S_LAST_CNP, k] = t_new
            else:
                cnp = False
        if (idle_ok and not cnp and st_cc[CC_T_ALPHA, k] > t_new and st_cc[CC_T_DEC, k] > t_new
                and st_cc[CC_T_INC, k] > t_new and (no_bc or st_cc[CC_STARTED, k] == 0)):
            continue
        dcqcn_update_qp(st_cc, k, cnp, t_new, dq, stf[S_A_X, r] * dt)
        if cnp:
            stf[S_ES_CNPS, k] += 1
    return ws.si[I_PASS] == 0 and _marks(ws, fb, t_new, dt)


@inline_fn
def _collect_cnps(ws, fb, t_new) -> None:
    """The CNPs of the slots due by ``t_new`` summed per ``a_cc`` position into ``tmp0``
    (in slot order, as the dense line's slots were; their nodes go to the free list).
    Other routes' pending CNPs belong to flows that ended: never read."""
    si, sti, acc = ws.si, ws.i, ws.i[S_A_CC]
    ncc = si[I_NCC]
    cur_b = _bucket(t_new, ws.cfg[C_FB_BW], 1.0 / ws.cfg[C_FB_BW])
    cnp_n = _zeroed(ws.f[S_TMP0], ncc)
    if not cur_b > si[I_FB_LAST]:
        return
    node, val = fb.node, fb.val
    free = si[I_CNP_FREE]
    for c in range(ncc):
        k = sti[S_A_R, acc[c]]
        n = sti[S_CNP_HEAD, k]
        if n == 0 or node[n, 0] > cur_b:
            continue
        v = 0.0
        while n != 0 and node[n, 0] <= cur_b:
            v += val[n]
            nxt = node[n, 1]
            node[n, 1], node[n, 3] = free, -1
            free, n = n, nxt
        cnp_n[c] = v
        sti[S_CNP_HEAD, k] = n
        if n != 0:
            node[n, 2] = 0
        else:
            sti[S_CNP_TAIL, k] = 0
    si[I_FB_LAST] = cur_b
    si[I_CNP_FREE] = free


@inline_fn
def _pfc_thresholds(ws, use, full) -> None:
    """Every port's XOFF/XON; a switch's shared-pool use summed over its ingress ports
    (``full``: all of them; else only the ports of the running queue entries, ``ing_link``,
    the others holding nothing). (Thresholds of the ``ing_link`` ports alone, through the
    index, cost more than every port's in one contiguous pass at 1,024 GPUs.)"""
    stf, ntf, nti, cfg = ws.f, ws.nf, ws.ni, ws.cfg
    if cfg[C_PFC_DYN] > 0:
        sw_shared = _zeroed(ws.f[S_TMP3], len(ws.pool))
        for x in range(ws.L if full else ws.si[I_NING]):
            li = x if full else ws.i[S_ING_LINK, x]
            if ws.ni[N_INGRESS_SW, li]:
                sw_shared[nti[N_SW_OF, li]] += max(use[li] - cfg[C_RESERVE], 0.0)
        for li in range(ws.L):
            s = nti[N_SW_OF, li]
            thr = ntf[N_PFC_ALPHA, li] * max(ws.pool[s] - sw_shared[s], 0.0)
            stf[S_PFC_XOFF, li] = cfg[C_RESERVE] + thr
            stf[S_PFC_XON, li] = cfg[C_RESERVE] + thr - cfg[C_RESUME]
    else:
        for li in range(ws.L):
            stf[S_PFC_XOFF, li] = cfg[C_XOFF]
            stf[S_PFC_XON, li] = cfg[C_XON]


@step_fn
def _pfc(ws, dt) -> None:
    """Fluid PFC: throttle each upstream transmitter so its ingress port holds XOFF.

    While no port is paused only the ports the running queue entries arrive on
    (``ing_link``) can pause, so the per-port passes visit those alone (a port no entry
    arrives on holds nothing and stays unpaused); once one is, every port."""
    st_si, stf, sti = ws.si, ws.f, ws.i
    full = st_si[I_NREG] > 0
    n = ws.L if full else st_si[I_NING]
    use, out, inn = stf[S_PFC_USE], ws.f[S_TMP1], ws.f[S_TMP4]
    for x in range(n):
        li = x if full else sti[S_ING_LINK, x]
        use[li] = 0.0
        out[li] = 0.0
        inn[li] = 0.0
    for p in range(st_si[I_NQ]):
        ing = sti[S_P_ING, p]
        use[ing] += stf[S_WQ, p]
        out[ing] += stf[S_WDEP, p]
        inn[ing] += stf[S_WARR, p]
    _pfc_thresholds(ws, use, full)
    st_si[I_HAS_USE] = 1
    if full:
        _pause_time(ws, dt, out)
    tau = max(dt, ws.cfg[C_TAU])
    # as in ns-3, a port is checked for pause only when bytes arrive on it
    # (SwitchNode::SendToDev -> CheckAndSendPfc) and for resume only when its own bytes
    # leave (SwitchNotifyDequeue -> CheckAndSendResume): a threshold that moves because
    # other ports filled or drained the shared pool acts at the port's next packet (an
    # empty port has no packet left to wait for: its last dequeue resumed it)
    reg = ws.b[S_PFC_REG]
    nreg = 0
    for x in range(n):
        li = x if full else sti[S_ING_LINK, x]
        if (ws.ni[N_INGRESS_SW, li] and not reg[li] and use[li] >= stf[S_PFC_XOFF, li]
                and inn[li] > 0):
            stf[S_PAUSE_CNT, li] += 1.0
            reg[li] = True
        elif reg[li] and use[li] <= stf[S_PFC_XON, li] and (out[li] > 0 or use[li] <= 0):
            reg[li] = False
        nreg += reg[li]
        stf[S_PFC_ALLOW, li] = (max(out[li] + (stf[S_PFC_XOFF, li] - use[li]) / tau, 0.0)
                                if reg[li] else _INF)
    st_si[I_NREG] = nreg


@inline_fn
def _pause_time(ws, dt, out) -> None:
    """Pause time and pause count of the paused ports that hold back traffic this step."""
    stf, sti, L = ws.f, ws.i, ws.L
    reg = ws.b[S_PFC_REG]
    nic_dem = _zeroed(ws.f[S_TMP2], L)
    for g in range(ws.si[I_NNIC]):  # (a NIC's routes in route order, as before)
        li = sti[S_NIC_LINK, g]
        for j in range(sti[S_NIC_PTR, g], sti[S_NIC_PTR, g + 1]):
            nic_dem[li] += stf[S_NIC_DEM, j]
    for li in range(L):
        if not reg[li]:
            continue
        serv = stf[S_SERV, li]
        allow = min(stf[S_PFC_ALLOW, li], serv)
        if not (stf[S_QLINK, li] > 1.0 or nic_dem[li] > allow * (1 + 1e-9)):
            continue
        frac = min(max(1.0 - allow / serv, 0.0), 1.0) if serv > 0 else 0.0
        stf[S_PAUSE_NS, li] += frac * dt
        o = min(out[li], serv)
        if frac > 1e-6 and o > _TINY:
            gap = ws.nf[N_PFC_GAP, li]
            period = gap / max(o, _TINY) + gap / max(serv - o, _TINY)
            stf[S_PAUSE_CNT, li] += dt / period


@inline_fn
def _horizon(ws, calm) -> float:
    """Longest step over which constant rates keep the model exact: until a queue entry
    empties, a PFC port crosses XOFF/XON, or a queue reaches Kmin (DCQCN)."""
    st_si = ws.si
    stf = ws.f
    sti = ws.i
    ntf = ws.nf
    net_cfg = ws.cfg
    cfg = net_cfg
    h = cfg[C_DT_QUIET]
    nq = st_si[I_NQ]
    if nq == 0:
        return h
    L = ws.L
    gp = _zeroed(ws.f[S_TMP2], L)
    gl = _zeroed(ws.f[S_TMP3], L)
    # a step that passed every arrival through left every entry empty with arrivals equal
    # to departures: nothing empties or fills (gp, gl stay zero)
    for p in range(0 if st_si[I_PASS] > 0 else nq):
        g = stf[S_WARR, p] - stf[S_WDEP, p]
        if g < -_TINY and stf[S_WQ, p] > 0:
            h = min(h, stf[S_WQ, p] / -g)
        gp[sti[S_P_ING, p]] += g
        gl[sti[S_P_LINK, p]] += g
    pfc = cfg[C_PFC_ON] > 0
    if pfc and st_si[I_NREG] > 0:
        # a paused port's share of its egress FIFO settles over ~Q/C; long steps would
        # freeze whatever shares the last event left (FluidConfig.dt_pfc_max_ns)
        h = min(h, cfg[C_DT_PFC])
    passed = st_si[I_PASS] > 0
    if pfc and st_si[I_HAS_USE] > 0 and not passed:
        h = _pfc_horizon(ws, gp, h)
    dcqcn = cfg[C_DCQCN] > 0
    if not (dcqcn or (calm and not passed)):
        return h
    for li in range(L):
        q = stf[S_QLINK, li]
        if dcqcn and q >= ntf[N_KMIN, li] * (1 - 1e-9):
            return 0.0  # marking: DCQCN dynamics, no long steps
        if gl[li] > _TINY:
            if calm:  # free-flowing: until a queue grows past a packet
                h = min(h, max(cfg[C_PKT_WIRE] - q, 0.0) / gl[li])
            if dcqcn and q < ntf[N_KMIN, li]:
                # +1 ns: land just above Kmin so that marking starts
                h = min(h, (ntf[N_KMIN, li] - q) / gl[li] + 1.0)
    return h


@inline_fn
def _pfc_horizon(ws, gp, h) -> float:
    stf = ws.f
    stb = ws.b
    ntf = ws.nf
    nti = ws.ni
    net_pfc_pool = ws.pool
    net_cfg = ws.cfg
    L = ws.L
    reg, use = stb[S_PFC_REG], stf[S_PFC_USE]
    dyn = net_cfg[C_PFC_DYN] > 0
    gs = _zeroed(ws.f[S_TMP4], len(net_pfc_pool))
    if dyn:
        for li in range(L):
            if nti[N_INGRESS_SW, li]:
                gs[nti[N_SW_OF, li]] += gp[li]
    for li in range(L):
        if not reg[li] and nti[N_INGRESS_SW, li] and gp[li] > _TINY:
            if dyn:
                tt = (stf[S_PFC_XOFF, li] - use[li]) / (
                    gp[li] + ntf[N_PFC_ALPHA, li] * max(gs[nti[N_SW_OF, li]], 0.0))
            else:
                tt = (stf[S_PFC_XOFF, li] - use[li]) / max(gp[li], _TINY)
            h = min(h, max(tt, 0.0))
        elif reg[li] and gp[li] < -_TINY:
            h = min(h, max((use[li] - stf[S_PFC_XON, li]) / -gp[li], 0.0))
    return h


@step_fn
def _sample(net, st, t) -> None:
    st_si = st.si
    stf = st.f
    stb = st.b
    sti = st.i
    st_cc = st.cc
    st_smp = st.smp
    ntf = net.f
    nti = net.i
    net_rec_links = net.rec_links
    net_rec_flows = net.rec_flows
    net_cfg = net.cfg
    n = st_si[I_NSMP]
    nl, nf = len(net_rec_links), len(net_rec_flows)
    st_smp[n, 0] = t / 1e3  # columns: t, queue of each link, rate and send of each flow
    for i in range(len(net_rec_links)):
        st_smp[n, 1 + i] = stf[S_QLINK, net_rec_links[i]]
    for i in range(len(net_rec_flows)):
        f = net_rec_flows[i]
        rate = 0.0
        send = 0.0
        for p in range(st_si[I_NAF]):
            if sti[S_A_F, p] != f:
                continue
            send = stf[S_A_RF, p] * 8e9 / 1e9 / net_cfg[C_WO]
            if stb[S_RUNNING, f]:
                rate = _INF
                for r in range(sti[S_A_FSTART, p], sti[S_A_FSTART, p + 1]):
                    k = sti[S_A_R, r]
                    rate = min(rate, st_cc[CC_RC, k] / 1e9 if net_cfg[C_DCQCN] > 0
                               else ntf[N_CAP, nti[N_FIRST_LINK, k]] * 8e9 / 1e9)
        st_smp[n, 1 + nl + i] = rate
        st_smp[n, 1 + nl + nf + i] = send
    st_si[I_NSMP] = n + 1


@step_fn
def _complete(ws, t, ddep, any_marks) -> bool:
    """Which flows delivered all their bytes (``tmp1``: when, > 0, for those) and whether
    the next step may be long; returns whether some flow finishes (:func:`_finish`)."""
    st_si = ws.si
    stf = ws.f
    sti = ws.i
    stb = ws.b
    ntf = ws.nf
    cfg, sf = ws.cfg, ws.sf
    nf = st_si[I_NAF]
    fin = _zeroed(ws.f[S_TMP1], nf)  # > 0: finishes; when its last byte was delivered
    stopped = False
    anyfin = False
    just = False  # some flow stopped injecting and delivered everything in this step
    for i in range(nf):
        f = sti[S_A_F, i]
        tol = 1e-6 * max(ntf[N_SIZE_W, f], 1.0)
        inj_done = not stb[S_A_SENDING, i] or ntf[N_SIZE_W, f] - stf[S_INJ, f] <= tol
        stopped = stopped or (stb[S_A_SENDING, i] and inj_done)
        if not (inj_done and stb[S_RUNNING, f]):
            continue
        bl = -_INF
        for r in range(sti[S_A_FSTART, i], sti[S_A_FSTART, i + 1]):
            k = sti[S_A_R, r]
            bl = max(bl, ntf[N_W, k] * stf[S_INJ, f] - stf[S_DELIV, k])
        if bl <= tol + 1e-6:
            fin[i] = -1.0 if stb[S_A_SENDING, i] else t
            just = just or stb[S_A_SENDING, i]
            anyfin = True
    if just:
        _delivered_at(ws, t)  # (compiled on its own: rare)
    # the rest only decides whether the next step may be long: checked only as far as
    # needed (each is a pass over the running routes or entries)
    # departures that changed make the next step's FIFO shares change, unless nothing
    # queues anywhere (every link passed its arrivals through) and no QP is under DCQCN's
    # control (then only flows starting or ending changed them)
    calm = ddep >= cfg[C_QUIET_TOL] * cfg[C_CAP_MAX]  # then steady only if free-flowing
    st_si[I_FREE] = _free_flowing(ws)
    steady = ((not calm or st_si[I_FREE] > 0) and t > sf[F_MARKS_UNTIL] and not any_marks)
    if steady and stopped:
        # a source that just stopped while its bytes still queue changes the next step's
        # arrivals: not steady
        steady = not _stopped_queued(ws)
    if steady and cfg[C_DCQCN] > 0:
        for c in range(st_si[I_NCC]):
            if ws.cc[CC_DEC_CNP, sti[S_A_R, sti[S_A_CC, c]]] > 0:
                steady = False  # a rate decrease is pending
                break
    sf[F_QUIET] = _horizon(ws, calm) if steady else 0.0
    return anyfin


@step_fn
def _finish(net, st, ws) -> None:
    """The flows :func:`_complete` found delivered finish (plus the ACK's way back) and
    release their dependants."""
    st_si = st.si
    stf = st.f
    sti = st.i
    stb = st.b
    fin = st.f[S_TMP1]
    rd = st.f[S_TMP5][:0]
    if net.cfg[C_ACK_QUEUE] > 0:
        rd = rev_delay(ws, st.f[S_TMP5])
    left = False
    for i in range(st_si[I_NAF]):
        f = sti[S_A_F, i]
        if not fin[i] > 0:
            left = left or stb[S_RUNNING, f]
            continue
        stb[S_RUNNING, f] = False
        stb[S_DONE, f] = True
        st_si[I_DONE] += 1
        # the ACK of the last byte queues behind data on the reverse path
        stf[S_FINISH, f] = fin[i] + net.f[N_LAT, f] + _ack_queue_ns(net, f, rd)
        release(net, st, f, stf[S_FINISH, f])
    # finished flows stay in the running arrays (idle) until the next start rebuilds them
    if not left:
        st_si[I_REBUILD] = 1


@inline_fn
def _free_flowing(ws) -> bool:
    """No queue holds more than a packet (below the model's resolution: a packet in
    service) and no running QP saw a CNP yet: departures that changed (flows started or
    ended) change no FIFO's shares that matter and no DCQCN state."""
    if ws.sf[F_QMAX] > ws.cfg[C_PKT_WIRE]:
        return False
    if ws.cfg[C_DCQCN] > 0:
        for c in range(ws.si[I_NCC]):
            if ws.cc[CC_STARTED, ws.i[S_A_R, ws.i[S_A_CC, c]]] > 0:
                return False
    return True


@step_fn
def _delivered_at(ws, t) -> None:
    """When the running flows marked -1 in ``tmp1`` (they stopped injecting in the step
    ending at ``t``, at ``t_end``, and delivered everything in it) delivered their last
    byte: after the queues still on their path (their wait at the step's end, each link's
    once, in ``tmp2``; a flow whose bytes drain over later steps is delivered at the end
    of the step that empties them)."""
    sti, fin, qw = ws.i, ws.f[S_TMP1], ws.f[S_TMP2]
    for li in range(ws.L):
        qw[li] = _queue_wait(ws, li)
    for i in range(ws.si[I_NAF]):
        if fin[i] != -1.0:
            continue
        wait = 0.0
        for r in range(sti[S_A_FSTART, i], sti[S_A_FSTART, i + 1]):
            e0 = sti[S_A_ESTART, r]
            s = 0.0
            for j in range(e0 + 1, e0 + sti[S_A_NE, r]):
                s += qw[sti[S_AE_LINK, j]]
            wait = max(wait, s)
        fin[i] = min(ws.f[S_T_END, sti[S_A_F, i]] + wait, t)


@step_fn
def _stopped_queued(ws) -> bool:
    """Whether a flow that stopped injecting this step (still marked sending) has more
    than a byte queued on one of its routes."""
    stf = ws.f
    sti = ws.i
    stb = ws.b
    ntf = ws.nf
    for i in range(ws.si[I_NAF]):
        f = sti[S_A_F, i]
        tol = 1e-6 * max(ntf[N_SIZE_W, f], 1.0)
        if not (stb[S_A_SENDING, i] and ntf[N_SIZE_W, f] - stf[S_INJ, f] <= tol):
            continue
        for r in range(sti[S_A_FSTART, i], sti[S_A_FSTART, i + 1]):
            e0 = sti[S_A_ESTART, r]
            rq = 0.0  # its queued bytes (the first hop queues nothing)
            for j in range(e0 + 1, e0 + sti[S_A_NE, r]):
                rq += stf[S_WQ, sti[S_POS, j]]
            if rq > 1.0:
                return True
    return False


@inline_fn
def _ack_queue_ns(net, f, rd) -> float:
    nti = net.i
    net_indptr = net.indptr
    net_r_order = net.r_order
    if len(rd) == 0:
        return 0.0
    best = 0.0
    for j in range(nti[N_F_RPTR, f], nti[N_F_RPTR, f + 1]):
        k = net_r_order[j]
        s = 0.0
        for e in range(net_indptr[k], net_indptr[k + 1]):
            s += rd[nti[N_LINKS, e]]
        best = max(best, s)
    return best


# --------------------------------------------------------------------------------------
# main loop
# --------------------------------------------------------------------------------------


@step_fn
def _start_due(net, st, t, until) -> None:
    """Start every flow due within ``coalesce_ns`` of now (at ``t``) or before ``until``
    (at its own time, inside the step ``[t, until]``)."""
    st_si = st.si
    stf = st.f
    stb = st.b
    sti = st.i
    st_cc = st.cc
    ntf = net.f
    nti = net.i
    net_r_order = net.r_order
    net_cfg = net.cfg
    while st_si[I_HEAP] > 0 and (stf[S_HEAP_T, 0] <= t + net_cfg[C_COALESCE]
                                 or stf[S_HEAP_T, 0] < until):
        t0 = stf[S_HEAP_T, 0]
        f = _heap_pop(st)
        stf[S_START, f] = t0 if t0 > t + net_cfg[C_COALESCE] else t
        if ntf[N_SIZE_W, f] <= 0:
            stf[S_FINISH, f] = t + ntf[N_LAT, f]
            stb[S_DONE, f] = True
            st_si[I_DONE] += 1
            release(net, st, f, stf[S_FINISH, f])
            continue
        stb[S_RUNNING, f] = True
        sti[S_NEW_F, st_si[I_NNEW]] = f
        st_si[I_NNEW] += 1
        if net_cfg[C_DCQCN] > 0:
            for j in range(nti[N_F_RPTR, f], nti[N_F_RPTR, f + 1]):
                k = net_r_order[j]
                st_cc[CC_LINE, k] = ntf[N_CAP, nti[N_FIRST_LINK, k]] * 8e9
                _dcqcn_fresh(st_cc, k)
        st_si[I_REBUILD] = 1


@inline_fn
def _dcqcn_fresh(s, k) -> None:
    """A QP that starts at its line rate ``s[CC_LINE, k]``, no CNP seen, timers idle
    (dcqcn_init)."""
    s[1:, k] = 0.0
    s[CC_RC, k] = s[CC_LINE, k]
    s[CC_RT, k] = s[CC_LINE, k]
    s[CC_ALPHA, k] = 1.0
    s[CC_T_ALPHA:CC_T_INC + 1, k] = _INF


@inline_fn
def _pfc_active(ws) -> bool:
    """Some port is paused or some queue holds bytes (else PFC has nothing to do)."""
    if ws.si[I_NREG] > 0:
        return True
    for li in range(ws.L):
        if ws.f[S_QLINK, li] > 0.0:
            return True
    return False


@njit(cache=True)
def advance(net, st, rng) -> int:
    """Run until the end, or until the caller has to act (see the return codes). The
    running entries' state lives in its rows by position meanwhile (:func:`_positions`);
    the rows by entry hold it whenever the caller has it."""
    if st.si[I_REBUILD] == 0 and st.si[I_NAE] > 0:
        _load_work(st)
    code = _advance(net, st, rng)
    _store_work(st)
    return code


@njit(cache=True)
def _advance(net, st, rng) -> int:
    sf, si, stf, st_smp, cfg = st.sf, st.si, st.f, st.smp, net.cfg
    ws = Work(net.f, net.i, net.cfg, net.pfc_pool, net.dims[D_L], st.sf, st.si, st.f, st.i,
              st.b, st.cc)
    fb = Feedback(st.cnp_node, st.cnp_val, net.dcqcn)
    F = net.dims[D_F]
    while si[I_DONE] < F:
        t = sf[F_T]
        if sf[F_FAIL_T] <= t + 1e-9:
            return FAIL_DUE
        if st_smp.shape[0] and si[I_NSMP] == st_smp.shape[0]:
            return SAMPLES_FULL
        # a step makes at most a node per running entry (:func:`_cnp_add`)
        if cfg[C_DCQCN] > 0 and si[I_CNP_TOP] + net.indptr[-1] >= len(fb.val):
            return CNP_FULL
        if si[I_REBUILD]:
            rebuild(net, st)
        if si[I_NAR] == 0:
            if si[I_HEAP] > 0 and stf[S_HEAP_T, 0] <= t + cfg[C_COALESCE]:
                _start_due(net, st, t, t)
                rebuild(net, st)
            if si[I_NAR] == 0:
                nxt = min(stf[S_HEAP_T, 0] if si[I_HEAP] > 0 else _INF, sf[F_FAIL_T])
                if not np.isfinite(nxt):
                    return DONE  # nothing can ever start (a dependency cycle, unrouted flow)
                sf[F_T] = max(t, nxt)
                continue
        si[I_STEPS] += 1
        if t > cfg[C_MAX_TIME]:
            return DONE  # stalled (a failed link with no reroute): unfinished flows
        if si[I_STEPS] > cfg[C_MAX_STEPS]:
            return MAX_STEPS
        # the step's length (a call only for a quiet step: it passes ~80 words); failures
        # and samples end a step exactly
        dt = _quiet_dt(ws, t) if sf[F_QUIET] else cfg[C_DT]
        if np.isfinite(sf[F_FAIL_T]):
            dt = min(dt, sf[F_FAIL_T] - t)
        dt = max(min(dt, sf[F_NEXT_SAMPLE] - t), 1e-3)
        if si[I_HEAP] > 0 and (stf[S_HEAP_T, 0] < t + dt
                               or stf[S_HEAP_T, 0] <= t + cfg[C_COALESCE]):
            _start_due(net, st, t, t + dt)  # flows that start inside the step
            if si[I_REBUILD]:
                rebuild(net, st)
        _allocate(ws, t, dt)
        ddep = _sweep(ws, dt)
        t_new = t + dt
        any_marks = False
        if cfg[C_DCQCN] > 0:
            any_marks = _cnps(ws, fb, t_new, dt, rng)
            if cfg[C_ES_ON] > 0 and t_new >= sf[F_ES_NEXT]:
                si[I_ES_DUE] = 1
        if cfg[C_PFC_ON] > 0 and (si[I_HAS_USE] == 0 or si[I_NREG] > 0
                                  or (si[I_PASS] == 0 and _pfc_active(ws))):
            _pfc(ws, dt)
        if t_new >= sf[F_NEXT_SAMPLE] - 1e-6:
            _sample(net, st, t_new)
            sf[F_NEXT_SAMPLE] += cfg[C_SAMPLE_INT]
        sf[F_T] = t_new
        if _complete(ws, t_new, ddep, any_marks):
            _finish(net, st, ws)
        if si[I_ES_DUE]:
            return ENDSIDE_DUE
    return DONE


__all__ = ["Net", "State", "advance", "rebuild", "DONE", "FAIL_DUE", "ENDSIDE_DUE",
           "SAMPLES_FULL", "MAX_STEPS", "CNP_FULL"]
