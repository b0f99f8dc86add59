"""Soak: 1,000 agents against one controller for 10 minutes, with churn.

The controller runs as its own process (``icefab controller serve``, SQLite,
``ICE_PLANNER_PROCESSES=1``, policy ``ecmp``, 2 s plan debounce) on a free 127.0.0.1 port;
the agents are asyncio tasks in this process, each with two keep-alive HTTP/1.1
connections (one parked on its plan long-poll, one for everything else), behaving like
``icefab agent run``: enrol, report the host's communicator (500 two-host NCCL jobs),
long-poll the plan, acknowledge every new version. Churn, all the time:

* agents leave (their process dies: connections dropped) and come back after a while:
  they enrol again (new token), report again, fetch the current plan;
* jobs end (both hosts delete their report) and new jobs start on those hosts;
* a leaf-spine cable goes down, and up again a few seconds later.

Measured in windows of ``--window`` s: p50/p99 of every non-waiting request, the delay from
a plan's creation to its arrival at the agents (long-poll fan-out), errors (any status the
API does not promise for the request), plans and re-plans per second, and the resident
memory of the controller process (and its planner process). A plan wakes only the agents
of the hosts it changed: the benchmark counts, for every plan version, the parked agents
its answer reached, and for the versions made by job changes alone whether any host
outside those jobs was woken. At the end every agent must hold its host's current plan.

Run: ``PYTHONPATH=src python benchmarks/bench_soak.py [--agents 1000 --duration 600]
[--out DIR]`` (JSON summary on stdout; soak.json and soak.png in DIR).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_controller import (  # noqa: E402
    ADMIN,
    RawConn,
    bench_fabric,
    cpu_s,
    fabric_cables,
    loop_lag,
    reports_for,
    rss_mb,
    server_percentiles,
)

from icefabric.schemas_service import AgentEnrol, FabricUpload  # noqa: E402
from icefabric.topology.serialize import fabric_to_dict  # noqa: E402
from icefabric.twin.run import register_jobs  # noqa: E402
from icefabric.twin.serve import SubprocessController  # noqa: E402

OK = {"enrol": {201}, "report": {200}, "end": {204}, "ack": {204}, "event": {202},
      "poll": {200, 204}, "job": {201, 204}}


class Log:
    """Every request: (t since start, kind, seconds, status); plan arrivals."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.requests: list[tuple[float, str, float, int]] = []
        self.arrivals: list[tuple[float, float]] = []  # (t, delay from plan creation)
        self.woken: dict[int, set[str]] = {}  # plan version -> parked agents it reached
        self.errors: list[str] = []

    def note(self, kind, dt, status, data=b""):
        self.requests.append((time.monotonic() - self.t0, kind, dt, status))
        if status not in OK[kind]:
            self.errors.append(f"{kind} {status} {data[:120]!r}")


