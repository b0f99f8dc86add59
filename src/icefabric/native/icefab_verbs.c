/*
 * icefab_verbs.c - ICE's verbs-layer shim, loaded with LD_PRELOAD into an unmodified
 * NCCL/RCCL (or any libibverbs) process.  It steers each RC QP's RoCEv2 UDP source port
 * and pacing rate to the plan of the host's ICE agent, and changes nothing when there is
 * no agent or no plan (fail open).
 *
 *   INIT->RTR of an RC QP on a RoCEv2, IPv4-mapped GID
 *       -> report the QP to the agent (Unix socket), wait at most ICE_SHIM_TIMEOUT_MS for
 *          its planned source port and rate, write the flow label that makes the kernel
 *          derive that port and the rate as the address vector's static_rate, and call
 *          the real ibv_modify_qp.  If that call fails with our changes, the CCL's own
 *          attributes are replayed unchanged.
 *   agent pushes "SET"  -> mlx5dv_modify_qp_udp_sport on the live QP (libmlx5 loaded with
 *                          dlopen; absent -> answered as unsupported) and/or the verbs
 *                          rate limit (RTS->RTS; refused for RC QPs by mlx5, see below).
 *   ibv_destroy_qp      -> forget the QP, tell the agent.
 *
 * Sources this relies on (read, not guessed):
 *  - Linux include/rdma/ib_verbs.h: rdma_flow_label_to_udp_sport() (14 bits of the flow
 *    label, folded, | 0xC000) and rdma_calc_flow_label() (used when the label is 0).
 *  - Linux drivers/infiniband/hw/mlx5/qp.c, mlx5_set_path_udp_sport(): for RC/UC QPs with a
 *    RoCEv2 GID, when IB_QP_DEST_QPN is in the INIT->RTR mask, the port comes from
 *    ah_attr.grh.flow_label (or the QPN-derived label when it is 0).
 *  - rdma-core libibverbs/verbs.c, ibv_modify_qp(): on success stores attr->qp_state into
 *    qp->state (so qp->state is the QP's state here).
 *  - rdma-core providers/mlx5/mlx5.c, _mlx5dv_modify_qp_udp_sport(): RC/UC QPs in RTS whose
 *    device reports entropy_caps.rts2rts_qp_udp_sport, else EOPNOTSUPP; exported as
 *    mlx5dv_modify_qp_udp_sport@MLX5_1.17 (providers/mlx5/libmlx5.map).
 *  - Linux drivers/infiniband/hw/mlx5/qp.c, mlx5_set_path() -> mlx5r_ib_rate() (formerly
 *    ib_rate_to_mlx5): ah_attr.static_rate (enum ibv_rate) at INIT->RTR becomes the path's
 *    stat_rate, rounded down (by enum value) to the device's stat_rate_support; the NIC
 *    paces the QP there.  This is the per-QP rate an RC QP takes.
 *  - Linux drivers/infiniband/core/verbs.c, qp_state_table: IB_QP_RATE_LIMIT is an allowed
 *    RTS->RTS attribute only for IB_QPT_RAW_PACKET, so ib_modify_qp_is_ok() fails and the
 *    core answers EINVAL for RC QPs (rdma-core ibv_modify_qp_rate_limit.3: rate_limit in
 *    kbit/s, 0 = unlimited).  Live rate changes try it (bnxt_re paces RC QPs this way);
 *    whatever the driver answers is reported to the agent.
 *  - NCCL src/misc/ibvsymbols.cc: NCCL dlopen()s libibverbs and takes every verb with
 *    dlvsym(handle, name, "IBVERBS_1.1"), which never sees an LD_PRELOADed ibv_modify_qp;
 *    so dlvsym() itself is interposed here.  NCCL src/transport/net_ib/connect.cc,
 *    ncclIbQpRtr(): is_global = 1, flow_label = 0 on Ethernet.
 *
 * Environment: ICE_SHIM_SOCKET (agent socket, default /run/icefab/verbs.sock),
 * ICE_SHIM_TIMEOUT_MS (default 100), ICE_SHIM_RETRY_MS (default 10000: after a failure no
 * QP waits for the agent for this long, and without an agent the shim connects again this
 * often, telling each new connection every connected QP), ICE_JOB (job name reported with
 * every QP), ICE_SHIM_MLX5_LIB (libmlx5 to dlopen, default libmlx5.so.1; "none": no live changes),
 * ICE_SHIM_DISABLE=1, ICE_SHIM_DEBUG=1 (one line per event on stderr).
 *
 * Wire format (one text line each, see icefabric/agent/shim_socket.py):
 *   shim -> agent  HELLO pid= job= rank=    QP seq= dev= port= lqpn= rqpn= sip= dip= acc= span=
 *                  RTR dev= lqpn= ok= sport= planned= srate=
 *                  DONE dev= lqpn= sport_err= rate_err=    GONE dev= lqpn=
 *   agent -> shim  PLAN seq= sport= srate=   NONE seq=   SET dev= lqpn= sport= rate_kbps=
 *   (a QP told without waiting has seq=0; its answer is ignored)
 *   (srate: enum ibv_rate, 0 = IBV_RATE_MAX = no static rate)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_LEN 512
#define DESC_LEN 256 /* the QP's fields within a QP line */
#define RTR_LEN 160  /* an RTR line (a device name is at most 64 bytes) */
#define SPORT_MIN 0xC000
#define SPORT_MAX 0xFFFF

