#!/usr/bin/env python3
"""Per-request LoRA switching in `pocket serve`: throughput with two adapters loaded.

    python3 compare/serve_lora_bench.py --pocket target/release/pocket -m BASE.gguf \
        --lora A.gguf --lora B.gguf [-np 2] [-p 32] [-n 64] [-t 2] [-r 4]

One `pocket serve -m BASE --lora A --lora B -np S` is started (both adapters loaded), then
each round sends one batch of S concurrent `/completion` requests per mode, the three
modes back to back, their order rotated every round (so that drift in the machine's load
is shared):

- `none`: every request `"lora": []` (both adapters at 0: the base model),
- `A`:    every request `"lora": [{"id": 0, "scale": 1}]`,
- `A/B`:  requests alternate A and B (request i of the batch, and from one batch to the
          next with S = 1), so with S >= 2 rows of different adapters share each step.

Every request is greedy, `ignore_eos`, `cache_prompt: false` (each prefills its prompt),
and must return exactly -n tokens. Printed per round and mode: aggregate t/s (generated
tokens / wall time of the batch); then the median of the rounds, and the ratios A / none,
A/B / none, A/B / A within each round with their median. Python's standard library only; the server is killed on exit.
"""

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

# Text the prompt is cut from (the server's tokens, repeated to -p tokens).
PROMPT_TEXT = (
    "The history of the city begins with a small settlement on the river, where farmers "
    "and traders met to exchange grain, wool and tools. "
)


def post(port, path, body, timeout=600):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, server, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if server.poll() is not None:
            sys.exit(f"pocket serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("pocket serve did not become ready")


def adapters_of(mode, i):
    """The `lora` field of request i of a batch in `mode`."""
    a, b = [{"id": 0, "scale": 1.0}], [{"id": 1, "scale": 1.0}]
    if mode == "none":
        return []
    if mode == "A":
        return a
    return a if i % 2 == 0 else b


def batch(port, prompt, n_predict, streams, mode, first):
    """S concurrent requests; returns generated tokens / wall seconds."""
    results = [None] * streams
    errors = []

    def one(i):
        body = {
            "prompt": prompt,
            "n_predict": n_predict,
            "temperature": 0,
            "ignore_eos": True,
            "cache_prompt": False,
            "lora": adapters_of(mode, first + i),
        }
        try:
            results[i] = post(port, "/completion", body)
        except Exception as e:  # reported below, after every thread is done
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"request failed: {errors[0]}")
    for r in results:
        if r["tokens_predicted"] != n_predict:
            sys.exit(f"a request returned {r['tokens_predicted']} tokens, not {n_predict}")
    return streams * n_predict / wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pocket", default="target/release/pocket")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--lora", action="append", required=True, help="twice: A, then B")
    ap.add_argument("-np", "--parallel", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=32)
    ap.add_argument("-n", "--n-predict", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("-r", "--rounds", type=int, default=4)
    args = ap.parse_args()
    if len(args.lora) != 2:
        sys.exit("give exactly two adapters: --lora A --lora B")

    port = free_port()
    cmd = [args.pocket, "serve", "-m", args.model, "--port", str(port),
           "-c", str(args.ctx_size), "--parallel", str(args.parallel),
           "-t", str(args.threads), "--lora", args.lora[0], "--lora", args.lora[1]]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, server)
        ids = post(port, "/tokenize", {"content": PROMPT_TEXT, "add_special": False})["tokens"]
        prompt = [ids[i % len(ids)] for i in range(args.n_prompt)]
        modes = ["none", "A", "A/B"]
        # Warm-up: page faults, allocations, each adapter's first use.
        for m in modes:
            batch(port, prompt, 4, args.parallel, m, 0)
        tps = {m: [] for m in modes}
        sent = {m: 0 for m in modes}
        for r in range(args.rounds):
            order = modes[r % 3:] + modes[:r % 3]
            line = []
            for m in order:
                v = batch(port, prompt, args.n_predict, args.parallel, m, sent[m])
                sent[m] += args.parallel
                tps[m].append(v)
                line.append(f"{m} {v:.1f}")
            print(f"round {r + 1}: " + ", ".join(line) + " t/s", flush=True)
        med = {m: statistics.median(v) for m, v in tps.items()}
        print(f"median t/s ({args.rounds} rounds, -np {args.parallel} -p {args.n_prompt} "
              f"-n {args.n_predict} -t {args.threads}): "
              + ", ".join(f"{m} {v:.1f}" for m, v in med.items()))
        # Ratios within each round (back to back), then their median.
        for num, den in [("A", "none"), ("A/B", "none"), ("A/B", "A")]:
            rs = [x / y for x, y in zip(tps[num], tps[den])]
            print(f"{num} / {den}: median {statistics.median(rs):.3f} "
                  f"(rounds {', '.join(f'{x:.3f}' for x in rs)})")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
