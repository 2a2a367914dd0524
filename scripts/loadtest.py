"""Load test against a capplan server on loopback only: N concurrent keep-alive clients for a bounded time.

    python scripts/loadtest.py [--url http://127.0.0.1:8765] [--seconds 20] [--concurrency 32] [--workers 2]

Starts `uvicorn app.main:create_app --factory --workers W` on a free loopback port (unless --url is given),
then drives three request kinds — POST /api/v1/estimate (most), POST /api/v1/plans/search (a small space),
GET /catalog/accelerators (a page) — and prints requests/s, p50/p95/p99 latency and errors per kind.
Raw asyncio HTTP/1.1 keeps the client's own CPU use low; every target must be a loopback address.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import defaultdict

ESTIMATES = [
    {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 8, "global_batch": 16, "micro_batch": 2, "seq_len": 8192},
    {"model": "llama3.1-70b", "gpu": "h100-sxm", "gpus": 64, "tp": 8, "global_batch": 64, "seq_len": 8192,
     "recompute": "full"},
    {"model": "gpt3-175b", "gpu": "a100-80gb", "gpus": 768, "tp": 8, "pp": 8, "global_batch": 1536, "seq_len": 2048,
     "framework": "megatron", "sharding": "ddp", "recompute": "full", "flash_attention": False},
]  # fmt: skip
SEARCH = {"model": "llama3.1-8b", "gpu": "h100-sxm", "gpus": 16, "global_batch": 32, "seq_len": 4096,
          "micro_batches": [1, 2], "vpps": [1], "cps": [1]}  # fmt: skip
MIX = [("estimate", 90), ("page", 8), ("search", 2)]


def _request(kind: str, host: str) -> bytes:
    if kind == "page":
        return f"GET /catalog/accelerators HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    body = json.dumps(random.choice(ESTIMATES) if kind == "estimate" else SEARCH).encode()
    path = "/api/v1/estimate" if kind == "estimate" else "/api/v1/plans/search"
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")  # fmt: skip
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    length, chunked = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
        elif name.lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readline()).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        await reader.readexactly(length)
    return status


async def _client(host: str, port: int, deadline: float, results: dict) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    kinds = [k for k, w in MIX for _ in range(w)]
    try:
        while time.perf_counter() < deadline:
            kind = random.choice(kinds)
            start = time.perf_counter()
            writer.write(_request(kind, host))
            try:
                status = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError, ValueError):
                results[kind].append((time.perf_counter() - start, 599))
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            results[kind].append((time.perf_counter() - start, status))
    finally:
        writer.close()


def _percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_server(workers: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {
        **os.environ,
        "CAPPLAN_DATABASE_URL": f"sqlite:///{tempfile.mkdtemp()}/load.db",
        "CAPPLAN_LOG_LEVEL": "WARNING",
    }
    subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "upgrade"], env=env, check=True, capture_output=True
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--host", "127.0.0.1",
         "--port", str(port), "--workers", str(workers), "--log-level", "warning", "--no-access-log"],
        env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not 0 < args.seconds <= 600 or not 0 < args.concurrency <= 512:
        raise SystemExit("bounded runs only: 0 < seconds <= 600, 0 < concurrency <= 512")
    proc = None
    url = args.url
    if url is None:
        proc, url = _start_server(args.workers)
    parsed = urllib.parse.urlparse(url)
    host = parsed.hostname or "127.0.0.1"
    if not ipaddress.ip_address(socket.gethostbyname(host)).is_loopback:
        raise SystemExit(f"refusing to load-test {host}: loopback addresses only")
    try:
        results: dict[str, list[tuple[float, int]]] = defaultdict(list)
        for _ in range(3):  # warm-up: imports, caches
            urllib.request.urlopen(urllib.request.Request(url + "/api/v1/estimate", data=json.dumps(ESTIMATES[0]).encode(),
                                                          headers={"Content-Type": "application/json"})).read()  # fmt: skip
        start = time.perf_counter()
        deadline = start + args.seconds

        async def run() -> None:
            await asyncio.gather(
                *(_client(host, parsed.port or 80, deadline, results) for _ in range(args.concurrency))
            )

        asyncio.run(run())
        wall = time.perf_counter() - start
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)
    print(f"capplan load test {time.strftime('%Y-%m-%d')}: {args.concurrency} clients, {wall:.1f} s, "
          f"{args.workers if proc else '?'} workers, {os.cpu_count()} CPUs")  # fmt: skip
    print(
        f"{'kind':10s} {'requests':>9s} {'req/s':>8s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s} {'errors':>7s}"
    )
    total_errors = 0
    for kind, rows in sorted(results.items()):
        latencies = [t * 1000 for t, _ in rows]
        errors = sum(1 for _, s in rows if s >= 400)
        total_errors += errors
        print(f"{kind:10s} {len(rows):9d} {len(rows) / wall:8.1f} {_percentile(latencies, 50):8.1f} "
              f"{_percentile(latencies, 95):8.1f} {_percentile(latencies, 99):8.1f} {errors:7d}")  # fmt: skip
    everything = [t for rows in results.values() for t, _ in rows]
    print(f"{'all':10s} {len(everything):9d} {len(everything) / wall:8.1f} {_percentile([t * 1000 for t in everything], 50):8.1f} "
          f"{_percentile([t * 1000 for t in everything], 95):8.1f} {_percentile([t * 1000 for t in everything], 99):8.1f} "
          f"{total_errors:7d}")  # fmt: skip
    sys.exit(1 if total_errors else 0)


if __name__ == "__main__":
    main()