typedef int (*modify_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);
typedef int (*destroy_fn)(struct ibv_qp *);
typedef int (*gid_ex_fn)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *,
                         uint32_t, size_t);
typedef int (*udp_sport_fn)(struct ibv_qp *, uint16_t);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

/* ---- pure logic (exported with the icefab_ prefix so tests can call it directly) ---- */

/* rdma_flow_label_to_udp_sport() of include/rdma/ib_verbs.h. */
uint16_t icefab_sport_of_flow_label(uint32_t fl)
{
    uint32_t low = fl & 0x03FFF, high = fl & 0xFC000;
    return (uint16_t)((low ^ (high >> 14)) | SPORT_MIN);
}

/* rdma_calc_flow_label(): what the kernel uses when the flow label is 0 (NCCL's case). */
uint32_t icefab_calc_flow_label(uint32_t lqpn, uint32_t rqpn)
{
    uint64_t v = (uint64_t)lqpn * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    return (uint32_t)(v & 0xFFFFF);
}

/* The inverse: a non-zero label whose port is `sport`; 0 (= "kernel decides") when the
 * port is not reachable through the flow label.  0xC000 needs 0x4001 because label 0 means
 * "derive from the QPNs" (0x0001 ^ (0x4000 >> 14) == 0). */
uint32_t icefab_flow_label_for_sport(int sport)
{
    if (sport < SPORT_MIN || sport > SPORT_MAX)
        return 0;
    return sport == SPORT_MIN ? (1u << 14) | 1u : (uint32_t)sport & 0x3FFF;
}

/* IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d, RFC 4291 2.5.5.2); 0 if not mapped. */
int icefab_gid_to_ipv4(const uint8_t *gid, char *out, size_t n)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(gid, prefix, sizeof(prefix)) != 0)
        return 0;
    snprintf(out, n, "%u.%u.%u.%u", gid[12], gid[13], gid[14], gid[15]);
    return 1;
}

/* Value of " key=" in a line as a long; 0 when absent or not a number. */
int icefab_kv_long(const char *line, const char *key, long *out)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    if (!p)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(p + strlen(pat), &end, 10);
    if (errno || end == p + strlen(pat) || (*end != ' ' && *end != '\n' && *end != '\0'))
        return 0;
    *out = v;
    return 1;
}

/* Reply to request `seq`: 1 = a plan (sport, -1 = none; static rate, 0 = none), 0 = no
 * plan, -1 = not the reply to this request, -2 = the reply but malformed (nothing is
 * changed). */
int icefab_parse_plan(const char *line, long seq, int *sport, int *srate)
{
    long s, r, q;
    if (!icefab_kv_long(line, "seq", &q) || q != seq)
        return -1;
    if (strncmp(line, "NONE ", 5) == 0)
        return 0;
    if (strncmp(line, "PLAN ", 5) != 0 || !icefab_kv_long(line, "sport", &s) ||
        !icefab_kv_long(line, "srate", &r) || s < -1 || s > SPORT_MAX || r < 0 ||
        r > IBV_RATE_1200_GBPS)
        return -2;
    *sport = (int)s;
    *srate = (int)r;
    return 1;
}

