#!/usr/bin/env python3
"""Turns bench/run.sh's per-run TSV into the Markdown report.

usage: report.py HEADER.md RESULTS.tsv "ROW ROW ..." "PROXY PROXY ..."

Every column is the median over the runs of that (row, proxy), except "errors" and "other CPU %",
which are the worst run, so a single bad run is never hidden.
"""
import csv
import statistics
import sys


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, digits=0):
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def fmt_ms(v):
    if v is None:
        return "—"
    if v < 1:
        return f"{v * 1000:.0f} µs"
    if v < 100:
        return f"{v:.2f} ms"
    return f"{v:.0f} ms"


def main():
    header_path, tsv_path, rows_arg, proxies_arg = sys.argv[1:5]
    rows = rows_arg.split()
    proxies = proxies_arg.split()
    with open(tsv_path, newline="") as f:
        recs = list(csv.DictReader(f, delimiter="\t"))

    agg = {}
    for (row, proxy) in {(r["row"], r["proxy"]) for r in recs}:
        rs = [r for r in recs if r["row"] == row and r["proxy"] == proxy]
        errs = [(num(r["non2xx"]) or 0) + (num(r["sock_err"]) or 0) for r in rs]
        nan_runs = sum(1 for r in rs if num(r["req_s"]) is None)
        agg[(row, proxy)] = {
            "runs": len(rs),
            "failed_runs": nan_runs,
            "req_s": median([num(r["req_s"]) for r in rs]),
            "p99": median([num(r["p99_ms"]) for r in rs]),
            "errors": max(errs) if errs else None,
            "tw_up": median([num(r["tw_upstream"]) for r in rs]),
            "tw_total": median([num(r["tw_total"]) for r in rs]),
            "rss": median([num(r["rss_kib"]) for r in rs]),
            "cpu": median([num(r["cpu_us_per_req"]) for r in rs]),
            "ocpu": median([num(r["origin_cpu_us_per_req"]) for r in rs]),
            # Older results.tsv files have neither column.
            "gcpu": median([num(r.get("load_cpu_us_per_req")) for r in rs]),
            "mcpu": median([num(r.get("machine_cpu_us_per_req")) for r in rs]),
            "busy": median([num(r.get("proxy_cpu_pct")) for r in rs]),
            "cpu1": median([num(r.get("cpu1_us_per_req")) for r in rs]),
            "throttled": median([num(r.get("throttled_pct")) for r in rs]),
            "resumed": median([num(r.get("tls_resumed_pct")) for r in rs]),
            "other": max([v for v in (num(r.get("other_cpu_pct")) for r in rs) if v is not None], default=None),
        }

    # The throttled column exists only in runs with a CPU cap (bench/run.sh PROXY_CPU < 1).
    capped = any(a["throttled"] is not None for a in agg.values())
    # ...and "resumed %" only in runs with handshake rows (tls-full-*, tls-resume-*).
    handshakes = any(a["resumed"] is not None for a in agg.values())
    out = []
    with open(header_path) as f:
        out.append(f.read().rstrip("\n"))
    out.append("")
    out.append("| row | proxy | req/s | p99 | errors (non-2xx + socket) | TIME_WAIT upstream | TIME_WAIT total "
               "| RSS MiB | CPU µs/req | proxy CPU % | " + ("throttled % | " if capped else "") +
               "CPU 1 µs/req | origin µs/req | load µs/req | machine µs/req "
               "| req/s rpx/nginx | CPU/req rpx/nginx | machine/req rpx/nginx | req/s rpx/haproxy "
               "| other CPU % |" +
               (" TLS resumed % |" if handshakes else ""))
    out.append("|---|---|" + "---:|" * (17 + capped + handshakes))
    for row in rows:
        for proxy in proxies:
            a = agg.get((row, proxy))
            if a is None:
                continue
            ratio_rps = ratio_cpu = ratio_machine = ratio_hap = "—"
            if proxy == "rpx":
                n = agg.get((row, "nginx"))
                if n and a["req_s"] and n["req_s"]:
                    ratio_rps = f"{a['req_s'] / n['req_s']:.2f}"
                if n and a["cpu"] and n["cpu"]:
                    ratio_cpu = f"{a['cpu'] / n['cpu']:.2f}"
                if n and a["mcpu"] and n["mcpu"]:
                    ratio_machine = f"{a['mcpu'] / n['mcpu']:.2f}"
                h = agg.get((row, "haproxy"))
                if h and a["req_s"] and h["req_s"]:
                    ratio_hap = f"{a['req_s'] / h['req_s']:.2f}"
            label = "direct (origin)" if proxy == "direct" else proxy
            if a["failed_runs"]:
                label += f" ({a['failed_runs']}/{a['runs']} runs failed)"
            rss = None if a["rss"] is None else a["rss"] / 1024
            out.append(
                f"| {row} | {label} | {fmt(a['req_s'])} | {fmt_ms(a['p99'])} | {fmt(a['errors'])} "
                f"| {fmt(a['tw_up'])} | {fmt(a['tw_total'])} | {fmt(rss, 1)} | {fmt(a['cpu'], 1)} | {fmt(a['busy'])} "
                + (f"| {fmt(a['throttled'])} " if capped else "")
                + f"| {fmt(a['cpu1'], 1)} | {fmt(a['ocpu'], 1)} | {fmt(a['gcpu'], 1)} | {fmt(a['mcpu'], 1)} "
                f"| {ratio_rps} | {ratio_cpu} | {ratio_machine} | {ratio_hap} | {fmt(a['other'])} |"
                + (f" {fmt(a['resumed'], 1)} |" if handshakes else "")
            )
    out.append("")
    out.append("Medians over the runs (errors: worst run). TIME_WAIT = sockets that entered TIME_WAIT during "
               "the measured wrk run; \"upstream\" = those on the origin's port (proxy↔origin churn), "
               "\"total\" also counts client↔proxy sockets closed when wrk exits. RSS = VmRSS of the proxy's "
               "processes after the run; CPU µs/req = proxy utime+stime during the run / requests completed. "
               "CPU 1 µs/req = busy time of CPU 1 (wrk, the origin and the kernel work there) per request: "
               "when CPU 1 is full, req/s follows it. "
               "origin / load µs/req = CPU (utime+stime) of the origin / of the load generator (wrk, or "
               "bench/tls_handshakes) per request; machine µs/req = proxy + origin + load generator: what "
               "a request costs the whole machine, so a proxy that is cheap only by making its neighbours "
               "work shows here (machine/req rpx/nginx: lower is better). "
               "proxy CPU % = share of its CPU (CPU 0) the proxy used; well under 100 means the load "
               "generator side (wrk + origin on CPU 1) was the limit, so compare CPU µs/req rather than req/s. "
               "direct (origin) = wrk straight to the origin, no proxy, both on CPU 1: the ceiling that the "
               "load side puts on any proxy in the uncapped layout. "
               "Ratios compare rpx with the `nginx` row (lower CPU/req ratio is better) and, for req/s, "
               "with the `haproxy` row. "
               + ("throttled % = share of the proxy's CPU-quota periods in which it used up its quota "
                  "(near 100 = the cap, not CPU 1, limited req/s). " if capped else "") +
               "other CPU % = CPU used during the run by anything but the proxy, the origin and wrk, in % of "
               "one CPU (worst run); more than a few % means something else was running and the row is noisy."
               + (" TLS rows (tls-*, tls12-*): the proxy terminates TLS, the origin side is cleartext. On the "
                  "handshake rows (tls-full-*, tls-resume-*, tls12-*) every request is a new TLS connection "
                  "(bench/tls_handshakes; tls12-*: the client offers TLS 1.2 at most): req/s is handshakes/s and "
                  "CPU µs/req the proxy's CPU per handshake (with one 30 B request); TLS resumed % = share of "
                  "those handshakes that resumed a session (0 on full rows, ~100 on resume rows, as it should be)."
                  if any(r.startswith("tls") for r in rows) else ""))
    print("\n".join(out))


if __name__ == "__main__":
    main()
