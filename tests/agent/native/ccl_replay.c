/* One CCL process replaying NCCL's IB connection protocol step by step, driven over stdin
 * by the replay harness (tests/agent/replay.py), which plays the socket exchange between
 * the two ends of each connection (NCCL src/transport/net_ib/connect.cc):
 *
 *   send PEER K            ncclIbConnect, ncclIbSenderQpsCreate: create K QPs and move
 *                          them to INIT (REMOTE_WRITE); answers "ok QPN..."
 *   accept PEER OLD FLUSH RQPN...
 *                          ncclIbAccept, ncclIbReceiverQpsCreateToRts: per remote QP,
 *                          create a QP, INIT (REMOTE_WRITE|REMOTE_ATOMIC|REMOTE_READ, or
 *                          with OLD=1 REMOTE_WRITE alone as NCCL <= 2.28 and RCCL do),
 *                          RTR to it and RTS at once; with FLUSH=1 then the GPU-flush QP,
 *                          connected to itself; answers "ok QPN... [flush QPN]"
 *   rtr PEER QPN RQPN ...  ncclIbSenderQpsToRts: RTR and RTS the send-side QPs once the
 *                          receiver answered; answers "ok"
 *   quit                   destroys every QP
 *
 * The verbs come as NCCL takes them: dlopen + dlvsym(handle, name, "IBVERBS_1.1")
 * (src/misc/ibvsymbols.cc); RTR is done as ncclIbQpRtr() does on RoCE (is_global = 1,
 * flow_label = 0, static_rate 0, sgid_index 3). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_qp.h"

static struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
static int (*destroy_qp)(struct ibv_qp *);

static struct ibv_qp *qps[1 << 16];
static int n_qps;

static struct ibv_qp *new_qp(int access)
{
    struct ibv_qp_init_attr init = {.qp_type = IBV_QPT_RC};
    struct ibv_qp *qp = create_qp(NULL, &init);
    if (!qp || n_qps == (int)(sizeof(qps) / sizeof(*qps)))
        exit(3);
    qps[n_qps++] = qp;
    nccl_qp_init(qp, access);
    return qp;
}

static struct ibv_qp *find(uint32_t qpn)
{
    for (int i = 0; i < n_qps; i++)
        if (qps[i] && qps[i]->qp_num == qpn)
            return qps[i];
    exit(4);
}

static void to_rts(struct ibv_qp *qp, const union ibv_gid *peer, uint32_t rqpn)
{
    nccl_qp_rtr(qp, peer, rqpn);
    nccl_qp_rts(qp);
}

static int gid_of(const char *ip, union ibv_gid *g)
{
    memset(g, 0, sizeof(*g));
    g->raw[10] = g->raw[11] = 0xff;
    return inet_pton(AF_INET, ip, &g->raw[12]) == 1;
}

int main(void)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW);
    if (!h)
        return 2;
    create_qp = dlvsym(h, "ibv_create_qp", "IBVERBS_1.1");
    modify_qp = dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1");
    destroy_qp = dlvsym(h, "ibv_destroy_qp", "IBVERBS_1.1");
    if (!create_qp || !modify_qp || !destroy_qp)
        return 2;
    char line[1 << 16], ip[64];
    union ibv_gid peer;
    while (fgets(line, sizeof(line), stdin)) {
        char *save, *cmd = strtok_r(line, " \n", &save);
        if (!cmd || !strcmp(cmd, "quit"))
            break;
        if (!gid_of(strncpy(ip, strtok_r(NULL, " \n", &save), sizeof(ip) - 1), &peer))
            return 5;
        char *tok;
        if (!strcmp(cmd, "send")) {
            int k = atoi(strtok_r(NULL, " \n", &save));
            printf("ok");
            for (int i = 0; i < k; i++)
                printf(" %u", new_qp(IBV_ACCESS_REMOTE_WRITE)->qp_num);
        } else if (!strcmp(cmd, "accept")) {
            int old = atoi(strtok_r(NULL, " \n", &save));
            int flush = atoi(strtok_r(NULL, " \n", &save));
            int acc = IBV_ACCESS_REMOTE_WRITE |
                      (old ? 0 : IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
            printf("ok");
            while ((tok = strtok_r(NULL, " \n", &save))) {
                struct ibv_qp *qp = new_qp(acc);
                to_rts(qp, &peer, (uint32_t)strtoul(tok, NULL, 0));
                printf(" %u", qp->qp_num);
            }
            if (flush) {
                struct ibv_qp *f = new_qp(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
                to_rts(f, &peer, f->qp_num); /* loopback: the shim never reports it */
                printf(" flush %u", f->qp_num);
            }
        } else if (!strcmp(cmd, "rtr")) {
            while ((tok = strtok_r(NULL, " \n", &save))) {
                struct ibv_qp *qp = find((uint32_t)strtoul(tok, NULL, 0));
                to_rts(qp, &peer, (uint32_t)strtoul(strtok_r(NULL, " \n", &save), NULL, 0));
            }
            printf("ok");
        } else {
            return 6;
        }
        printf("\n");
        fflush(stdout);
    }
    for (int i = 0; i < n_qps; i++)
        destroy_qp(qps[i]);
    return 0;
}
