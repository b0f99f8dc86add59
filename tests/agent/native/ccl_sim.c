/* A CCL stand-in for the shim's tests (no NIC needed): connects N RC QPs the way NCCL's
 * ncclIbQpRtr()/ncclIbQpRts() do on RoCE (is_global = 1, flow_label = 0, sgid_index 3),
 * from T threads, holds them until HOLD_FILE exists or HOLD_MS pass, then destroys them.
 * Built linked against libibverbs (-DCCL_LINKED) and as NCCL does it, with dlopen() and
 * dlvsym(handle, name, "IBVERBS_1.1") (NCCL src/misc/ibvsymbols.cc); -DCCL_REALVERBS takes
 * its QPs from the faked kernel (fakekernel.c) under the real libibverbs.
 *
 * $CCL_SIM_SIDE=accept plays NCCL >= 2.29.2's receive side (ncclIbAccept in
 * src/transport/net_ib/connect.cc): access flags REMOTE_WRITE|REMOTE_ATOMIC|REMOTE_READ at
 * INIT, then a GPU-flush QP connected to itself (LOCAL_WRITE|REMOTE_READ), printed as
 * "flush LQPN"; the default is the send side (ncclIbConnect: REMOTE_WRITE).
 *
 * usage: ccl_sim N_QPS PEER_IP RQPN_BASE THREADS HOLD_MS [HOLD_FILE]
 * prints "qp LQPN RQPN rtr=RC rts=RC" per QP, then "connect_ns_per_qp X cpu_ns_per_qp Y"
 * (wall-clock and CPU time of the connection phase, per QP). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "nccl_qp.h"

static struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
static int (*destroy_qp)(struct ibv_qp *);

static int n_qps, n_threads;
static uint32_t rqpn_base;
static union ibv_gid peer;
static struct ibv_qp **qps;
static int *rtr_rc, *rts_rc;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
}

static int access_flags = IBV_ACCESS_REMOTE_WRITE;

/* Connects QP i to RQPN_BASE + i; i = -1: a new QP connected to itself (the flush QP). */
static struct ibv_qp *connect_qp(int i)
{
    struct ibv_qp_init_attr init = {.qp_type = IBV_QPT_RC};
    struct ibv_qp *qp = create_qp(NULL, &init);
    if (i >= 0)
        qps[i] = qp;
    nccl_qp_init(qp, i >= 0 ? access_flags : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    int rtr = nccl_qp_rtr(qp, &peer, i >= 0 ? rqpn_base + (uint32_t)i : qp->qp_num);
    int rts = nccl_qp_rts(qp);
    if (i >= 0) {
        rtr_rc[i] = rtr;
        rts_rc[i] = rts;
    }
    return qp;
}

static void *worker(void *arg)
{
    for (int i = (int)(long)arg; i < n_qps; i += n_threads)
        connect_qp(i);
    return NULL;
}

static void load_verbs(void)
{
#ifdef CCL_LINKED
    create_qp = ibv_create_qp;
    modify_qp = ibv_modify_qp;
    destroy_qp = ibv_destroy_qp;
#else
    void *h = dlopen("libibverbs.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(2);
    }
#ifdef CCL_REALVERBS
    /* the real libibverbs with the kernel faked (fakekernel.c): its QPs come from there */
    create_qp = dlsym(RTLD_DEFAULT, "fakekernel_create_qp");
#else
    create_qp = dlvsym(h, "ibv_create_qp", "IBVERBS_1.1");
#endif
    modify_qp = dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1");
    destroy_qp = dlvsym(h, "ibv_destroy_qp", "IBVERBS_1.1");
    if (!create_qp || !modify_qp || !destroy_qp) {
        fprintf(stderr, "dlvsym failed\n");
        exit(2);
    }
#endif
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: ccl_sim N_QPS PEER_IP RQPN_BASE THREADS HOLD_MS [HOLD_FILE]\n");
        return 2;
    }
    n_qps = atoi(argv[1]);
    rqpn_base = (uint32_t)strtoul(argv[3], NULL, 0);
    n_threads = atoi(argv[4]);
    long hold_ms = atol(argv[5]);
    memset(&peer, 0, sizeof(peer));
    peer.raw[10] = peer.raw[11] = 0xff;
    if (inet_pton(AF_INET, argv[2], &peer.raw[12]) != 1)
        return 2;
    load_verbs();
    const char *side = getenv("CCL_SIM_SIDE");
    int accept = side && !strcmp(side, "accept");
    if (accept)
        access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ;
    qps = calloc(n_qps, sizeof(*qps));
    rtr_rc = calloc(n_qps, sizeof(int));
    rts_rc = calloc(n_qps, sizeof(int));
    pthread_t *t = calloc(n_threads, sizeof(*t));
    long long t0 = now_ns(), c0 = cpu_ns();
    for (long k = 0; k < n_threads; k++)
        pthread_create(&t[k], NULL, worker, (void *)k);
    for (int k = 0; k < n_threads; k++)
        pthread_join(t[k], NULL);
    long long dt = now_ns() - t0, dc = cpu_ns() - c0;
    struct ibv_qp *flush = accept ? connect_qp(-1) : NULL;
    for (int i = 0; i < n_qps; i++)
        printf("qp %u %u rtr=%d rts=%d\n", qps[i]->qp_num, rqpn_base + i, rtr_rc[i], rts_rc[i]);
    if (flush)
        printf("flush %u\n", flush->qp_num);
    printf("connect_ns_per_qp %lld cpu_ns_per_qp %lld\n", dt / (n_qps ? n_qps : 1),
           dc / (n_qps ? n_qps : 1));
    fflush(stdout);
    for (long long end = now_ns() + hold_ms * 1000000LL; now_ns() < end;) {
        if (argc > 6 && access(argv[6], F_OK) == 0)
            break;
        usleep(10000);
    }
    for (int i = 0; i < n_qps; i++)
        destroy_qp(qps[i]);
    if (flush)
        destroy_qp(flush);
    return 0;
}
