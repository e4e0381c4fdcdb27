"""The mirror routes of the datastore (docs/architecture.md §10.5).

Provider Network Mirror Protocol under `/providers/v1/` (Terraform requires HTTPS: the datastore's TLS listener):
`<hostname>/<namespace>/<type>/index.json` and `<version>.json` need a token (a runner's, sent by Terraform as
the mirror host's credentials, or an admin's); archives (`archives/<sha256>/<file>`) need none, since Terraform
sends no credentials for archive downloads: they need the expiring signature the version document put in their
URL (`signing.py`), checked before anything is read, and anything unsigned, forged or expired is the same 404 as
an archive never listed. `healthz` needs none: runners probe it before `init`.
`packages/<hostname>/<namespace>/<type>/<version>/<os>_<arch>` is one platform's archive for a runner's or an
admin's token (SHA-256 and, once known, `h1` in headers): the runner prefetches its lock file's providers so,
over the plain listener, with no signed URL.

Tools under `/tools/v1/`: `<tool>/versions` and `<tool>/<version>/<os>/<arch>` (the zip, or Terragrunt's bare
binary; its SHA-256 in `X-Burrito-Sha256`), with a token. The same archives under `/tools/tenv/` in the layout
tenv downloads from in its "direct" install mode (a release listing per tool, the archives and a SHA256SUMS per
release, `tools.tenv_request`), with the token also as a basic-auth password, the only credentials tenv sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse

from burrito_py.datastore.auth import AuthError, Principal
from burrito_py.datastore.providercache.cache import SERVED_CHUNK, NotFound, ProviderAddress, ProviderCache, Refused
from burrito_py.datastore.providercache.metrics import ARCHIVE_ROUTES
from burrito_py.datastore.providercache.signing import ArchiveSigner, UrlKeys
from burrito_py.datastore.providercache.tools import (
    ToolCache,
    media_type,
    sums_name,
    tenv_listing,
    tenv_request,
)

__all__ = ["mirror_router"]

SHA_HEADER = "X-Burrito-Sha256"
H1_HEADER = "X-Burrito-H1"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


NO_ARCHIVE = "no such archive"  # every refusal of the archive route: nothing tells them apart


def mirror_router(providers: ProviderCache | None, tools: ToolCache | None,
                  caller: Callable[..., Any], signer: ArchiveSigner | None = None,
                  basic_caller: Callable[..., Any] | None = None) -> APIRouter:
    """`basic_caller` is `caller` that also takes the token as a basic-auth password (tenv's routes)."""
    router = APIRouter()
    urls = signer or ArchiveSigner(UrlKeys(), 3600.0)
    # A default, not an Annotated alias: with postponed annotations FastAPI resolves names in module globals only.
    caller_dependency = Depends(caller)
    basic_dependency = Depends(basic_caller or caller)

    def member(who: Principal) -> None:
        # Runners (their pod-bound token) and admins: a token from anyone else gets nothing read through.
        if not who.admin and who.runner is None:
            raise AuthError(403, f"{who.describe()} may not use the mirror: only runners and the controllers")

    async def answer(call: Callable[[], Any]) -> Response:
        try:
            return await call()  # type: ignore[no-any-return]
        except NotFound as exc:
            return _error(404, str(exc))
        except Refused as exc:
            return _error(502, str(exc))

    if providers is not None:
        cache = providers

        @router.get("/providers/v1/healthz", include_in_schema=False)
        async def healthz() -> dict[str, str]:
            return {"status": "ok"}

        @router.get("/providers/v1/archives/{sha256}/{filename}")
        async def archive(sha256: str, filename: str, exp: str | None = None, sig: str | None = None) -> Response:
            # Before any read: an unsigned, forged or expired URL learns nothing and reads nothing through.
            if not urls.valid(sha256, filename, exp, sig):
                return _error(404, NO_ARCHIVE)
            ARCHIVE_ROUTES.labels("signed").inc()
            try:
                return StreamingResponse(await cache.archive(sha256, filename), media_type="application/zip")
            except NotFound:
                return _error(404, NO_ARCHIVE)
            except Refused as exc:
                return _error(502, str(exc))

        @router.get("/providers/v1/packages/{hostname}/{namespace}/{type_}/{version}/{platform}")
        async def package(request: Request, hostname: str, namespace: str, type_: str, version: str,
                          platform: str, who: Principal = caller_dependency) -> Response:
            # The runner's prefetch of its locked providers (runner/mirror.py), over the listener it uses for
            # everything else: with its token rather than a signed URL, so no signed URL crosses plain HTTP.
            member(who)
            ARCHIVE_ROUTES.labels("prefetch").inc()

            async def call() -> Response:
                found = await cache.version(ProviderAddress.parse(hostname, namespace, type_), version)
                entry = found["platforms"].get(platform)
                if entry is None:
                    raise NotFound(f"{hostname}/{namespace}/{type_} {version} has no {platform} archive")
                # Storage's 1 MiB chunks as they are over plain HTTP; TLS writes them faster in pieces (cache.py).
                piece = SERVED_CHUNK if request.url.scheme == "https" else 0
                stream = await cache.archive(entry["sha256"], entry["filename"], piece)
                # After the read: a first read computes the h1 (the runner checks one of them against the lock
                # file). With its size the body goes unchunked, which Python's http.client reads markedly faster.
                pointer = await cache.stored_pointer(entry["sha256"], entry["filename"])
                headers = {SHA_HEADER: entry["sha256"]}
                if isinstance(pointer.get("h1"), str):
                    headers[H1_HEADER] = pointer["h1"]
                if isinstance(pointer.get("size"), int):
                    headers["Content-Length"] = str(pointer["size"])
                return StreamingResponse(stream, media_type="application/zip", headers=headers)
            return await answer(call)

        @router.get("/providers/v1/{hostname}/{namespace}/{type_}/{document}")
        async def provider_document(hostname: str, namespace: str, type_: str, document: str,
                                    who: Principal = caller_dependency) -> Response:
            member(who)

            async def call() -> Response:
                address = ProviderAddress.parse(hostname, namespace, type_)
                if document == "index.json":
                    index = await cache.index(address)
                    return JSONResponse({"versions": {v: {} for v in index["versions"]}})
                if not document.endswith(".json"):
                    raise NotFound(f"{document!r} is neither index.json nor <version>.json")
                found = await cache.version(address, document.removesuffix(".json"))
                # Signed archive URLs, made per request: never cached by anyone.
                return JSONResponse(cache.mirror_document(found, await cache.known_h1(found), urls.query),
                                    headers={"Cache-Control": "no-store"})
            return await answer(call)

    if tools is not None:
        binaries = tools

        @router.get("/tools/v1/{tool}/versions")
        async def tool_versions(tool: str, who: Principal = caller_dependency) -> Response:
            member(who)

            async def call() -> Response:
                return JSONResponse({"versions": await binaries.versions(tool)})
            return await answer(call)

        @router.get("/tools/v1/{tool}/{version}/{os}/{arch}")
        async def tool_archive(tool: str, version: str, os: str, arch: str,
                               who: Principal = caller_dependency) -> Response:
            member(who)

            async def call() -> Response:
                sha, stream = await binaries.archive(tool, version, f"{os}_{arch}")
                return StreamingResponse(stream, media_type=media_type(tool), headers={SHA_HEADER: sha})
            return await answer(call)

        @router.get("/tools/tenv/{path:path}")
        async def tenv_layout(path: str, who: Principal = basic_dependency) -> Response:
            member(who)
            wanted = tenv_request(path)
            if wanted is None:
                return _error(404, "not a path of the tenv layout")
            tool, version, file = wanted

            async def call() -> Response:
                if version is None or file is None:
                    return HTMLResponse(tenv_listing(tool, await binaries.versions(tool)))
                if file == sums_name(tool, version):
                    return PlainTextResponse(await binaries.stored_sums(tool, version))
                platform = binaries.platform_of(tool, version, file)
                if platform is None:
                    return _error(404, f"no {file} in {tool} {version}")
                sha, stream = await binaries.archive(tool, version, platform)
                return StreamingResponse(stream, media_type=media_type(tool), headers={SHA_HEADER: sha})
            return await answer(call)

    return router
