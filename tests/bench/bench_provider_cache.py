"""Provider cache (issue 16), with the real `terraform init`, a fake registry over HTTPS (signed SHA256SUMS) and the
datastore's mirror:

1. upstream bytes for 100 inits (10 layers x 10 rounds) of 3 shared providers, through the mirror vs straight from
   the registry (target ratio <= 0.01);
2. warm-mirror `init` time vs an `init` from a pre-filled local filesystem mirror (the packed layout),
   alternating, medians (target <= 1.3x, issue 31);
3. where a warm init's extra time goes: one archive (SIZE) fetched with curl over the datastore's HTTPS listener
   and over its plain HTTP one (the same app), alternating, medians: what Python's TLS costs per archive;
4. the floor of any network mirror: the same packages as static files (index.json, <version>.json with their zh:
   hashes, the archives) served over HTTPS by Go's net/http (`static_server/`, standard library only, built with
   the `go` on PATH and cached; left out without Go), alternating with the two above. Terraform downloads a
   network mirror's archive to a temporary file, checks it and unpacks it; from a filesystem mirror it unpacks in
   place, so no network mirror reaches the local one's time;
5. the prefetch (issue 31 item 3; the runner's is built, §10.5): the locked archives fetched before `init` in parallel
   by Python's standard library (one keep-alive connection per provider: its version document, then its archive)
   from the datastore's mirror and, as a floor, from the Go server, written as a packed filesystem mirror, then
   `init` from it with the lock file; against the local mirror's `init` with the same lock file, alternating.
   Prefetch and `init` are printed apart. Also what the runner does (runner/mirror.py): each archive in one request
   to the datastore's token route (`packages/…`) over its plain HTTP listener, the three in parallel, then `init`
   with the CLI configuration the runner writes (the filesystem mirror `include`s exactly them, the network
   mirror `exclude`s them); and, in the same rounds, today's way for a layer with a lock file (the warm HTTPS
   network mirror alone) against the same local `init`.

    python3 -m tests.bench.bench_provider_cache [SIZE_MIB] [ROUNDS] [--prefetch-only]

`--prefetch-only` leaves out parts 1-4 (part 1's hundreds of inits) and measures part 5's pairs alone.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from hashlib import sha256
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.runner.mirror import LockedProvider, cli_config, prefetch_candidates
from burrito_py.runner.mirror import prefetch as runner_prefetch
from tests.bench.static_server import running_static_server
from tests.support.fakes.registry import running_upstream
from tests.support.fakes.tls import make_tls

ONLY_PREFETCH = "--prefetch-only" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--prefetch-only"]
SIZE = int(float(ARGS[0]) * 1024 * 1024) if ARGS else 8 * 1024 * 1024
ROUNDS = int(ARGS[1]) if len(ARGS) > 1 else 10
TYPES = ("alpha", "beta", "gamma")
REGISTRY = "registry.example.test"


def layer(directory: Path, host: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    required = "\n".join(f'    {t} = {{ source = "{host}/test/{t}", version = "1.0.0" }}' for t in TYPES)
    (directory / "main.tf").write_text(f"terraform {{\n  required_providers {{\n{required}\n  }}\n}}\n")
    return directory


@contextmanager
def datastore_process(data_dir: Path, **settings: Any) -> Iterator[str]:
    """The datastore in a process of its own, as in a cluster (its own pod): in this one, its event loop and the
    prefetch's threads (the runner's, in its own pod too) would take turns on one interpreter lock."""
    context = multiprocessing.get_context("fork")
    urls: Any = context.SimpleQueue()
    stop = context.Event()

    def serve() -> None:
        with running_datastore(data_dir, **settings) as url:
            urls.put(url)
            stop.wait()

    process = context.Process(target=serve, daemon=True)
    process.start()
    try:
        yield urls.get()
    finally:
        stop.set()
        process.join(30)
        if process.is_alive():
            process.kill()


def init(directory: Path, config: Path, ca: Path, lock: str | None = None) -> float:
    for leftover in (directory / ".terraform", directory / ".terraform.lock.hcl"):
        shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
    if lock is not None:
        (directory / ".terraform.lock.hcl").write_text(lock)
    env = {**os.environ, "TF_CLI_CONFIG_FILE": str(config), "SSL_CERT_FILE": str(ca), "CHECKPOINT_DISABLE": "1"}
    env.pop("TF_PLUGIN_CACHE_DIR", None)
    started = time.perf_counter()
    result = subprocess.run(["terraform", "init", "-input=false", "-no-color"], cwd=directory, env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-provider-cache-") as tmp:
        root = Path(tmp)
        tls = make_tls(root / "tls")
        with running_upstream(tls) as (upstream, served_at):
            for type_ in TYPES:
                upstream.publish("test", type_, "1.0.0", size=SIZE)
            direct_config = root / "direct.tfrc"
            direct_config.write_text("")
            layers = [layer(root / "direct" / f"layer-{i}", served_at) for i in range(10)]
            for _ in range(0 if ONLY_PREFETCH else ROUNDS):
                for directory in layers:
                    init(directory, direct_config, tls.ca)
            direct_bytes = upstream.bytes_sent

            port = free_port()
            upstream.bytes_sent = 0
            with datastore_process(root / "datastore", tls_port=port, tls_cert_file=tls.cert, tls_key_file=tls.key,
                                   provider_cache_enabled=True, provider_cache_registries=[],
                                   provider_cache_registry_urls={REGISTRY: f"https://{served_at}"},
                                   upstream_ca_file=tls.ca) as plain_url:
                mirror_config = root / "mirror.tfrc"
                mirror_config.write_text('provider_installation {\n  network_mirror {\n'
                                         f'    url = "https://127.0.0.1:{port}/providers/v1/"\n  }}\n}}\n')
                cached = [layer(root / "cached" / f"layer-{i}", REGISTRY) for i in range(10)]
                for _ in range(0 if ONLY_PREFETCH else ROUNDS):
                    for directory in cached:
                        init(directory, mirror_config, tls.ca)
                cached_bytes = upstream.bytes_sent

                # A pre-filled filesystem mirror of the same packages (the "packed" layout `terraform providers
                # mirror` writes), then alternate the two ways.
                filesystem = root / "fs-mirror"
                for type_ in TYPES:
                    target = filesystem / REGISTRY / "test" / type_
                    target.mkdir(parents=True)
                    name = upstream.archive_name(type_, "1.0.0", "linux_amd64")
                    (target / name).write_bytes(upstream.providers[("test", type_)]["1.0.0"]["linux_amd64"])
                fs_config = root / "fs.tfrc"
                fs_config.write_text(f'provider_installation {{\n  filesystem_mirror {{\n    path = "{filesystem}"\n'
                                     "  }\n}\n")
                fs_layer = layer(root / "fs-layer", REGISTRY)
                static = root / "static-mirror"
                for type_ in TYPES:
                    target = static / REGISTRY / "test" / type_
                    target.mkdir(parents=True)
                    name = upstream.archive_name(type_, "1.0.0", "linux_amd64")
                    data = upstream.providers[("test", type_)]["1.0.0"]["linux_amd64"]
                    (target / name).write_bytes(data)
                    (target / "index.json").write_text(json.dumps({"versions": {"1.0.0": {}}}))
                    (target / "1.0.0.json").write_text(json.dumps({"archives": {"linux_amd64": {
                        "url": name, "hashes": [f"zh:{sha256(data).hexdigest()}"]}}}))
                static_layer = layer(root / "static-layer", REGISTRY)
                warm, local, floor = [], [], []
                init(cached[1], mirror_config, tls.ca)
                lock = (cached[1] / ".terraform.lock.hcl").read_text()
                prefetched = root / "prefetched"
                prefetch_config = root / "prefetch.tfrc"
                prefetch_config.write_text(
                    f'provider_installation {{\n  filesystem_mirror {{\n    path = "{prefetched}"\n'
                    f'    include = ["{REGISTRY}/test/*"]\n  }}\n  network_mirror {{\n'
                    f'    url = "https://127.0.0.1:{port}/providers/v1/"\n    exclude = ["{REGISTRY}/test/*"]\n'
                    "  }\n}\n")
                context = ssl.create_default_context(cafile=str(tls.ca))
                local_locked, fetched, fetched_init, fetched_floor = [], [], [], []
                # The runner's way: the token route over plain HTTP, its own CLI configuration.
                plain_dir = root / "prefetched-plain"
                providers = prefetch_candidates(lock, ())
                assert len(providers) == len(TYPES), lock
                plain_config = root / "prefetch-plain.tfrc"
                plain_config.write_text(cli_config(f"https://127.0.0.1:{port}/providers/v1/", f"127.0.0.1:{port}",
                                                   None, prefetch_dir=str(plain_dir),
                                                   prefetched=[p.address for p in providers]))
                plain_fetched, plain_init, plain_local, today = [], [], [], []
                # The same requests as over HTTPS (version document, then the signed archive URL) on the plain
                # listener: the bench has no token, and in a cluster this would put signed URLs in clear.
                signed_dir = root / "prefetched-signed-plain"
                signed_config = root / "prefetch-signed-plain.tfrc"
                signed_config.write_text(prefetch_config.read_text().replace(str(prefetched), str(signed_dir)))
                signed_fetched, signed_init = [], []
                with running_static_server(static, (tls.cert, tls.key)) as static_url:
                    static_config = root / "static.tfrc"
                    static_config.write_text('provider_installation {\n  network_mirror {\n'
                                             f'    url = "{static_url}"\n  }}\n}}\n')
                    for _ in range(ROUNDS):
                        plain_local.append(init(fs_layer, fs_config, tls.ca, lock))
                        plain_fetched.append(prefetch_plain(plain_url, providers, plain_dir))
                        plain_init.append(init(cached[2], plain_config, tls.ca, lock))
                        today.append(init(cached[4], mirror_config, tls.ca, lock))  # without the prefetch
                        local_locked.append(init(fs_layer, fs_config, tls.ca, lock))
                        fetched.append(prefetch(f"https://127.0.0.1:{port}/providers/v1/", context, prefetched))
                        fetched_init.append(init(cached[1], prefetch_config, tls.ca, lock))
                        signed_fetched.append(prefetch(f"{plain_url}/providers/v1/", context, signed_dir))
                        signed_init.append(init(cached[3], signed_config, tls.ca, lock))
                        if ONLY_PREFETCH:
                            continue
                        warm.append(init(cached[0], mirror_config, tls.ca))
                        local.append(init(fs_layer, fs_config, tls.ca))
                        if static_url:
                            floor.append(init(static_layer, static_config, tls.ca))
                            fetched_floor.append(prefetch(static_url, context, root / "prefetched-floor"))
                https, http = [], []
                if not ONLY_PREFETCH:
                    https, http = archive_times(f"https://127.0.0.1:{port}/providers/v1/", plain_url, tls.ca)
    median = statistics.median
    together = [f + i for f, i in zip(plain_fetched, plain_init, strict=True)]
    pairs = sorted(t / loc for t, loc in zip(together, plain_local, strict=True))
    print(f"prefetch over plain HTTP with a token (the runner's way), {ROUNDS} pairs: prefetch median "
          f"{median(plain_fetched):.3f} s, `init` from it {median(plain_init):.3f} s, together median "
          f"{median(together):.3f} s; local mirror `init` with the same lock file median {median(plain_local):.3f} s; "
          f"ratio of medians {median(together) / median(plain_local):.2f}, median of the pairs' ratios "
          f"{median(pairs):.2f} (quartiles {pairs[len(pairs) // 4]:.2f}-{pairs[(3 * len(pairs)) // 4]:.2f}; "
          "target <= 1.3)")
    before = sorted(t / loc for t, loc in zip(today, plain_local, strict=True))
    print(f"without the prefetch (the warm HTTPS network mirror, same lock file, same rounds): `init` median "
          f"{median(today):.3f} s; ratio of medians {median(today) / median(plain_local):.2f}, median of the pairs' "
          f"ratios {median(before):.2f} (quartiles {before[len(before) // 4]:.2f}-"
          f"{before[(3 * len(before)) // 4]:.2f})")
    print(f"prefetch over plain HTTP through the signed archive URLs (version document first): median "
          f"{median(signed_fetched):.3f} s, `init` from it {median(signed_init):.3f} s; ratio to the local `init` with "
          f"the lock file {median(local_locked):.3f} s: "
          f"{(median(signed_fetched) + median(signed_init)) / median(local_locked):.2f}")
    if ONLY_PREFETCH:
        print(f"prefetch over HTTPS (signed URLs, the version document first): median {median(fetched):.3f} s, "
              f"`init` from it {median(fetched_init):.3f} s; ratio to the local `init` with the lock file "
              f"{median(local_locked):.3f} s: {(median(fetched) + median(fetched_init)) / median(local_locked):.2f}")
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        return
    runs = 10 * ROUNDS
    print(f"{runs} inits of 3 providers ({SIZE / 1024 / 1024:.1f} MiB each): upstream {direct_bytes / 1e6:.1f} MB "
          f"straight from the registry, {cached_bytes / 1e6:.2f} MB through the mirror: ratio "
          f"{cached_bytes / direct_bytes:.4f} (target <= 0.01)")
    print(f"init, warm mirror: median {statistics.median(warm):.3f} s; from a local filesystem mirror: median "
          f"{statistics.median(local):.3f} s; ratio {statistics.median(warm) / statistics.median(local):.2f} "
          f"(target <= 1.3)")
    if floor:
        bottom = statistics.median(floor)
        print(f"init, static files over HTTPS from Go's net/http (any network mirror's floor): median {bottom:.3f} s; "
              f"ratio to the local mirror {bottom / statistics.median(local):.2f}, the warm mirror to it "
              f"{statistics.median(warm) / bottom:.2f}")
    else:
        print("no `go` on PATH: the static mirror floor was not measured")
    print(f"prefetch over HTTPS (signed URLs): the 3 locked archives fetched in parallel by Python from the warm "
          f"mirror: median "
          f"{median(fetched):.3f} s, then `init` from them as a filesystem mirror {median(fetched_init):.3f} s; "
          f"together {median(fetched) + median(fetched_init):.3f} s against the local mirror's `init` with the same "
          f"lock file {median(local_locked):.3f} s: ratio "
          f"{(median(fetched) + median(fetched_init)) / median(local_locked):.2f} (target <= 1.3)")
    if fetched_floor:
        print(f"the same prefetch from Go's net/http (static files over HTTPS): median {median(fetched_floor):.3f} s; "
              f"with that `init`, ratio {(median(fetched_floor) + median(fetched_init)) / median(local_locked):.2f}")
    if https:
        print(f"one {SIZE / 1024 / 1024:.1f} MiB archive with curl: HTTPS listener median "
              f"{statistics.median(https):.3f} s, plain HTTP (same app) median {statistics.median(http):.3f} s")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")


def prefetch(mirror: str, context: ssl.SSLContext, directory: Path) -> float:
    """Seconds to fetch each provider's version document and linux_amd64 archive from `mirror` into `directory` (a
    packed filesystem mirror), the providers in parallel, one keep-alive connection each."""
    shutil.rmtree(directory, ignore_errors=True)
    base = urlsplit(mirror)

    def fetch(type_: str) -> None:
        connection = (http.client.HTTPSConnection(base.hostname or "", base.port, context=context, timeout=30)
                      if base.scheme == "https" else http.client.HTTPConnection(base.hostname or "", base.port,
                                                                                timeout=30))
        try:
            document = f"{base.path}{REGISTRY}/test/{type_}/1.0.0.json"
            connection.request("GET", document)
            answer = connection.getresponse()
            body = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"{document}: {answer.status}")
            archive = urlsplit(urljoin(f"{mirror}{REGISTRY}/test/{type_}/1.0.0.json",
                                       json.loads(body)["archives"]["linux_amd64"]["url"]))
            connection.request("GET", archive.path + (f"?{archive.query}" if archive.query else ""))
            answer = connection.getresponse()
            if answer.status != 200:
                raise RuntimeError(f"{archive.path}: {answer.status}")
            target = directory / REGISTRY / "test" / type_
            target.mkdir(parents=True, exist_ok=True)
            with (target / f"terraform-provider-{type_}_1.0.0_linux_amd64.zip").open("wb") as handle:
                shutil.copyfileobj(answer, handle, 1024 * 1024)
        finally:
            connection.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(len(TYPES)) as pool:
        list(pool.map(fetch, TYPES))
    return time.perf_counter() - started


def prefetch_plain(datastore: str, providers: tuple[LockedProvider, ...], directory: Path) -> float:
    """Seconds the runner's prefetch (`runner/mirror.py`) takes to fetch the locked providers' linux_amd64 archives
    from the datastore's token route over plain HTTP into `directory`."""
    started = time.perf_counter()
    reason = runner_prefetch(datastore, None, providers, "linux_amd64", directory)
    if reason is not None:
        raise RuntimeError(reason)
    return time.perf_counter() - started


def archive_times(mirror: str, plain: str, ca: Path) -> tuple[list[float], list[float]]:
    """The same signed archive URL over HTTPS and over plain HTTP, alternating (nothing without curl)."""
    if shutil.which("curl") is None:
        return [], []
    version = f"{mirror}{REGISTRY}/test/alpha/1.0.0.json"
    document = json.loads(subprocess.run(["curl", "-sf", "--cacert", str(ca), version], capture_output=True,
                                         check=True).stdout)
    url = urljoin(version, document["archives"]["linux_amd64"]["url"])
    over_http = plain + urlsplit(url).path + "?" + urlsplit(url).query

    def fetch(address: str) -> float:
        done = subprocess.run(["curl", "-sf", "--cacert", str(ca), "-o", "/dev/null", "-w", "%{time_total}", address],
                              capture_output=True, text=True, check=True)
        return float(done.stdout)

    https, http = [], []
    for _ in range(max(ROUNDS, 5)):
        https.append(fetch(url))
        http.append(fetch(over_http))
    return https, http


if __name__ == "__main__":
    main()
