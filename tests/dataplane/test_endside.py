import numpy as np

from icefabric.dataplane.endside import (
    DCQCN,
    EV_BACKUP_PORT,
    EV_FALLBACK,
    EV_REPLANNED,
    PLANNED,
    EndSideParams,
    EndSideState,
    effective_rate,
    endside_step,
)

P = EndSideParams(cnp_threshold=2, persist_windows=3)


def run(cnps, down=None, versions=None):
    s = EndSideState.initial(len(cnps[0]))
    evs = []
    for i, c in enumerate(cnps):
        d = np.zeros(len(c), bool) if down is None else down[i]
        v = 0 if versions is None else versions[i]
        s, e = endside_step(s, np.asarray(c), d, v, P)
        evs.append(e)
    return s, evs


def test_sporadic_cnps_keep_the_plan_persistent_cnps_fall_back():
    s, evs = run([[2, 2], [0, 2], [2, 2], [2, 0]])
    assert s.mode.tolist() == [PLANNED, DCQCN]
    assert evs[2].tolist() == [0, EV_FALLBACK]
    assert all(e[1] == 0 for e in (evs[0], evs[1], evs[3]))


def test_path_failure_moves_to_backup_once_and_reports():
    down = [np.array([False, True]), np.array([False, True])]
    s, evs = run([[0, 0], [0, 0]], down=down)
    assert s.on_backup.tolist() == [False, True]
    assert evs[0].tolist() == [0, EV_BACKUP_PORT] and evs[1].tolist() == [0, 0]


def test_unreachable_controller_keeps_last_plan_new_plan_resets():
    s, _ = run([[5], [5], [5]])
    assert s.mode[0] == DCQCN
    s2, e = endside_step(s, np.array([0]), np.array([False]), 0, P)  # no new plan
    assert s2.mode[0] == DCQCN and e[0] == 0
    s3, e = endside_step(s2, np.array([0]), np.array([False]), 1, P)  # controller replanned
    assert s3.mode[0] == PLANNED and e[0] == EV_REPLANNED and s3.plan_version[0] == 1


def test_effective_rate():
    r = effective_rate(np.array([100.0, 100.0]), np.array([150.0, 80.0]),
                       np.array([PLANNED, PLANNED]))
    assert r.tolist() == [100.0, 80.0]
    assert effective_rate(np.array([100.0]), np.array([150.0]), np.array([DCQCN]))[0] == 150.0
