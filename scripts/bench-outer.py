#!/usr/bin/env python3
"""The outer DAG at Buffalo's shape, measured on a running dagr (issue 13).

Generates WORKFLOWS workflows in LAYERS layers with ~EDGES workflow-level
edges of mixed kinds (same cycle, offset -1h/-1d, every hour of the day),
one daily cycle each plus 24 hourly cycles for a tenth of them, and:

1. applies every definition (timed, one after another, over one connection);
2. creates every instance that has an upstream first: they wait, with their
   roots missing; then RSS of the dagr processes and the database's size,
   per waiting run;
3. creates the roots' instances and lets the cascade run to its end: the
   dagr processes' CPU time per resolved (instance-level) edge, against the
   CPU time of as many runs without edges (a control phase run first);
   With --kill-first (a cluster), the first of --pids (a master) is
   killed with SIGKILL once every instance waits, before the roots are
   made: the survivors take its slots and judge again every instance
   waiting in them (one `wake` command each). Measured: from the kill to
   the first and to the last of those wakes carried out, how many, the
   survivors' CPU meanwhile, and the end-to-end time of trivial runs
   triggered every 0.25 s through it (a stall shows there). The cascade
   then runs on the survivors;
4. from the store (not the client): per released run, the time from the end
   of its last upstream instance (runs.finished_at over run_links) to its
   release (the run.released event) and to its first attempt's dispatch
   (attempts.started_at), and from the release to that dispatch,
   p50/p90/p99/max; how many steps released runs (an event's time is its
   step's) and how many the largest released.

Used by scripts/bench-outer.sh (one `dagr serve`, or a 3-master cluster);
see docs/BENCHMARKS.md. Needs only the standard library (and `psql` for
PostgreSQL).
"""

import argparse
import http.client
import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse

DAY = "2026-01-01"
START = DAY + "T00:00:00Z"
# The schedules cover the days --waiting-days may create instances for.
END = "2026-01-31T23:59:59Z"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Api:
    def __init__(self, url, token):
        u = urllib.parse.urlparse(url)
        self.host, self.port, self.token = u.hostname, u.port, token
        self.conn = None

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body)
        headers = {"Authorization": "Bearer " + self.token, "content-type": "application/json"}
        for attempt in range(5):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
                self.conn.request(method, path, data, headers)
                r = self.conn.getresponse()
                text = r.read()
                if r.status >= 300:
                    raise RuntimeError(f"{method} {path}: {r.status} {text[:300]!r}")
                return json.loads(text) if text else None
            except (ConnectionError, http.client.HTTPException, OSError):
                self.conn = None
                if attempt == 4:
                    raise
                time.sleep(0.2)


class Db:
    def __init__(self, sqlite_path=None, postgres_url=None):
        self.sqlite_path, self.postgres_url = sqlite_path, postgres_url

    def rows(self, sql):
        if self.sqlite_path:
            con = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=60)
            try:
                return con.execute(sql).fetchall()
            finally:
                con.close()
        out = subprocess.run(
            ["psql", self.postgres_url, "-At", "-F", "\t", "-c", sql], check=True, capture_output=True, text=True
        ).stdout
        return [tuple(None if c == "" else c for c in line.split("\t")) for line in out.splitlines() if line]

    def one(self, sql):
        return self.rows(sql)[0][0]

    def size(self):
        if self.sqlite_path:
            return sum(os.path.getsize(self.sqlite_path + s) for s in ("", "-wal") if os.path.exists(self.sqlite_path + s))
        return int(self.one("SELECT pg_database_size(current_database())"))