/* ---- configuration and logging ---- */

static struct {
    char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char job[128];
    char rank[16]; /* the launcher's rank of this process, "-" if none is set */
    long timeout_ms, retry_ms;
    int disabled, debug;
} cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

static void load_cfg(void)
{
    const char *s = getenv("ICE_SHIM_SOCKET"), *j = getenv("ICE_JOB");
    snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", s && *s ? s : "/run/icefab/verbs.sock");
    /* job names are single tokens on the wire */
    snprintf(cfg.job, sizeof(cfg.job), "%s", j && *j && !strpbrk(j, " \n=") ? j : "-");
    /* torchrun/PyTorch, Open MPI, Slurm, MPICH/Intel MPI (PMI) */
    static const char *ranks[] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"};
    snprintf(cfg.rank, sizeof(cfg.rank), "-");
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
        const char *r = getenv(ranks[i]);
        if (r && *r && strspn(r, "0123456789") == strlen(r) && strlen(r) < sizeof(cfg.rank)) {
            snprintf(cfg.rank, sizeof(cfg.rank), "%s", r);
            break;
        }
    }
    cfg.timeout_ms = env_long("ICE_SHIM_TIMEOUT_MS", 100);
    cfg.retry_ms = env_long("ICE_SHIM_RETRY_MS", 10000);
    cfg.disabled = env_long("ICE_SHIM_DISABLE", 0) != 0;
    cfg.debug = env_long("ICE_SHIM_DEBUG", 0) != 0;
}