class SimAgent:
    """One host's agent, as ``icefab agent run`` behaves on the wire."""

    def __init__(self, port, host, rep, log, args):
        self.port, self.host, self.rep, self.log, self.args = port, host, rep, log, args
        self.token = None
        self.version = -1
        self.present = False
        self.ctl = RawConn(port)
        self.lock = asyncio.Lock()
        self.poller: asyncio.Task | None = None

    async def call(self, kind, method, path, body=b"", token=None):
        async with self.lock:
            t = time.perf_counter()
            st, data = await self.ctl.request(method, path, body, {
                "Authorization": f"Bearer {token or self.token}",
                "Content-Type": "application/json"})
            self.log.note(kind, time.perf_counter() - t, st, data)
            return st, data

    async def join(self):
        """Enrol, report, start long-polling (a fresh agent process)."""
        _, data = await self.call("enrol", "POST", "/v1/agents",
                                  AgentEnrol(host=self.host).model_dump_json().encode(), ADMIN)
        self.token = json.loads(data)["token"]
        await self.put_report()
        self.version, self.present = -1, True
        self.poller = asyncio.create_task(self.poll_loop())

    async def put_report(self):
        await self.call("report", "PUT", f"/v1/hosts/{self.host}/communicators/{self.rep.job}",
                        self.rep.model_dump_json().encode())

    async def leave(self):
        """The agent process dies: its connections drop."""
        self.present = False
        self.poller.cancel()
        await asyncio.gather(self.poller, return_exceptions=True)
        async with self.lock:
            await self.ctl.close()

    async def poll_loop(self):
        conn = RawConn(self.port)
        try:
            while True:
                st, data = await conn.request(
                    "GET", f"/v1/hosts/{self.host}/plan?after_version={self.version}"
                    f"&wait_s={self.args.wait}", headers={"Authorization": f"Bearer {self.token}"})
                if st == 200:
                    plan = json.loads(data)
                    if self.version >= 0:  # a new plan reached a waiting agent
                        self.log.arrivals.append((time.monotonic() - self.log.t0,
                                                  time.time() - plan["created_at"]))
                        self.log.woken.setdefault(plan["version"], set()).add(self.host)
                    self.version = plan["version"]
                    await self.call("ack", "POST", f"/v1/hosts/{self.host}/plan/ack",
                                    json.dumps({"version": self.version,
                                                "applied": len(plan["qps"])}).encode())
                elif st != 204:
                    self.log.note("poll", 0.0, st, data)
                    await asyncio.sleep(1.0)
        finally:
            await conn.close()


async def leave_loop(agents, args, stop, rng):
    """Every --leave-every s an agent dies; it comes back (a new process) --away s later."""
    back = []
    while not stop.is_set():
        await asyncio.sleep(args.leave_every)
        a = rng.choice([x for x in agents if x.present])
        await a.leave()

        async def rejoin(a=a):
            await asyncio.sleep(args.away)
            await a.join()

        back.append(asyncio.create_task(rejoin()))
    await asyncio.gather(*back)


async def job_loop(port, log, pairs, args, stop, rng):
    """Every --job-every s a two-host job ends and a new job starts on those hosts: the
    agents end their reports, the scheduler deletes the job and registers the new one,
    the agents report it."""
    sched = RawConn(port)
    head = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}

    async def scheduler(method, job, body=b""):
        t = time.perf_counter()
        st, data = await sched.request(method, f"/v1/jobs/{job}", body, head)
        log.note("job", time.perf_counter() - t, st, data)

    gen = 0
    while not stop.is_set():
        await asyncio.sleep(args.job_every)
        x, y = rng.choice([p for p in pairs if p[0].present and p[1].present])
        gen += 1
        old, new = x.rep.job, f"{x.rep.job.split('.')[0]}.{gen}"
        for ag in (x, y):
            await ag.call("end", "DELETE", f"/v1/hosts/{ag.host}/communicators/{old}")
        await scheduler("DELETE", old)
        await scheduler("PUT", new, json.dumps({"hosts": [x.host, y.host]}).encode())
        for ag in (x, y):
            ag.rep = ag.rep.model_copy(update={"job": new})
            await ag.put_report()
    await sched.close()


async def link_loop(port, log, args, stop, rng, cables):
    """Every --link-every s a leaf uplink cable goes down, and up again half-way."""
    admin = RawConn(port)
    head = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    while not stop.is_set():
        a, b = rng.choice(cables)
        link = {"a": a, "b": b}
        for kind in ("link_down", "link_up"):
            await asyncio.sleep(args.link_every / 2)
            t = time.perf_counter()
            st, data = await admin.request("POST", "/v1/events", json.dumps(
                {"events": [{"kind": kind, "link": link}]}).encode(), head)
            log.note("event", time.perf_counter() - t, st, data)
    await admin.close()


def plans_done(url: str) -> float:
    m = httpx.get(f"{url}/metrics", trust_env=False, timeout=30).text
    return sum(float(ln.split()[1]) for ln in m.splitlines()
               if ln.startswith(("ice_plans_total ", "ice_replans_total ")))


