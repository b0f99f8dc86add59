"""Controller load benchmark: 1,000 simulated agents against one controller on loopback.

The controller runs as its own process (``python -m icefabric controller serve``, SQLite,
policy ``ecmp``) on a free 127.0.0.1 port; this script simulates the agents with asyncio +
httpx in a second process. Every agent enrols, reports its host's communicator (500
two-host NCCL jobs, so the controller also plans in the background while serving), then
polls its plan every ``--poll-interval`` seconds. Agents start spread over ``--ramp`` s.
A last phase parks every agent on a long-poll and measures how fast a re-plan (link down)
reaches all of them.

Up to 1,024 agents the fabric is a leaf-spine (8 servers per leaf, 16 spines); beyond, a
3-tier fat-tree of 128-port switches sized for the servers (``fat_tree_for``). With
``--clients K`` the agents are split over K client processes (one asyncio loop each). The
fan-out phase waits for the agents whose plan the link change moved (a plan wakes only the
hosts it changes). The controller's resident memory (with its planner process) is sampled
every second.

Run: ``PYTHONPATH=src python benchmarks/bench_controller.py [--agents 1000] [--clients 1]``.
Prints a JSON summary (p50/p95/p99/max per request kind) and a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from icefabric.scenario.build import build_fabric
from icefabric.scenario.loader import loads
from icefabric.schemas_service import (
    AgentEnrol,
    CollectiveEntry,
    CommReport,
    FabricUpload,
    QpEntry,
    RankEntry,
)
from icefabric.topology.builders import BuildOptions, FatTreeSizing, ServerGroup, fat_tree_for
from icefabric.topology.catalog import server_profile
from icefabric.topology.model import Fabric
from icefabric.topology.serialize import fabric_to_dict
from icefabric.twin.run import register_jobs
from icefabric.twin.serve import SubprocessController
from icefabric.units import ipv4_str

ADMIN = "bench-admin-token"


def scenario_text(n: int) -> str:
    return f"""
name: bench-{n}
seed: 1
fabric: {{kind: leaf-spine, servers_per_leaf: 8, spines: 16, oversub: 1.0}}
pools:
  - {{name: h, server: hgx-h100, count: {n}}}
jobs:
  - {{name: dummy, servers: [h-0, h-1], collectives: [{{kind: all_reduce}}]}}