static void debug(const char *fmt, ...)
{
    if (!cfg.debug)
        return;
    char buf[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "icefab-verbs[%d]: %s\n", (int)getpid(), buf);
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long now_ms(void)
{
    return now_ns() / 1000000;
}

/* ---- the real functions ---- */

static modify_fn real_modify;
static destroy_fn real_destroy;
static gid_ex_fn gid_ex;          /* _ibv_query_gid_ex@IBVERBS_1.11 (rdma-core >= v32) */
static udp_sport_fn mlx5_sport;   /* mlx5dv_modify_qp_udp_sport, or NULL */
static pthread_once_t libs_once = PTHREAD_ONCE_INIT;

static dlvsym_fn real_dlvsym(void)
{
    static dlvsym_fn fn;
    if (!fn)
        fn = (dlvsym_fn)dlsym(RTLD_NEXT, "dlvsym");
    return fn;
}

/* Libraries linked directly (not dlopen()ed) are found with RTLD_NEXT. */
static void *next_verb(const char *name)
{
    void *p = real_dlvsym()(RTLD_NEXT, name, "IBVERBS_1.1");
    return p ? p : dlsym(RTLD_NEXT, name);
}

/* The other verbs come from the library that holds the real ibv_modify_qp, which may have
 * been dlopen()ed RTLD_LOCAL (NCCL) and so is invisible to RTLD_NEXT. */
static void load_libs(void)
{
    Dl_info info;
    if (real_modify && dladdr((void *)real_modify, &info) && info.dli_fname) {
        void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        if (h)
            gid_ex = (gid_ex_fn)real_dlvsym()(h, "_ibv_query_gid_ex", "IBVERBS_1.11");
    }
    const char *lib = getenv("ICE_SHIM_MLX5_LIB");
    lib = lib && *lib ? lib : "libmlx5.so.1";
    void *m = strcmp(lib, "none") ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (m)
        mlx5_sport = (udp_sport_fn)dlsym(m, "mlx5dv_modify_qp_udp_sport");
    debug("libibverbs gid_ex %s, mlx5dv_modify_qp_udp_sport %s", gid_ex ? "found" : "absent",
          mlx5_sport ? "found" : "absent");
}

/* ---- live QPs of this process ---- */

/* The RC QPs of this process from RESET->INIT on: the access flags they got then (NCCL >=
 * 2.29 tells its receive-side QPs by them, see describe_rtr) and, once connected
 * (`known`), their QP line and what RTR put in force: every agent connection is told
 * them, whenever it starts, so an agent that was slow, down or restarted still learns
 * every QP (and can plan and re-port it live). */
struct live_qp {
    struct ibv_qp *qp;
    char dev[IBV_SYSFS_NAME_MAX];
    uint32_t lqpn;
    int acc; /* qp_access_flags at INIT; -1 = not seen */
    long long init_ns; /* when it went to INIT (CLOCK_MONOTONIC); 0 = not seen */
    int known;
    char desc[DESC_LEN]; /* the QP line's fields (describe_rtr) */
    char rtr[RTR_LEN]; /* the RTR line */
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static struct live_qp *table;
static size_t table_len, table_cap;

/* The entry of `qp`, or the known QP `lqpn` of device `dev` (table_mu held). */
static struct live_qp *find_qp(const char *dev, uint32_t lqpn, struct ibv_qp *qp)
{
    for (size_t i = 0; i < table_len; i++)
        if (qp ? table[i].qp == qp
               : (table[i].known && table[i].lqpn == lqpn && !strcmp(table[i].dev, dev)))
            return &table[i];
    return NULL;
}

/* Record `qp`: at INIT with its access flags (acc >= 0), or at RTR (acc < 0) as known,
 * with its QP line's fields `desc` and its RTR line `rtr`. */
static void remember_qp(struct ibv_qp *qp, int acc, const char *desc, const char *rtr)
{
    pthread_mutex_lock(&table_mu);
    struct live_qp *e = find_qp(NULL, 0, qp);
    if (!e && table_len == table_cap) {
        size_t cap = table_cap ? 2 * table_cap : 64;
        struct live_qp *t = realloc(table, cap * sizeof(*t));
        if (t) {
            table = t;
            table_cap = cap;
        }
    }
    if (!e && table_len < table_cap) {
        e = &table[table_len++];
        memset(e, 0, sizeof(*e));
        e->acc = -1;
    }
    if (e) {
        e->qp = qp;
        snprintf(e->dev, sizeof(e->dev), "%s", qp->context->device->name);
        e->lqpn = qp->qp_num;
        if (acc >= 0) {
            e->acc = acc;
            e->init_ns = now_ns();
        } else {
            e->known = 1;
            snprintf(e->desc, sizeof(e->desc), "%s", desc);
            snprintf(e->rtr, sizeof(e->rtr), "%s", rtr);
        }
    }
    pthread_mutex_unlock(&table_mu);
}

/* The access flags `qp` got at INIT (-1 = not seen) and the time since (ns, -1). */
static int access_flags_of(struct ibv_qp *qp, long long *span_ns)
{
    pthread_mutex_lock(&table_mu);
    struct live_qp *e = find_qp(NULL, 0, qp);
    int acc = e ? e->acc : -1;
    *span_ns = e && e->init_ns ? now_ns() - e->init_ns : -1;
    pthread_mutex_unlock(&table_mu);
    return acc;
}

/* ---- the agent connection ---- */

static pthread_mutex_t req_mu = PTHREAD_MUTEX_INITIALIZER;  /* one request at a time */
static pthread_mutex_t conn_mu = PTHREAD_MUTEX_INITIALIZER; /* fd, reply slot, writes */
static pthread_cond_t reply_cv = PTHREAD_COND_INITIALIZER;
static int agent_fd = -1;
static long conn_gen; /* bumped at every new agent connection */
static int reconnecting; /* a reconnect thread is running */
static long long agent_down_until_ms;
static long req_seq;
static char reply[LINE_MAX_LEN];

/* Give up on the agent for ICE_SHIM_RETRY_MS (conn_mu held).  shutdown(), not close():
 * the reader thread owns the descriptor and closes it when its recv() returns. */
static void drop_locked(const char *why)
{
    if (agent_fd >= 0) {
        debug("dropping the agent connection: %s", why);
        shutdown(agent_fd, SHUT_RDWR);
        agent_fd = -1;
        pthread_cond_broadcast(&reply_cv);
    }
    agent_down_until_ms = now_ms() + cfg.retry_ms;
}

static int connect_locked(void);

/* Start a detached thread that does not take the CCL's signals; 0 on success. */
static int spawn(void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &at, fn, arg);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Connects again every ICE_SHIM_RETRY_MS while there is no agent connection, so that a
 * restarted (or late) agent learns this process's QPs without waiting for a new one. */
static void *reconnect(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {cfg.retry_ms / 1000, (cfg.retry_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&conn_mu);
        int done = agent_fd >= 0 || connect_locked() == 0;
        if (done)
            reconnecting = 0;
        pthread_mutex_unlock(&conn_mu);
        if (done)
            return NULL;
    }
}

/* Start the reconnect thread unless it runs (conn_mu held). */
static void start_reconnect_locked(void)
{
    if (!reconnecting)
        reconnecting = spawn(reconnect, NULL) == 0;
}

/* Never blocks: an agent that does not read its socket must not stall the CCL, so a full
 * socket buffer drops the connection instead. */
static void send_locked(const char *line)
{
    size_t n = strlen(line);
    if (agent_fd >= 0 && send(agent_fd, line, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n)
        drop_locked(errno == EAGAIN ? "the agent is not reading" : strerror(errno));
}

static void send_line(const char *fmt, ...)
{
    char buf[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&conn_mu);
    send_locked(buf);
    pthread_mutex_unlock(&conn_mu);
}

static int set_rate(struct ibv_qp *qp, long kbps)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.rate_limit = (uint32_t)kbps;
    return real_modify(qp, &a, IBV_QP_RATE_LIMIT); /* RTS->RTS, no state change */
}

/* An agent's "SET": change a live QP now.  The table lock is held across the driver calls
 * so that ibv_destroy_qp cannot free the QP meanwhile. */
static void apply_set(const char *line)
{
    char dev[IBV_SYSFS_NAME_MAX] = "";
    long lqpn = -1, sport = -1, kbps = -1;
    const char *d = strstr(line, " dev=");
    if (d)
        sscanf(d + 5, "%63s", dev);
    if (!icefab_kv_long(line, "lqpn", &lqpn) || !dev[0])
        return;
    icefab_kv_long(line, "sport", &sport);
    icefab_kv_long(line, "rate_kbps", &kbps);
    int sport_err = -1, rate_err = -1;
    pthread_mutex_lock(&table_mu);
    struct live_qp *e = find_qp(dev, (uint32_t)lqpn, NULL);
    if (!e) {
        sport_err = rate_err = ENOENT;
    } else {
        if (sport >= 0)
            sport_err = mlx5_sport ? mlx5_sport(e->qp, (uint16_t)sport) : ENOSYS;
        if (kbps >= 0)
            rate_err = set_rate(e->qp, kbps);
    }
    pthread_mutex_unlock(&table_mu);
    debug("SET %s qp %ld sport %ld (err %d) rate %ld kbps (err %d)", dev, lqpn, sport,
          sport_err, kbps, rate_err);
    send_line("DONE dev=%s lqpn=%ld sport_err=%d rate_err=%d\n", dev, lqpn, sport_err,
              rate_err);
}

/* Reads the agent's lines: replies wake the waiting request, SETs are applied here. */
static void *reader(void *arg)
{
    int fd = (int)(long)arg;
    char buf[LINE_MAX_LEN * 4];
    size_t have = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        char *start = buf, *nl;
        while ((nl = strchr(start, '\n'))) {
            *nl = '\0';
            long seq;
            if (!strncmp(start, "SET ", 4)) {
                apply_set(start);
            } else if (icefab_kv_long(start, "seq", &seq) && seq == 0) {
                /* the answer to a QP told, not asked: nobody waits for it */
            } else {
                pthread_mutex_lock(&conn_mu);
                snprintf(reply, sizeof(reply), "%s", start);
                pthread_cond_broadcast(&reply_cv);
                pthread_mutex_unlock(&conn_mu);
            }
            start = nl + 1;
        }
        have = strlen(start);
        memmove(buf, start, have);
        if (have == sizeof(buf) - 1)
            break; /* a line longer than any message: the peer is not our agent */
    }
    pthread_mutex_lock(&conn_mu);
    if (agent_fd == fd)
        drop_locked("the agent closed the connection");
    close(fd);
    start_reconnect_locked();
    pthread_mutex_unlock(&conn_mu);
    return NULL;
}

/* Connect (conn_mu held).  A Unix-socket connect() either succeeds at once or fails at
 * once (no listener, no file, full backlog: EAGAIN), so it cannot stall the CCL. */
static int connect_locked(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", cfg.socket_path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        debug("no agent at %s: %s", cfg.socket_path, strerror(errno));
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* the reader blocks in recv() */
    if (spawn(reader, (void *)(long)fd) != 0) {
        close(fd);
        return -1;
    }
    agent_fd = fd;
    conn_gen++;
    char line[LINE_MAX_LEN];
    snprintf(line, sizeof(line), "HELLO pid=%d job=%s rank=%s\n", (int)getpid(), cfg.job,
             cfg.rank);
    send_locked(line);
    /* Every connected QP, in connection order (the agent names data QPs in that order);
     * its answers are to no request (seq 0) and are ignored.  Lock order: conn_mu, then
     * table_mu (nothing takes conn_mu while holding table_mu). */
    pthread_mutex_lock(&table_mu);
    for (size_t i = 0; i < table_len && agent_fd >= 0; i++) {
        if (!table[i].known)
            continue;
        snprintf(line, sizeof(line), "QP seq=0 %s\n", table[i].desc);
        send_locked(line);
        send_locked(table[i].rtr);
    }
    pthread_mutex_unlock(&table_mu);
    return agent_fd >= 0 ? 0 : -1;
}

/* Tell the agent about one QP and wait at most the timeout for its plan: sport (-1 =
 * none) and srate (0 = none).  Returns the generation of the connection the agent was
 * told on (0: no agent; the QP is told when one connects).  After a failure no QP waits
 * for ICE_SHIM_RETRY_MS: a slow agent is still told, without waiting. */
static long ask_agent(const char *desc, int *sport, int *srate)
{
    long told = 0;
    *sport = -1;
    *srate = 0;
    pthread_mutex_lock(&req_mu);
    pthread_mutex_lock(&conn_mu);
    long long now = now_ms();
    if (agent_fd < 0 && (now < agent_down_until_ms || connect_locked() != 0)) {
        if (now >= agent_down_until_ms)
            agent_down_until_ms = now + cfg.retry_ms;
        start_reconnect_locked();
        goto out;
    }
    int wait = now >= agent_down_until_ms;
    long seq = wait ? ++req_seq : 0;
    char line[LINE_MAX_LEN];
    snprintf(line, sizeof(line), "QP seq=%ld %s\n", seq, desc);
    reply[0] = '\0';
    send_locked(line);
    told = agent_fd >= 0 ? conn_gen : 0;
    if (!told || !wait)
        goto out;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += cfg.timeout_ms / 1000;
    dl.tv_nsec += (cfg.timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int got = -1;
    while (agent_fd >= 0 && (got = icefab_parse_plan(reply, seq, sport, srate)) == -1)
        if (pthread_cond_timedwait(&reply_cv, &conn_mu, &dl) == ETIMEDOUT)
            break;
    if (got < 0) {
        *sport = -1;
        *srate = 0;
        agent_down_until_ms = now_ms() + cfg.retry_ms; /* slow: keep it, but stop waiting */
        debug("no usable answer from the agent within %ld ms (reply '%s')", cfg.timeout_ms,
              reply);
    }
out:
    pthread_mutex_unlock(&conn_mu);
    pthread_mutex_unlock(&req_mu);
    return told;
}

/* ---- the interposed verbs ---- */

static void resolve_direct(void)
{
    if (!real_modify)
        real_modify = (modify_fn)next_verb("ibv_modify_qp");
    if (!real_destroy)
        real_destroy = (destroy_fn)next_verb("ibv_destroy_qp");
}

/* "dev= port= lqpn= rqpn= sip= dip= acc= span=" of an RC QP going INIT->RTR on a
 * RoCEv2 IPv4 GID; 0 for any other call (which then passes through untouched), and for a
 * QP connected to itself: NCCL's GPU-flush QP (src/transport/net_ib/connect.cc,
 * ncclIbAccept: remoteQpNum = the flush QP's own number), which carries only local RDMA
 * reads.  acc is the QP's access flags at INIT: NCCL >= 2.29.2 gives its receive-side QPs
 * (ncclIbAccept, CTS writes and ACKs only) REMOTE_WRITE|REMOTE_ATOMIC|REMOTE_READ and its
 * send-side (data) QPs REMOTE_WRITE alone (ncclIbConnect); older NCCL and RCCL give both
 * REMOTE_WRITE, so the agent cannot tell them apart (docs/verbs-shim.md).  span is the
 * time from INIT to this RTR: NCCL's send side reaches INIT before the receive side exists
 * and RTR after it is connected, so of the two ends of a connection the sender's span is
 * the longer one (the controller pairs the ends: icefabric/pipeline/pairing.py). */
static int describe_rtr(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask,
                        char *out, size_t n)
{
    const int need = IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN;
    if (qp->qp_type != IBV_QPT_RC || (mask & need) != need || attr->qp_state != IBV_QPS_RTR ||
        !attr->ah_attr.is_global || !gid_ex || attr->dest_qp_num == qp->qp_num)
        return 0;
    uint8_t port = attr->ah_attr.port_num ? attr->ah_attr.port_num : 1;
    struct ibv_gid_entry local;
    if (gid_ex(qp->context, port, attr->ah_attr.grh.sgid_index, &local, 0, sizeof(local)) ||
        local.gid_type != IBV_GID_TYPE_ROCE_V2)
        return 0;
    char sip[16], dip[16];
    if (!icefab_gid_to_ipv4(local.gid.raw, sip, sizeof(sip)) ||
        !icefab_gid_to_ipv4(attr->ah_attr.grh.dgid.raw, dip, sizeof(dip)))
        return 0;
    long long span;
    int acc = access_flags_of(qp, &span);
    snprintf(out, n, "dev=%s port=%u lqpn=%u rqpn=%u sip=%s dip=%s acc=%d span=%lld",
             qp->context->device->name, port, qp->qp_num, attr->dest_qp_num, sip, dip, acc,
             span);
    return 1;
}

/* The caller's attributes, copying only the bytes its struct is known to hold: NCCL and
 * RCCL declare their own struct ibv_qp_attr (NCCL src/include/ibvcore.h) which ends before
 * rate_limit (136 bytes, rdma-core's is 144); rate_limit is read only when the mask says
 * the caller set it (then its struct has the field). */
static void copy_attr(struct ibv_qp_attr *dst, const struct ibv_qp_attr *src, int mask)
{
    memset(dst, 0, sizeof(*dst));
    memcpy(dst, src, (mask & IBV_QP_RATE_LIMIT) ? sizeof(*dst)
                                                : offsetof(struct ibv_qp_attr, rate_limit));
}

static int modify_rtr(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, const char *desc)
{
    int sport, srate;
    long told = ask_agent(desc, &sport, &srate);
    uint32_t fl = icefab_flow_label_for_sport(sport);
    int rc = -1, planned = fl != 0 || srate != 0;
    if (planned) {
        struct ibv_qp_attr mine;
        copy_attr(&mine, attr, mask);
        if (fl)
            mine.ah_attr.grh.flow_label = fl;
        if (srate)
            mine.ah_attr.static_rate = (uint8_t)srate;
        rc = real_modify(qp, &mine, mask);
        if (rc != 0) {
            debug("RTR with flow label 0x%x, static rate %d failed (%d): replaying the CCL's "
                  "attributes", fl, srate, rc);
            planned = 0;
        }
    }
    if (!planned)
        rc = real_modify(qp, attr, mask);
    if (rc != 0)
        return rc;
    uint32_t used = planned && fl ? fl : attr->ah_attr.grh.flow_label;
    if (!used)
        used = icefab_calc_flow_label(qp->qp_num, attr->dest_qp_num);
    char rtr[RTR_LEN], line[LINE_MAX_LEN];
    snprintf(rtr, sizeof(rtr), "RTR dev=%s lqpn=%u ok=1 sport=%u planned=%d srate=%d\n",
             qp->context->device->name, qp->qp_num, icefab_sport_of_flow_label(used), planned,
             planned ? srate : attr->ah_attr.static_rate);
    remember_qp(qp, -1, desc, rtr);
    /* A connection made since the agent was asked may have started before this QP was
     * remembered: tell it the QP (the agent takes a QP told twice once). */
    snprintf(line, sizeof(line), "QP seq=0 %s\n", desc);
    pthread_mutex_lock(&conn_mu);
    if (agent_fd >= 0 && conn_gen != told)
        send_locked(line);
    send_locked(rtr);
    pthread_mutex_unlock(&conn_mu);
    return rc;
}

static int shim_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    pthread_once(&cfg_once, load_cfg);
    resolve_direct();
    if (!real_modify)
        return ENOSYS;
    pthread_once(&libs_once, load_libs);
    char desc[DESC_LEN];
    if (!cfg.disabled && describe_rtr(qp, attr, mask, desc, sizeof(desc)))
        return modify_rtr(qp, attr, mask, desc);
    int rc = real_modify(qp, attr, mask);
    if (rc == 0 && !cfg.disabled && qp->qp_type == IBV_QPT_RC && (mask & IBV_QP_STATE) &&
        attr->qp_state == IBV_QPS_INIT && (mask & IBV_QP_ACCESS_FLAGS))
        remember_qp(qp, (int)attr->qp_access_flags, NULL, NULL);
    return rc;
}

static int shim_destroy_qp(struct ibv_qp *qp)
{
    resolve_direct();
    if (!real_destroy)
        return ENOSYS;
    int known = 0;
    char dev[IBV_SYSFS_NAME_MAX] = "";
    uint32_t lqpn = 0;
    pthread_mutex_lock(&table_mu);
    struct live_qp *e = find_qp(NULL, 0, qp);
    if (e) {
        known = e->known;
        snprintf(dev, sizeof(dev), "%s", e->dev);
        lqpn = e->lqpn;
        *e = table[--table_len];
    }
    pthread_mutex_unlock(&table_mu);
    if (known)
        send_line("GONE dev=%s lqpn=%u\n", dev, lqpn);
    return real_destroy(qp);
}

/* Programs linked against libibverbs call these. */
int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
    return shim_modify_qp(qp, attr, attr_mask);
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    return shim_destroy_qp(qp);
}

