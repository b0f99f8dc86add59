/* The kernel's side of the verbs ABI, faked, for running the shim against the real
 * libibverbs (Debian libibverbs1) with no RDMA device.  Preloaded (LD_PRELOAD) after the
 * shim; everything above the kernel boundary is the real library:
 *
 *   CCL -> (shim) -> libibverbs ibv_modify_qp@IBVERBS_1.1 -> provider modify_qp
 *       -> libibverbs ibv_cmd_modify_qp[_ex] -> write(cmd_fd) -> HERE
 *   shim -> libibverbs _ibv_query_gid_ex@IBVERBS_1.11 -> ioctl(cmd_fd, RDMA_VERBS_IOCTL)
 *       -> HERE (UVERBS_METHOD_QUERY_GID_ENTRY)
 *
 * The provider is the least one can be: the context comes from libibverbs'
 * _verbs_init_and_alloc_context() (as every rdma-core provider's alloc_context does), its
 * modify_qp marshals through ibv_cmd_modify_qp / ibv_cmd_modify_qp_ex the way rdma-core
 * providers/mlx5/verbs.c mlx5_modify_qp() does (the _ex command when IBV_QP_RATE_LIMIT is
 * in the mask).  Its slots in the private ops table are found by probing with
 * verbs_set_ops() and the real ibv_modify_qp/ibv_destroy_qp, so no private header layout is
 * copied here.
 *
 * The faked kernel records each MODIFY_QP command as it arrives (the uverbs ABI structs of
 * <rdma/ib_user_verbs.h>: flow label and static rate of the QP's address vector, the rate
 * limit) as JSON lines in $FAKEVERBS_LOG, and answers as Linux does for RC QPs:
 * IB_QP_RATE_LIMIT is refused with EINVAL (drivers/infiniband/core/verbs.c qp_state_table
 * allows it only for IB_QPT_RAW_PACKET).  GID queries answer ::ffff:$FAKEVERBS_IP, RoCEv2.
 *
 * fakekernel_create_qp() stands in for ibv_create_qp (no CQ/PD/UAR to fake). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <stdarg.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "fakelog.h"

/* libibverbs' provider interface (IBVERBS_PRIVATE_*; rdma-core libibverbs/driver.h) */
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
                                    struct verbs_context *context_offset, uint32_t driver_id);
void verbs_set_ops(struct verbs_context *vctx, const void *ops);
int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, void *cmd,
                      size_t cmd_size);
int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, void *cmd,
                         size_t cmd_size, void *resp, size_t resp_size);

#define OPS_SLOTS 512 /* more than struct verbs_context_ops has */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int kernel_fd = -1;
static struct verbs_context *vctx;
static uint32_t next_qpn = 0x100;
static int probe_hit;

/* ---- the kernel ---- */

static int kernel_modify_qp(const struct ib_uverbs_modify_qp *m, uint32_t rate_limit)
{
    int rc = 0;
    if (m->attr_mask & IBV_QP_RATE_LIMIT)
        rc = EINVAL; /* qp_state_table: RC QPs take no IB_QP_RATE_LIMIT */
    fake_log("{\"call\":\"modify_qp\",\"qpn\":%u,\"mask\":%u,\"state\":%d,\"dest_qpn\":%u,"
             "\"flow_label\":%u,\"static_rate\":%u,\"rate_limit\":%u,\"rc\":%d}",
             m->qp_handle, m->attr_mask,
             (m->attr_mask & IBV_QP_STATE) ? (int)m->qp_state : -1,
             (m->attr_mask & IBV_QP_DEST_QPN) ? m->dest_qp_num : 0,
             (m->attr_mask & IBV_QP_AV) ? m->dest.flow_label : 0,
             (m->attr_mask & IBV_QP_AV) ? m->dest.static_rate : 0, rate_limit, rc);
    return rc;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (fd != kernel_fd || kernel_fd < 0) {
        if (!real)
            real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
        return real(fd, buf, n);
    }
    const struct ib_uverbs_cmd_hdr *h = buf;
    int rc = ENOSYS;
    if (h->command == IB_USER_VERBS_CMD_MODIFY_QP) {
        rc = kernel_modify_qp((const void *)(h + 1), 0);
    } else if (h->command == (IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_MODIFY_QP)) {
        const struct ib_uverbs_ex_modify_qp *x =
            (const void *)((const char *)buf + sizeof(*h) + sizeof(struct ib_uverbs_ex_cmd_hdr));
        rc = kernel_modify_qp(&x->base, (x->base.attr_mask & IBV_QP_RATE_LIMIT) ? x->rate_limit : 0);
    }
    if (rc) {
        errno = rc;
        return -1;
    }
    return (ssize_t)n;
}

static int kernel_query_gid(struct ib_uverbs_ioctl_hdr *h)
{
    struct ib_uverbs_gid_entry *out = NULL;
    uint32_t port = 0, index = 0;
    for (int i = 0; i < h->num_attrs; i++) {
        struct ib_uverbs_attr *a = &h->attrs[i];
        if (a->attr_id == UVERBS_ATTR_QUERY_GID_ENTRY_PORT)
            port = (uint32_t)a->data;
        else if (a->attr_id == UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX)
            index = (uint32_t)a->data;
        else if (a->attr_id == UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY && a->len >= sizeof(*out))
            out = (void *)(uintptr_t)a->data;
    }
    const char *ip = getenv("FAKEVERBS_IP");
    if (!out || !ip)
        return EINVAL;
    memset(out, 0, sizeof(*out));
    uint8_t *gid = (uint8_t *)out->gid;
    gid[10] = gid[11] = 0xff;
    if (inet_pton(AF_INET, ip, gid + 12) != 1)
        return EINVAL;
    out->gid_index = index;
    out->port_num = port;
    out->gid_type = IB_UVERBS_GID_TYPE_ROCE_V2;
    fake_log("{\"call\":\"query_gid\",\"port\":%u,\"index\":%u}", port, index);
    return 0;
}