"""


#: a spine of 128 ports holds 128 leaves of 8 servers
LEAF_SPINE_MAX = 1024


def bench_fabric(n: int) -> Fabric:
    """``n`` HGX H100 servers: the leaf-spine of the published 1,000-agent figures (8 per
    leaf, 16 spines) while its spines' 128 ports hold the leaves, else a 3-tier fat-tree of
    128-port switches sized for them (:func:`~icefabric.topology.builders.fat_tree_for`)."""
    if n <= LEAF_SPINE_MAX:
        return build_fabric(loads(scenario_text(n)))
    return fat_tree_for([ServerGroup(server_profile("hgx-h100"), n, "h")],
                        FatTreeSizing(radix=128), BuildOptions(name=f"bench-{n}"))


def fabric_cables(fabric: Fabric, leaves: int = 8) -> list[tuple[str, str]]:
    """The uplink cables of the first ``leaves`` leaves (what the link churn flaps)."""
    names, first = fabric.node_names, {f"leaf{i}" for i in range(leaves)} | {
        f"leaf{i}-0" for i in range(leaves)}
    up = np.flatnonzero(fabric.link_kind == 2)
    return sorted({(names[s], names[d]) for s, d in zip(fabric.link_src[up].tolist(),
                                                         fabric.link_dst[up].tolist(),
                                                         strict=True) if names[s] in first})


def reports_for(fabric, rng) -> dict[str, CommReport]:
    """One two-host job per host pair: 1 rank per host, 2 channels -> 2 QPs each way."""
    out = {}
    names = [s.name for s in fabric.servers]
    for k in range(0, len(names) - 1, 2):
        a, b = fabric.servers[k], fabric.servers[k + 1]
        ranks = [RankEntry(rank=0, host=a.name, device=0), RankEntry(rank=1, host=b.name,
                                                                      device=0)]
        for me, peer in ((a, b), (b, a)):
            s, d = ipv4_str(fabric.node_ip[me.nics[0]]), ipv4_str(fabric.node_ip[peer.nics[0]])
            qps = [QpEntry(src_ip=s, dst_ip=d, lqpn=int(rng.integers(0x100, 0xFFFFFF)),
                           rqpn=int(rng.integers(0x100, 0xFFFFFF)), ordinal=o)
                   for o in range(2)]
            out[me.name] = CommReport(job=f"job{k // 2}", job_order=k // 2, library="nccl",
                                      collectives=[CollectiveEntry(kind="all_reduce")],
                                      size_bytes=1 << 30, channels=2, ranks=ranks, qps=qps)
    return out


class RawConn:
    """One keep-alive HTTP/1.1 connection per simulated agent, on asyncio streams.

    httpx's pool scans its connections on every request, so with 1,000 connections the
    *client* becomes the bottleneck; a raw connection measures the controller instead.
    """

    def __init__(self, port: int):
        self.port = port
        self.r = self.w = None

    async def request(self, method, path, body=b"", headers=None, retry=True):
        try:
            if self.w is None:
                self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
            head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Content-Length: {len(body)}\r\n"
                    + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()) + "\r\n")
            self.w.write(head.encode() + body)
            await self.w.drain()
            status = int((await self.r.readline()).split()[1])
            n, close = 0, False
            while True:
                line = await self.r.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode().partition(":")
                if k.lower() == "content-length":
                    n = int(v)
                elif k.lower() == "connection" and v.strip().lower() == "close":
                    close = True
            data = await self.r.readexactly(n) if n else b""
            if close:
                await self.close()
            return status, data
        except (ConnectionError, asyncio.IncompleteReadError, IndexError, ValueError):
            await self.close()
            if not retry:
                raise
            return await self.request(method, path, body, headers, retry=False)

    async def close(self):
        if self.w is not None:
            self.w.close()
            self.r = self.w = None


async def agent(port, i, host, rep, lat, args, tokens):
    c = RawConn(port)
    await asyncio.sleep(random.Random(i).uniform(0, args.ramp))

    async def timed(kind, method, path, body=b"", tok=ADMIN):
        t = time.perf_counter()
        status, data = await c.request(method, path, body, {
            "Authorization": f"Bearer {tok}", "Content-Type": "application/json"})
        lat.setdefault(kind, []).append(time.perf_counter() - t)
        if status >= 400:
            lat.setdefault("errors", []).append(f"{kind} {status} {data[:100]!r}")
        return status, data

    _, data = await timed("enrol", "POST", "/v1/agents",
                          AgentEnrol(host=host).model_dump_json().encode())
    tok = json.loads(data)["token"]
    tokens[host] = tok
    await timed("report", "PUT", f"/v1/hosts/{host}/communicators/{rep.job}",
                rep.model_dump_json().encode(), tok)
    version = -1
    for _ in range(args.polls):
        await asyncio.sleep(args.poll_interval * random.Random(i).uniform(0.5, 1.5))
        status, data = await timed("poll", "GET", f"/v1/hosts/{host}/plan?after_version="
                                   f"{version}&wait_s=0", tok=tok)
        if status == 200:
            version = json.loads(data)["version"]
            await timed("ack", "POST", f"/v1/hosts/{host}/plan/ack", json.dumps(
                {"version": version, "applied": 2}).encode(), tok)
    await c.close()
    return version


async def parked(port, tokens, versions, trigger, wait_s) -> tuple[dict, dict]:
    """Every agent long-polls its plan; ``trigger()`` runs once they are parked. Returns
    how many a new plan reached and how fast, and every agent's version after."""
    async def wait(host, tok):
        c = RawConn(port)
        status, data = await c.request("GET", f"/v1/hosts/{host}/plan?after_version="
                                       f"{versions[host]}&wait_s={wait_s}",
                                       headers={"Authorization": f"Bearer {tok}"})
        t = time.perf_counter()
        await c.close()
        return host, status, t, json.loads(data)["version"] if status == 200 else None

    tasks = [asyncio.create_task(wait(h, t)) for h, t in tokens.items()]
    await asyncio.sleep(3.0)  # everybody parked
    t0 = time.perf_counter()
    await trigger()
    done = await asyncio.gather(*tasks)
    ok = [t for _, s, t, _ in done if s == 200]
    after = {**versions, **{h: v for h, s, _, v in done if s == 200}}
    return {"agents_parked": len(tasks), "woken": len(ok),
            "all_woken_s": round(max(ok) - t0, 3) if ok else None}, after