/* Programs that dlopen() libibverbs (NCCL, RCCL) get the verbs through dlvsym().
 *
 * RTLD_NEXT and RTLD_DEFAULT lookups are passed straight through as a tail call: glibc
 * resolves them relative to its caller's return address (dlfcn/dlvsym.c passes
 * RETURN_ADDRESS(0) to _dl_vsym), so a jump keeps the program's own caller in place, while
 * a call from here would make every RTLD_NEXT lookup of every process that inherits
 * LD_PRELOAD start after the shim.  The shim acts only on real library handles.
 * Plain dlsym() is not hooked: NCCL's net_ib path uses dlvsym (src/misc/ibvsymbols.cc);
 * its GPU-initiated DOCA path (src/transport/net_ib/gdaki/doca-gpunetio/src/
 * doca_verbs_ibv_wrapper.cpp) takes ibv_modify_qp with dlsym() and is not steered
 * (docs/verbs-shim.md). */
void *dlvsym(void *handle, const char *name, const char *version)
{
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT)
        return real_dlvsym()(handle, name, version); /* a sibling call (-O2) */
    void *p = real_dlvsym()(handle, name, version);
    if (!p)
        return p;
    if (!strcmp(name, "ibv_modify_qp")) {
        real_modify = (modify_fn)p;
        return (void *)shim_modify_qp;
    }
    if (!strcmp(name, "ibv_destroy_qp")) {
        real_destroy = (destroy_fn)p;
        return (void *)shim_destroy_qp;
    }
    return p;
}

/* A forked child has none of the parent's QPs, nor its reader thread. */
static void after_fork_child(void)
{
    pthread_mutex_init(&table_mu, NULL);
    pthread_mutex_init(&req_mu, NULL);
    pthread_mutex_init(&conn_mu, NULL);
    pthread_cond_init(&reply_cv, NULL);
    if (agent_fd >= 0)
        close(agent_fd);
    agent_fd = -1;
    reconnecting = 0;
    table_len = 0;
}

__attribute__((constructor)) static void shim_init(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}