async def sampler(url, pid, log, args, stop, samples):
    while not stop.is_set():
        plans = await asyncio.to_thread(plans_done, url)
        samples.append({"t": round(time.monotonic() - log.t0, 1), "rss_mb": rss_mb(pid),
                        "cpu_s": cpu_s(pid), "plans": plans, "load": os.getloadavg()[0]})
        try:
            await asyncio.wait_for(stop.wait(), args.sample_every)
        except TimeoutError:
            pass


def host_versions(url: str) -> dict[str, int]:
    """Each host's current plan version, as the controller serves it."""
    r = httpx.get(f"{url}/v1/agents", trust_env=False, timeout=60,
                  headers={"Authorization": f"Bearer {ADMIN}"})
    return {a["host"]: a["plan_version"] for a in r.json()}


def plan_summaries(url: str) -> dict[int, dict]:
    r = httpx.get(f"{url}/v1/plans", params={"limit": 1000}, trust_env=False, timeout=60,
                  headers={"Authorization": f"Bearer {ADMIN}"})
    return {p["version"]: p for p in r.json()}


def wakes(log: Log, plans: dict[int, dict]) -> dict:
    """Parked agents each plan version reached. A version made by job changes alone (its
    reason names jobs, no link event) must wake only the hosts of those jobs: two per
    two-host job (it ends and starts again on the same pair)."""
    by_kind: dict[str, list[int]] = {"job": [], "link": [], "other": []}
    beyond = []
    for v, p in sorted(plans.items()):
        n = len(log.woken.get(v, ()))
        reason = p["reason"].split(": ", 1)[-1]
        if "events from" in reason:
            by_kind["link"].append(n)
        elif reason.startswith("job "):
            by_kind["job"].append(n)
            jobs = {w.split(".")[0] for w in reason.replace(",", " ").split()
                    if w.startswith("job") and w[3:4].isdigit()}
            if n > 2 * len(jobs):
                beyond.append({"version": v, "woken": n, "jobs": sorted(jobs)})
        else:
            by_kind["other"].append(n)
    return {k: {"versions": len(v), "woken_mean": round(float(np.mean(v)), 2) if v else None,
                "woken_max": max(v, default=0)} for k, v in by_kind.items()} | {
        "job_versions_waking_other_hosts": len(beyond), "examples": beyond[:5]}


def pct(xs, q) -> float | None:
    return round(float(np.percentile(np.asarray(xs) * 1e3, q)), 2) if len(xs) else None


def windows(log: Log, samples: list[dict], width: float, end: float) -> list[dict]:
    out = []
    for w0 in np.arange(0, end, width):
        w1 = w0 + width
        lat = [d for t, k, d, _ in log.requests if w0 <= t < w1 and k != "poll"]
        arr = [d for t, d in log.arrivals if w0 <= t < w1]
        s = [x for x in samples if w0 <= x["t"] < w1]
        out.append({"t0_s": float(w0), "requests": len(lat), "p50_ms": pct(lat, 50),
                    "p99_ms": pct(lat, 99), "plan_arrival_p50_ms": pct(arr, 50),
                    "plan_arrival_p99_ms": pct(arr, 99),
                    "plans_per_s": round((s[-1]["plans"] - s[0]["plans"]) /
                                         max(s[-1]["t"] - s[0]["t"], 1e-9), 3)
                    if len(s) > 1 else None,
                    "rss_mb": round(s[-1]["rss_mb"], 1) if s else None,
                    "controller_cpu": round((s[-1]["cpu_s"] - s[0]["cpu_s"]) /
                                            max(s[-1]["t"] - s[0]["t"], 1e-9), 2)
                    if len(s) > 1 else None,
                    "load_avg": round(s[-1]["load"], 1) if s else None,
                    "errors": sum(1 for t, k, _, st in log.requests
                                  if w0 <= t < w1 and st not in OK[k])})
    return out