async def fanout(port, tokens, versions, cable, fabric_body: bytes) -> dict:
    """Two plans reach parked agents: a cable going down (it wakes only the hosts whose
    QPs it moved: none when no planned route crosses it), then a new fabric version with
    the same topology (every host's document changes: all agents are woken)."""
    head = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}

    async def admin(method, path, body, want):
        c = RawConn(port)
        status, data = await c.request(method, path, body, head)
        assert status == want, data[:300]
        await c.close()

    a, b = cable
    # only agents that hold a plan: one without would be answered at once
    have = {h: t for h, t in tokens.items() if versions[h] > 0}
    link, versions = await parked(port, have, versions, lambda: admin(
        "POST", "/v1/events", json.dumps({"events": [
            {"kind": "link_down", "link": {"a": a, "b": b}}]}).encode(), 202), wait_s=10)
    fab, _ = await parked(port, tokens, versions, lambda: admin(
        "PUT", "/v1/fabric", fabric_body, 200), wait_s=60)
    return {"link_down": {**link, "cable": f"{a}-{b}"}, "new_fabric_version": fab}


async def loop_lag(stop: asyncio.Event, lag: list[float]) -> None:
    """This client's own event-loop lag (it inflates what the client measures)."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.01)
        lag.append(time.perf_counter() - t - 0.01)


def pct(xs):
    a = np.asarray(xs) * 1e3
    return {"n": len(a), "p50_ms": round(float(np.percentile(a, 50)), 2),
            "p95_ms": round(float(np.percentile(a, 95)), 2),
            "p99_ms": round(float(np.percentile(a, 99)), 2),
            "max_ms": round(float(a.max()), 2)}


async def run_agents(args, port, reps, first: int) -> dict:
    """Agents ``first``, ``first + 1``, ... (one per host of ``reps``) in this process."""
    lat: dict[str, list] = {}
    tokens: dict[str, str] = {}
    lag: list[float] = []
    stop = asyncio.Event()
    tick = asyncio.create_task(loop_lag(stop, lag))
    t0 = time.perf_counter()
    hosts = sorted(reps)
    versions = await asyncio.gather(*[agent(port, first + i, h, reps[h], lat, args, tokens)
                                      for i, h in enumerate(hosts)])
    wall = time.perf_counter() - t0
    stop.set()
    await tick
    return {"lat": lat, "tokens": tokens, "versions": dict(zip(hosts, versions, strict=True)),
            "lag": lag, "wall": wall}


def client_process(args, port, reps, first) -> dict:
    return asyncio.run(run_agents(args, port, reps, first))


def run_clients(args, port, reps) -> dict:
    """The agents split over ``args.clients`` processes (one asyncio loop each), merged."""
    hosts = sorted(reps)
    k = max(1, args.clients)
    chunks = [(hosts[i::k], i) for i in range(k)]
    if k == 1:
        parts = [client_process(args, port, reps, 0)]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(k, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(client_process, [args] * k, [port] * k,
                                  [{h: reps[h] for h in c} for c, _ in chunks],
                                  [i * len(hosts) for _, i in chunks]))
    lat: dict[str, list] = {}
    for p in parts:
        for kind, xs in p["lat"].items():
            lat.setdefault(kind, []).extend(xs)
    return {"lat": lat, "tokens": {h: t for p in parts for h, t in p["tokens"].items()},
            "versions": {h: v for p in parts for h, v in p["versions"].items()},
            "lag": [x for p in parts for x in p["lag"]], "wall": max(p["wall"] for p in parts)}


def run_summary(args, port, reps, cable, fabric_body: bytes) -> dict:
    run = run_clients(args, port, reps)
    lat, wall = run["lat"], run["wall"]
    errors = lat.pop("errors", [])
    allreq = [x for v in lat.values() for x in v]
    out = {"agents": len(reps), "clients": max(1, args.clients), "wall_s": round(wall, 2),
           "requests": len(allreq), "req_per_s": round(len(allreq) / wall, 1),
           "errors": len(errors), "error_samples": errors[:5], "all": pct(allreq),
           **{k: pct(v) for k, v in sorted(lat.items())},
           "agents_with_plan": sum(1 for v in run["versions"].values() if v > 0),
           "client_loop_lag": pct(run["lag"])}
    if args.fanout:
        out["fanout"] = asyncio.run(fanout(port, run["tokens"], run["versions"], cable,
                                           fabric_body))
    return out


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (the planner process), MiB."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def cpu_s(pid: int) -> float:
    """CPU time (user + system) used so far by a process and its children, seconds."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for t in os.listdir(f"/proc/{pid}/task")
                for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    except OSError:
        return []