def proc_cpu_s(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def proc_rss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def generate(n, edges, layers, seed):
    """Workflow definitions and their kinds: a layered outer DAG."""
    rng = random.Random(seed)
    per_layer = n // layers
    names = [[f"o{l:02d}-{i:05d}" for i in range(per_layer)] for l in range(layers)]
    # A tenth are hourly: 40%, 30%, 30% of them in the three lowest layers.
    hourly_total = n // 10
    quota = [hourly_total * 4 // 10, hourly_total * 3 // 10]
    quota.append(hourly_total - sum(quota))
    hourly = set()
    for l, q in enumerate(quota[: layers]):
        hourly.update(names[l][: min(q, per_layer)])
    non_roots = n - per_layer
    per = edges / max(non_roots, 1)
    kinds = {"same": 0, "offset": 0, "period": 0}
    defs = []
    for l in range(layers):
        for name in names[l]:
            is_hourly = name in hourly
            wf = {
                "name": name,
                "schedule": {"cron": "0 * * * *" if is_hourly else "0 0 * * *", "start": START, "end": END},
                "tasks": [{"name": "t", "plugin": "echo"}],
            }
            if l > 0:
                k = max(1, int(round(rng.gauss(per, 2))))
                ups = set()
                while len(ups) < k:
                    src = l - 1 if rng.random() < 0.7 else rng.randrange(l)
                    ups.add(rng.choice(names[src]))
                deps = []
                for up in sorted(ups):
                    up_hourly = up in hourly
                    r = rng.random()
                    if is_hourly:
                        if up_hourly and r < 0.2:
                            deps.append({"workflow": up, "offset": "-1h"})
                            kinds["offset"] += 1
                        else:
                            deps.append({"workflow": up})
                            kinds["same"] += 1
                    elif up_hourly:
                        deps.append({"workflow": up, "cycles": "day"})
                        kinds["period"] += 1
                    elif r < 0.15:
                        deps.append({"workflow": up, "offset": "-1d"})
                        kinds["offset"] += 1
                    else:
                        deps.append({"workflow": up})
                        kinds["same"] += 1
                wf["upstream"] = deps
            defs.append((l, is_hourly, wf))
    return defs, kinds


def instances(defs, roots, day=DAY):
    out = []
    for l, is_hourly, wf in defs:
        if (l == 0) != roots:
            continue
        times = [f"{day}T{h:02d}:00:00Z" for h in range(24)] if is_hourly else [f"{day}T00:00:00Z"]
        out.extend((wf["name"], t) for t in times)
    return out


def trigger_all(url, token, pairs, threads):
    trigger_planned(url, token, [(0, name, at) for name, at in pairs], threads)


def trigger_planned(url, token, plan, threads):
    """Makes a run for each (due, workflow, logical time) of `plan` once
    `due` seconds have passed, over `threads` connections."""
    start = time.time()
    chunks = [plan[i::threads] for i in range(threads)]
    errors = []

    def work(chunk):
        api = Api(url, token)
        try:
            for due, name, at in chunk:
                wait = start + due - time.time()
                if wait > 0:
                    time.sleep(wait)
                api.call("POST", f"/v1/workflows/{name}/runs", {"logical_time": at})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def trigger_paced(url, token, roots, seconds_per_hour, threads):
    """Each root when its time in the compressed day comes: an hourly root at
    its hour, the daily roots (all at 00:00 in the generator) spread evenly
    over the day, as a day's batches are in practice."""
    hourly_names = {n for n, t in roots if not t.endswith("T00:00:00Z")}
    daily = [(n, t) for n, t in roots if n not in hourly_names]
    plan = [(int(at[11:13]) * seconds_per_hour, name, at) for name, at in roots if name in hourly_names]
    for i, (name, at) in enumerate(daily):
        plan.append((i * 24 * seconds_per_hour / max(len(daily), 1), name, at))
    plan.sort()
    trigger_planned(url, token, plan, threads)


def wait_for(what, check, timeout):
    deadline = time.time() + timeout
    while True:
        done, status = check()
        if done:
            return
        if time.time() > deadline:
            raise RuntimeError(f"timed out waiting for {what}: {status}")
        time.sleep(0.5)


def takeover(a, db, pids):
    """Kills the first of `pids` (a master) and measures how the others take
    its waiting instances over (see the module's docstring)."""
    out = {}
    survivors = pids[1:]
    cpu0 = proc_cpu_s(survivors)
    killed_ms = int(time.time() * 1000)
    os.kill(pids[0], 9)
    t0 = time.time()
    probes, stop = [], threading.Event()

    def probe():
        api = Api(a.url, a.token)
        while not stop.is_set():
            run = api.call("POST", "/v1/workflows/control/runs", {})
            probes.append(run["id"])
            time.sleep(0.25)

    prober = threading.Thread(target=probe)
    prober.start()
    wakes = f"FROM commands WHERE kind = 'wake' AND created_at >= {killed_ms}"
    seen = {"n": -1, "since": time.time()}

    def settled():
        n, done = (int(x or 0) for x in db.rows(f"SELECT count(*), count(done_at) {wakes}")[0])
        if n != seen["n"]:
            seen["n"], seen["since"] = n, time.time()
        # Carried out, and no new one for 5 s.
        return n > 0 and done == n and time.time() - seen["since"] > 5, f"{done} of {n} wakes carried out"

    try:
        wait_for("the takeover's wakes", settled, a.timeout)
    finally:
        stop.set()
        prober.join()
    first_created, first_done, last_done, n = db.rows(f"SELECT min(created_at), min(done_at), max(done_at), count(*) {wakes}")[0]
    out["takeover_wakes"] = int(n)
    out["takeover_first_wake_written_s"] = round((int(first_created) - killed_ms) / 1000, 2)
    out["takeover_first_wake_done_s"] = round((int(first_done) - killed_ms) / 1000, 2)
    out["takeover_last_wake_done_s"] = round((int(last_done) - killed_ms) / 1000, 2)
    out["takeover_wakes_per_s"] = round(int(n) / max((int(last_done) - int(first_created)) / 1000, 0.001))
    out["takeover_survivors_cpu_s"] = round(proc_cpu_s(survivors) - cpu0, 1)
    out["takeover_measured_s"] = round(time.time() - t0, 1)

    def probes_done():
        ids = ",".join(f"'{i}'" for i in probes)
        n = int(db.one(f"SELECT count(*) FROM runs WHERE id IN ({ids}) AND finished_at IS NOT NULL"))
        return n == len(probes), f"{n} of {len(probes)} probe runs finished"

    wait_for("the probe runs", probes_done, a.timeout)
    ids = ",".join(f"'{i}'" for i in probes)
    rows = db.rows(f"SELECT created_at, finished_at - created_at FROM runs WHERE id IN ({ids})")
    # All of them (those in the killed master's slots wait for its lease to
    # run out), and those made once the wakes began (what the wakes cost
    # the survivors' other work).
    for label, lat in (
        ("probe", [int(r[1]) for r in rows]),
        ("probe_during_wakes", [int(r[1]) for r in rows if int(r[0]) >= int(first_created)]),
    ):
        out[f"{label}_runs"] = len(lat)
        for q in (50, 99):
            out[f"{label}_ms_p{q}"] = pct(lat, q)
        out[f"{label}_ms_max"] = max(lat) if lat else None
    log("takeover", out)
    return out


def pct(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--sqlite")
    ap.add_argument("--postgres")
    ap.add_argument("--pids", required=True, help="comma-separated pids of the dagr processes to measure")
    ap.add_argument("--workflows", type=int, default=10_000)
    ap.add_argument("--edges", type=int, default=100_000)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=4, help="clients creating runs at once")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument(
        "--pace-hour",
        type=float,
        default=0,
        help="seconds per hour of the compressed day: each hourly root is triggered at its hour, the daily "
        "roots spread evenly over the day (0: every root at once)",
    )
    ap.add_argument(
        "--waiting-days",
        type=int,
        default=1,
        help="days of waiting instances to create (RSS measured after each); above 1 the cascade is skipped",
    )
    ap.add_argument(
        "--kill-first",
        action="store_true",
        help="kill -9 the first of --pids (a master) once every instance waits, and measure the takeover",
    )
    ap.add_argument("--skip-cascade", action="store_true", help="with --kill-first: stop after the takeover")
    a = ap.parse_args()
    db = Db(a.sqlite, a.postgres)
    pids = [int(p) for p in a.pids.split(",")]
    api = Api(a.url, a.token)
    result = {}

    defs, kinds = generate(a.workflows, a.edges, a.layers, a.seed)
    result["workflows"] = len(defs)
    result["hourly_workflows"] = sum(1 for _, h, _ in defs if h)
    result["workflow_edges"] = sum(kinds.values())
    result["edge_kinds"] = kinds
    log("generated", result)

    # 0. Control: as many runs as the cascade makes, without edges.
    roots = instances(defs, True)
    downstream = instances(defs, False)
    total_runs = len(roots) + len(downstream)
    control_n = min(total_runs, 5_000)
    api.call("POST", "/v1/workflows", {"name": "control", "tasks": [{"name": "t", "plugin": "echo"}]})
    cpu0 = proc_cpu_s(pids)
    t0 = time.time()
    trigger_all(a.url, a.token, [("control", None)] * control_n, a.threads)

    def control_done():
        n = int(db.one("SELECT count(*) FROM runs WHERE workflow = 'control' AND state = 'succeeded'"))
        return n == control_n, n

    wait_for("the control runs", control_done, a.timeout)
    result["control_runs"] = control_n
    result["control_cpu_ms_per_run"] = round((proc_cpu_s(pids) - cpu0) * 1000 / control_n, 3)
    result["control_wall_s"] = round(time.time() - t0, 1)
    log("control", result["control_cpu_ms_per_run"], "ms CPU per run")

    # 1. Apply.
    cpu0 = proc_cpu_s(pids)
    t0 = time.time()
    lat = []
    for i, (_, _, wf) in enumerate(defs):
        s = time.time()
        api.call("POST", "/v1/workflows", wf)
        lat.append(time.time() - s)
        if i % 1000 == 999:
            log(f"applied {i + 1} in {time.time() - t0:.1f}s")
    result["apply_s"] = round(time.time() - t0, 1)
    result["apply_ms_p50"] = round(pct(lat, 50) * 1000, 2)
    result["apply_ms_p99"] = round(pct(lat, 99) * 1000, 2)
    result["apply_ms_max"] = round(max(lat) * 1000, 2)
    result["apply_cpu_s"] = round(proc_cpu_s(pids) - cpu0, 1)
    log("apply", result["apply_s"], "s")

    # 2. Waiting instances, a day at a time. The first day's RSS includes
    # what does not grow with instances (each workflow's validated version,
    # loaded at its first run; the page caches filling up); a later day's is
    # the cost of one more waiting instance with those warm.
    result["rss_bytes_per_waiting_run_by_day"] = []
    for d in range(a.waiting_days):
        day = f"2026-01-{d + 1:02d}"
        batch = instances(defs, False, day)
        time.sleep(2)
        rss0, size0 = proc_rss_kib(pids), db.size()
        t0 = time.time()
        trigger_all(a.url, a.token, batch, a.threads)
        if d == 0:
            result["create_waiting_s"] = round(time.time() - t0, 1)

        def parked():
            # Every instance made, none waiting without its waits recorded
            # (a few may have been released already: offsets into the day
            # before).
            made = int(db.one("SELECT count(*) FROM runs WHERE workflow LIKE 'o%'"))
            unparked = int(
                db.one(
                    "SELECT count(*) FROM runs WHERE workflow LIKE 'o%' AND state = 'waiting' "
                    "AND NOT EXISTS (SELECT 1 FROM run_waits w WHERE w.run_id = runs.id)"
                )
            )
            pending = int(db.one("SELECT count(*) FROM commands WHERE done_at IS NULL"))
            want = len(batch) * (d + 1)
            return made >= want and unparked == 0 and pending == 0, (made, unparked, pending)

        wait_for("every downstream instance to wait", parked, a.timeout)
        if d == 0:
            result["parked_s"] = round(time.time() - t0, 1)
        time.sleep(2)
        rss1, size1 = proc_rss_kib(pids), db.size()
        n = len(batch)
        per_run = round((rss1 - rss0) * 1024 / n)
        result["rss_bytes_per_waiting_run_by_day"].append(per_run)
        if d == 0:
            result["waiting_runs"] = n
            result["rss_bytes_per_waiting_run"] = per_run
            result["db_bytes_per_waiting_run"] = round((size1 - size0) / n)
        log(f"day {d + 1}: {n} instances, {per_run} bytes of RSS each, RSS {rss1} KiB")
    result["run_waits_rows"] = int(db.one("SELECT count(*) FROM run_waits"))
    result["waiting_at_rest"] = int(db.one("SELECT count(*) FROM runs WHERE state = 'waiting'"))
    log("waiting", result)
    if a.waiting_days > 1:
        print(json.dumps(result, indent=1))
        return

    if a.kill_first:
        result.update(takeover(a, db, pids))
        pids = pids[1:]
        if a.skip_cascade:
            print(json.dumps(result, indent=1))
            return

    # 3. The cascade: every root at once, or paced over a compressed day.
    cpu0 = proc_cpu_s(pids)
    t0 = time.time()
    if a.pace_hour > 0:
        trigger_paced(a.url, a.token, roots, a.pace_hour, a.threads)
    else:
        trigger_all(a.url, a.token, roots, a.threads)

    def all_done():
        done = int(
            db.one(
                "SELECT count(*) FROM runs WHERE workflow LIKE 'o%' AND state IN ('succeeded', 'failed', 'killed')"
            )
        )
        return done == total_runs, f"{done} of {total_runs} runs finished"

    wait_for("the cascade", all_done, a.timeout)
    cascade_cpu = proc_cpu_s(pids) - cpu0
    result["cascade_wall_s"] = round(time.time() - t0, 1)
    result["cascade_runs"] = total_runs
    result["failed_runs"] = int(db.one("SELECT count(*) FROM runs WHERE workflow LIKE 'o%' AND state <> 'succeeded'"))
    links = int(db.one("SELECT count(*) FROM run_links"))
    result["resolved_instance_edges"] = links
    result["cascade_cpu_s"] = round(cascade_cpu, 1)
    result["cpu_us_per_edge_gross"] = round(cascade_cpu * 1e6 / links, 1)
    net = cascade_cpu - total_runs * result["control_cpu_ms_per_run"] / 1000
    result["cpu_us_per_edge_net"] = round(net * 1e6 / links, 1)
    log("cascade", result["cascade_wall_s"], "s")

    # 4. Resolution latency, from the store.
    rows = db.rows(
        "WITH up AS (SELECT l.downstream AS run_id, max(u.finished_at) AS last_up FROM run_links l "
        "JOIN runs u ON u.id = l.upstream GROUP BY l.downstream), "
        "rel AS (SELECT run_id, min(at) AS released FROM events WHERE kind = 'run.released' GROUP BY run_id), "
        "first AS (SELECT run_id, min(started_at) AS dispatched FROM attempts GROUP BY run_id) "
        "SELECT rel.released - up.last_up, first.dispatched - up.last_up, rel.released FROM up "
        "JOIN rel ON rel.run_id = up.run_id JOIN first ON first.run_id = up.run_id"
    )
    release = [int(r[0]) for r in rows]
    dispatch = [int(r[1]) for r in rows]
    # From the release to the first dispatch (the same step, or later ones
    # when the step's budget of task changes was spent).
    after_release = [int(r[1]) - int(r[0]) for r in rows]
    result["released_runs_measured"] = len(rows)
    for label, values in (("release", release), ("dispatch", dispatch), ("release_to_dispatch", after_release)):
        for p in (50, 90, 99):
            result[f"{label}_ms_p{p}"] = pct(values, p)
        result[f"{label}_ms_max"] = max(values) if values else None
    # Releases come in steps (an event's time is its step's): how many, and
    # the largest.
    steps = {}
    for r in rows:
        steps[int(r[2])] = steps.get(int(r[2]), 0) + 1
    result["release_steps"] = len(steps)
    result["releases_in_largest_step"] = max(steps.values()) if steps else 0
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
