/* A stand-in for libmlx5.so.1's mlx5dv_modify_qp_udp_sport (checks wiring, not a NIC).
 * Like rdma-core's providers/mlx5/mlx5.c it accepts only RC/UC QPs in RTS;
 * $FAKEMLX5_NO_SPORT=1 plays a device without entropy_caps.rts2rts_qp_udp_sport. */
#include <errno.h>
#include <infiniband/verbs.h>

#include "fakelog.h"

int mlx5dv_modify_qp_udp_sport(struct ibv_qp *qp, uint16_t udp_sport)
{
    int rc = 0;
    if ((qp->qp_type != IBV_QPT_RC && qp->qp_type != IBV_QPT_UC) || qp->state != IBV_QPS_RTS ||
        getenv("FAKEMLX5_NO_SPORT"))
        rc = EOPNOTSUPP;
    fake_log("{\"call\":\"mlx5dv_modify_qp_udp_sport\",\"qpn\":%u,\"sport\":%u,\"rc\":%d}",
             qp->qp_num, udp_sport, rc);
    return rc;
}