def server_percentiles(metrics: dict) -> dict:
    """Upper bucket bounds of the controller's own request-time histogram at p50/p95/p99."""
    b = sorted((float(k.split('le="')[1].rstrip('"}')), v) for k, v in metrics.items()
               if k.startswith("ice_http_request_seconds_bucket") and "+Inf" not in k)
    total = metrics.get("ice_http_request_seconds_count", 0)
    out = {}
    for q in (50, 95, 99):
        le = next((ub for ub, c in b if c >= total * q / 100), float("inf"))
        out[f"p{q}_ms_at_most"] = le * 1e3
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--ramp", type=float, default=20.0, help="agents start within this many s")
    p.add_argument("--polls", type=int, default=3)
    p.add_argument("--poll-interval", type=float, default=10.0)
    p.add_argument("--debounce", type=float, default=2.0, help="ICE_PLAN_DEBOUNCE_S")
    p.add_argument("--no-fanout", dest="fanout", action="store_false")
    p.add_argument("--clients", type=int, default=1,
                   help="client processes the agents are split over")
    args = p.parse_args(argv)
    n = args.agents + args.agents % 2
    fabric = bench_fabric(n)
    reps = reports_for(fabric, np.random.default_rng(0))
    tmp = tempfile.mkdtemp(prefix="ice-bench-")
    env = {"ICE_DATABASE_URL": f"sqlite:///{tmp}/ice.db", "ICE_ADMIN_TOKEN": ADMIN,
           "ICE_POLICY": "ecmp", "ICE_PLAN_DEBOUNCE_S": str(args.debounce),
           "ICE_PLANNER_PROCESSES": "1", "ICE_LONG_POLL_MAX_S": "120",  # (the fan-out's 60 s)
           # every simulated agent enrols from 127.0.0.1: lift the per-address limit
           "ICE_ENROL_RATE_PER_S": "1000", "ICE_ENROL_BURST": "2000",
           "ICE_ADMIN_TOKEN_FILE": f"{tmp}/t", "PYTHONPATH": os.pathsep.join(sys.path)}
    ctl = SubprocessController(env)
    url = ctl.start()
    try:
        peak, stop = [0.0], threading.Event()

        def sample():  # the controller's resident memory (with its planner process)
            while not stop.wait(1.0):
                peak[0] = max(peak[0], rss_mb(ctl.proc.pid))

        threading.Thread(target=sample, daemon=True).start()
        t = time.perf_counter()
        body = FabricUpload(topology=fabric_to_dict(fabric)).model_dump_json().encode()
        r = httpx.put(f"{url}/v1/fabric", content=body, timeout=120, trust_env=False,
            headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        with httpx.Client(base_url=url, trust_env=False, timeout=120,
                          headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
            register_jobs(admin, {h: [rep] for h, rep in reps.items()})  # (the scheduler)
        upload_s = time.perf_counter() - t
        out = run_summary(args, int(url.rsplit(":", 1)[1]), reps, fabric_cables(fabric)[0],
                          body)
        out["fabric"] = {"servers": len(fabric.servers), "nodes": fabric.n_nodes,
                         "links": fabric.n_links, "upload_s": round(upload_s, 2)}
        m = httpx.get(f"{url}/metrics", trust_env=False).text
        out["metrics"] = {ln.split()[0]: float(ln.split()[1]) for ln in m.splitlines()
                          if ln.startswith(("ice_plans_total", "ice_http_request_seconds",
                                            "ice_replans_total",
                                            "ice_planning_seconds_sum",
                                            "ice_planning_seconds_count",
                                            "ice_agents_connected", "ice_plan_version"))}
        out["server_side"] = server_percentiles(out["metrics"])
        out["controller_rss_mb"] = {"end": round(rss_mb(ctl.proc.pid), 1),
                                    "peak": round(peak[0], 1)}
        stop.set()
    finally:
        ctl.stop()
    print(json.dumps(out, indent=1))
    print("\n| request | n | p50 ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|")
    for k in ("enrol", "report", "poll", "ack", "all"):
        if k in out:
            s = out[k]
            print(f"| {k} | {s['n']} | {s['p50_ms']} | {s['p95_ms']} | {s['p99_ms']} | "
                  f"{s['max_ms']} |")
    return out


if __name__ == "__main__":
    main()
