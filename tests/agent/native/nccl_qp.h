/* NCCL's state changes of an RC QP on RoCE (src/transport/net_ib/connect.cc: ncclIbQpInit,
 * ncclIbQpRtr with is_global = 1, flow_label = 0, static_rate 0, sgid_index 3; ncclIbQpRts),
 * through the program's own `modify_qp` pointer (taken as the program takes its verbs). */
#ifndef NCCL_QP_H
#define NCCL_QP_H
#include <infiniband/verbs.h>
#include <string.h>

static int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);

static int nccl_qp_init(struct ibv_qp *qp, int access)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    return modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                 IBV_QP_ACCESS_FLAGS);
}

static int nccl_qp_rtr(struct ibv_qp *qp, const union ibv_gid *peer, uint32_t rqpn)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = rqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *peer;
    a.ah_attr.grh.flow_label = 0;
    a.ah_attr.grh.sgid_index = 3;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.port_num = 1;
    return modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                 IBV_QP_MIN_RNR_TIMER);
}

static int nccl_qp_rts(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 20;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                 IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}
#endif
