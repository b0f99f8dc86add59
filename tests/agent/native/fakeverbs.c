/* A stand-in for libibverbs.so.1 at the symbol boundary, for tests without RDMA hardware.
 *
 * It checks the shim's wiring, not a NIC: it hands out QP objects with increasing QP
 * numbers, answers GID queries with an IPv4-mapped RoCEv2 GID ($FAKEVERBS_IP), records the
 * attributes every ibv_modify_qp receives, and keeps qp->state as rdma-core's
 * ibv_modify_qp() does.  $FAKEVERBS_NO_RATE rejects IBV_QP_RATE_LIMIT: with EINVAL, as the
 * kernel core does for RC QPs (drivers/infiniband/core/verbs.c qp_state_table allows
 * IB_QP_RATE_LIMIT only for RAW_PACKET QPs), or with EOPNOTSUPP when set to "EOPNOTSUPP";
 * $FAKEVERBS_REJECT_FLOW_LABEL=1 fails any RTR that carries a non-zero flow label (to
 * exercise the shim's replay of the CCL's own attributes). */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <string.h>

#include "fakelog.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_qpn;
static struct ibv_device device;
static struct ibv_context context = {.device = &device};

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
    (void)pd;
    struct ibv_qp *qp = calloc(1, sizeof(*qp));
    pthread_mutex_lock(&mu);
    if (!next_qpn) {
        const char *b = getenv("FAKEVERBS_QPN_BASE"), *d = getenv("FAKEVERBS_DEV");
        next_qpn = b ? (uint32_t)strtoul(b, NULL, 0) : 0x100;
        snprintf(device.name, sizeof(device.name), "%s", d ? d : "mlx5_0");
    }
    qp->qp_num = next_qpn++;
    pthread_mutex_unlock(&mu);
    qp->context = &context;
    qp->qp_type = init->qp_type;
    qp->state = IBV_QPS_RESET;
    fake_log("{\"call\":\"create_qp\",\"qpn\":%u}", qp->qp_num);
    return qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    int rc = 0;
    const char *no_rate = getenv("FAKEVERBS_NO_RATE");
    if ((mask & IBV_QP_RATE_LIMIT) && no_rate)
        rc = strcmp(no_rate, "EOPNOTSUPP") ? EINVAL : EOPNOTSUPP;
    if ((mask & IBV_QP_AV) && attr->ah_attr.grh.flow_label &&
        getenv("FAKEVERBS_REJECT_FLOW_LABEL"))
        rc = EINVAL;
    fake_log("{\"call\":\"modify_qp\",\"qpn\":%u,\"mask\":%d,\"state\":%d,\"dest_qpn\":%u,"
             "\"flow_label\":%u,\"static_rate\":%u,\"rate_limit\":%u,\"rc\":%d}",
             qp->qp_num, mask, (mask & IBV_QP_STATE) ? (int)attr->qp_state : -1,
             (mask & IBV_QP_DEST_QPN) ? attr->dest_qp_num : 0,
             (mask & IBV_QP_AV) ? attr->ah_attr.grh.flow_label : 0,
             (mask & IBV_QP_AV) ? attr->ah_attr.static_rate : 0,
             (mask & IBV_QP_RATE_LIMIT) ? attr->rate_limit : 0, rc);
    if (rc == 0 && (mask & IBV_QP_STATE))
        qp->state = attr->qp_state;
    return rc;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    fake_log("{\"call\":\"destroy_qp\",\"qpn\":%u}", qp->qp_num);
    free(qp);
    return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
    (void)ctx;
    (void)flags;
    (void)size;
    const char *ip = getenv("FAKEVERBS_IP");
    memset(entry, 0, sizeof(*entry));
    entry->gid.raw[10] = entry->gid.raw[11] = 0xff;
    if (!ip || inet_pton(AF_INET, ip, &entry->gid.raw[12]) != 1)
        return EINVAL;
    entry->gid_index = index;
    entry->port_num = port;
    entry->gid_type = getenv("FAKEVERBS_ROCE_V1") ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
    return 0;
}