async def soak(args, url, pid, reps, cables):
    log = Log()
    port = int(url.rsplit(":", 1)[1])
    rng = random.Random(args.seed)
    agents = [SimAgent(port, h, reps[h], log, args) for h in sorted(reps)]
    by_host = {a.host: a for a in agents}
    pairs = [(by_host[r.ranks[0].host], by_host[r.ranks[1].host]) for h, r in reps.items()
             if r.ranks[0].host == h]
    stop, samples, lag = asyncio.Event(), [], []
    tasks = [asyncio.create_task(sampler(url, pid, log, args, stop, samples))]

    tick = asyncio.create_task(loop_lag(stop, lag))

    async def start(a, i):
        await asyncio.sleep(args.ramp * i / len(agents))
        await a.join()

    await asyncio.gather(*[start(a, i) for i, a in enumerate(agents)])
    tasks += [asyncio.create_task(leave_loop(agents, args, stop, rng)),
              asyncio.create_task(job_loop(port, log, pairs, args, stop, rng)),
              asyncio.create_task(link_loop(port, log, args, stop, rng, cables))]
    await asyncio.sleep(max(0.0, args.duration - (time.monotonic() - log.t0)))
    stop.set()
    await asyncio.gather(*tasks[1:])  # churn ends; the absent agents come back
    end = time.monotonic() - log.t0
    # Every agent ends on its host's current plan (the latest version that changed it).
    deadline = time.monotonic() + 120
    own: dict[str, int] = {}
    while time.monotonic() < deadline:
        own = await asyncio.to_thread(host_versions, url)
        if all(a.version == own.get(a.host) for a in agents):
            break
        await asyncio.sleep(0.5)
    plans = await asyncio.to_thread(plan_summaries, url)
    await tasks[0]
    await tick
    for a in agents:
        await a.leave()
    lat = [d for _, k, d, _ in log.requests if k != "poll"]
    # once every agent joined: the churn alone (the ramp's 1,000 enrolments excluded)
    steady = [d for t, k, d, _ in log.requests if k != "poll" and t >= args.ramp + args.window]
    return {
        "agents": len(agents), "duration_s": round(end, 1), "requests": len(lat),
        "errors": len(log.errors), "error_samples": log.errors[:5],
        "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
        "after_ramp": {"requests": len(steady), "p50_ms": pct(steady, 50),
                       "p99_ms": pct(steady, 99),
                       "plan_arrival_p99_ms": pct([d for t, d in log.arrivals
                                                   if t >= args.ramp + args.window], 99)},
        "by_kind": {k: {"n": len(v), "p50_ms": pct(v, 50), "p99_ms": pct(v, 99)}
                    for k in OK if (v := [d for _, kk, d, _ in log.requests if kk == k])},
        "plan_arrival": {"n": len(log.arrivals), "p50_ms": pct([d for _, d in log.arrivals], 50),
                         "p99_ms": pct([d for _, d in log.arrivals], 99)},
        "latest_plan": max(plans), "agents_on_own_latest": sum(
            a.version == own.get(a.host) for a in agents),
        "wakes": wakes(log, plans),
        "rss_mb_start": round(samples[0]["rss_mb"], 1),
        "rss_mb_after_ramp": round(next((x["rss_mb"] for x in samples
                                         if x["t"] >= args.ramp + args.window),
                                        samples[-1]["rss_mb"]), 1),
        "rss_mb_end": round(samples[-1]["rss_mb"], 1),
        "plans": samples[-1]["plans"] - samples[0]["plans"],
        "client_loop_lag": {"p50_ms": pct(lag, 50), "p99_ms": pct(lag, 99)},
        "windows": windows(log, samples, args.window, end), "samples": samples}


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = out["windows"]
    t = [x["t0_s"] / 60 for x in w]
    fig, ax = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    ax[0].plot(t, [x["p50_ms"] for x in w], label="requests p50")
    ax[0].plot(t, [x["p99_ms"] for x in w], label="requests p99")
    ax[0].plot(t, [x["plan_arrival_p99_ms"] for x in w], ":", label="plan arrival p99")
    ax[0].set_ylabel("ms")
    ax[0].set_yscale("log")
    ax[0].legend(fontsize=8)
    s = out["samples"]
    ax[1].plot([x["t"] / 60 for x in s], [x["rss_mb"] for x in s])
    ax[1].set_ylabel("controller RSS, MiB")
    ax[1].set_ylim(bottom=0)
    ax[2].bar(t, [x["plans_per_s"] or 0 for x in w], width=(t[1] - t[0]) * 0.8 if len(t) > 1
              else 0.4, align="edge")
    ax[2].set_ylabel("plans / s")
    ax[2].set_xlabel("minutes")
    fig.suptitle(f"soak: {out['agents']} agents, {out['errors']} errors")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--duration", type=float, default=600.0, help="seconds, ramp included")
    p.add_argument("--ramp", type=float, default=30.0)
    p.add_argument("--wait", type=float, default=20.0, help="long-poll wait_s")
    p.add_argument("--leave-every", type=float, default=2.0)
    p.add_argument("--away", type=float, default=10.0)
    p.add_argument("--job-every", type=float, default=5.0)
    p.add_argument("--link-every", type=float, default=30.0)
    p.add_argument("--window", type=float, default=30.0)
    p.add_argument("--sample-every", type=float, default=5.0)
    p.add_argument("--debounce", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    n = args.agents + args.agents % 2
    fabric = bench_fabric(n)
    reps = reports_for(fabric, np.random.default_rng(args.seed))
    tmp = tempfile.mkdtemp(prefix="ice-soak-")
    env = {"ICE_DATABASE_URL": f"sqlite:///{tmp}/ice.db", "ICE_ADMIN_TOKEN": ADMIN,
           "ICE_POLICY": "ecmp", "ICE_PLAN_DEBOUNCE_S": str(args.debounce),
           "ICE_PLANNER_PROCESSES": "1", "ICE_ENROL_RATE_PER_S": "1000",
           "ICE_ENROL_BURST": "2000", "PYTHONPATH": os.pathsep.join(sys.path)}
    ctl = SubprocessController(env, log_path=f"{tmp}/controller.log")
    url = ctl.start()
    try:
        r = httpx.put(f"{url}/v1/fabric", content=FabricUpload(
            topology=fabric_to_dict(fabric)).model_dump_json(), timeout=120, trust_env=False,
            headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        with httpx.Client(base_url=url, trust_env=False, timeout=120,
                          headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
            register_jobs(admin, {h: [rep] for h, rep in reps.items()})  # (the scheduler)
        out = asyncio.run(soak(args, url, ctl.proc.pid, reps, fabric_cables(fabric)))
        m = httpx.get(f"{url}/metrics", trust_env=False).text
        out["server_side"] = server_percentiles({
            ln.split()[0]: float(ln.split()[1]) for ln in m.splitlines()
            if ln.startswith("ice_http_request_seconds")})
    finally:
        ctl.stop()
    out["command"] = "PYTHONPATH=src python benchmarks/bench_soak.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    summary = {k: v for k, v in out.items() if k not in ("windows", "samples")}
    print(json.dumps(summary, indent=1))
    print("\n| minute | requests | p50 ms | p99 ms | plan arrival p99 ms | plans/s | RSS MiB | "
          "controller CPU (cores) | machine load | errors |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for x in out["windows"]:
        print(f"| {x['t0_s'] / 60:.1f} | {x['requests']} | {x['p50_ms']} | {x['p99_ms']} | "
              f"{x['plan_arrival_p99_ms']} | {x['plans_per_s']} | {x['rss_mb']} | "
              f"{x['controller_cpu']} | {x['load_avg']} | {x['errors']} |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "soak.json").write_text(json.dumps(out, indent=1))
        plot(out, args.out / "soak.png")
    return out


if __name__ == "__main__":
    main()