int ioctl(int fd, unsigned long req, ...)
{
    static int (*real)(int, unsigned long, void *);
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (fd != kernel_fd || kernel_fd < 0 || req != RDMA_VERBS_IOCTL) {
        if (!real)
            real = (int (*)(int, unsigned long, void *))dlsym(RTLD_NEXT, "ioctl");
        return real(fd, req, arg);
    }
    struct ib_uverbs_ioctl_hdr *h = arg;
    /* EPROTONOSUPPORT: "this method is not supported" (ENOTTY would make libibverbs give up
     * on ioctl entirely, rdma-core libibverbs/cmd_fallback.c). */
    int rc = h->object_id == UVERBS_OBJECT_DEVICE && h->method_id == UVERBS_METHOD_QUERY_GID_ENTRY
                 ? kernel_query_gid(h)
                 : EPROTONOSUPPORT;
    if (rc) {
        errno = rc;
        return -1;
    }
    return 0;
}

/* ---- the provider ---- */

static int provider_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    if (mask & IBV_QP_RATE_LIMIT) {
        struct {
            struct ib_uverbs_cmd_hdr hdr;
            struct ib_uverbs_ex_cmd_hdr ex_hdr;
            struct ib_uverbs_ex_modify_qp core;
        } cmd;
        struct ib_uverbs_ex_modify_qp_resp resp;
        memset(&cmd, 0, sizeof(cmd));
        return ibv_cmd_modify_qp_ex(qp, attr, mask, &cmd, sizeof(cmd), &resp, sizeof(resp));
    }
    struct {
        struct ib_uverbs_cmd_hdr hdr;
        struct ib_uverbs_modify_qp core;
    } cmd;
    memset(&cmd, 0, sizeof(cmd));
    return ibv_cmd_modify_qp(qp, attr, mask, &cmd, sizeof(cmd));
}

static int provider_destroy_qp(struct ibv_qp *qp)
{
    fake_log("{\"call\":\"destroy_qp\",\"qpn\":%u}", qp->qp_num);
    free(qp);
    return 0;
}

static int probe_modify(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    (void)qp, (void)attr, (void)mask;
    probe_hit = 1;
    return 0;
}

static int probe_destroy(struct ibv_qp *qp)
{
    (void)qp;
    probe_hit = 2;
    return 0;
}

/* The slot of ops the real verb `call` dispatches to (where `probe`, which sets probe_hit
 * to `hit`, gets called from); `skip` is already taken. */
static int find_slot(void *probe, int hit, int (*call)(struct ibv_qp *), int skip)
{
    static void *ops[OPS_SLOTS];
    for (int k = 0; k < OPS_SLOTS; k++) {
        if (k == skip)
            continue;
        memset(ops, 0, sizeof(ops));
        ops[k] = probe;
        verbs_set_ops(vctx, ops);
        probe_hit = 0;
        struct ibv_qp qp = {.context = &vctx->context, .qp_type = IBV_QPT_RC};
        call(&qp);
        if (probe_hit == hit)
            return k;
    }
    return -1;
}

/* The real verbs, not the shim's: plain dlsym() gives the default version (IBVERBS_1.1). */
static void *real_verb(const char *name)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : NULL;
}

static int call_modify(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    return ((int (*)(struct ibv_qp *, struct ibv_qp_attr *, int))real_verb("ibv_modify_qp"))(
        qp, &a, 0);
}

static int call_destroy(struct ibv_qp *qp)
{
    return ((int (*)(struct ibv_qp *))real_verb("ibv_destroy_qp"))(qp);
}

static int open_device(void)
{
    static char dev_mem[4096]; /* struct verbs_device begins with its struct ibv_device */
    struct ibv_device *dev = (struct ibv_device *)dev_mem;
    const char *d = getenv("FAKEVERBS_DEV");
    snprintf(dev->name, sizeof(dev->name), "%s", d ? d : "mlx5_0");
    dev->node_type = IBV_NODE_CA;
    dev->transport_type = IBV_TRANSPORT_IB;
    kernel_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    vctx = _verbs_init_and_alloc_context(dev, kernel_fd, sizeof(*vctx), NULL, 0);
    if (!vctx)
        return -1;
    int m = find_slot((void *)probe_modify, 1, call_modify, -1);
    int k = find_slot((void *)probe_destroy, 2, call_destroy, m);
    if (m < 0 || k < 0)
        return -1;
    static void *ops[OPS_SLOTS];
    ops[m] = (void *)provider_modify_qp;
    ops[k] = (void *)provider_destroy_qp;
    verbs_set_ops(vctx, ops);
    return 0;
}

struct ibv_qp *fakekernel_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
    (void)pd;
    pthread_mutex_lock(&mu);
    if (!vctx && open_device() != 0) {
        pthread_mutex_unlock(&mu);
        return NULL;
    }
    struct ibv_qp *qp = calloc(1, sizeof(*qp));
    qp->qp_num = qp->handle = next_qpn++;
    pthread_mutex_unlock(&mu);
    qp->context = &vctx->context;
    qp->qp_type = init->qp_type;
    qp->state = IBV_QPS_RESET;
    fake_log("{\"call\":\"create_qp\",\"qpn\":%u}", qp->qp_num);
    return qp;
}
