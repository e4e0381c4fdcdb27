"""The tool mirror's tenv layout (docs/architecture.md §10.5): which paths tenv asks for in its direct install
mode, and the listing its html list mode reads (pure)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.datastore.providercache.tools import TenvRequest, sums_name, tenv_listing, tenv_request

TOFU = "opentofu/opentofu/releases/download"
TG = "gruntwork-io/terragrunt/releases/download"


def test_the_paths_tenv_asks_for_each_engine() -> None:
    assert tenv_request(TOFU) == TenvRequest("opentofu")
    assert tenv_request(f"{TOFU}/") == TenvRequest("opentofu")
    assert tenv_request(f"{TOFU}/v1.12.6/tofu_1.12.6_linux_amd64.zip") == TenvRequest(
        "opentofu", "1.12.6", "tofu_1.12.6_linux_amd64.zip")
    assert tenv_request("terraform") == TenvRequest("terraform")
    assert tenv_request("terraform/1.5.7/terraform_1.5.7_SHA256SUMS") == TenvRequest(
        "terraform", "1.5.7", "terraform_1.5.7_SHA256SUMS")
    assert tenv_request(f"{TG}/v1.1.3/SHA256SUMS") == TenvRequest("terragrunt", "1.1.3", "SHA256SUMS")


def test_anything_else_is_no_request() -> None:
    for path in ("", "tofu", f"{TOFU}/1.12.6/x.zip", "terraform/v1.5.7/x", f"{TOFU}/v1.12.6",
                 f"{TOFU}/v1.12.6/a/b", f"{TOFU}/v../x", "terraform/latest/x", "opentofu/opentofu",
                 f"{TG}/v1.1/SHA256SUMS"):
        assert tenv_request(path) is None, path


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789./-_v%", max_size=80))
def test_a_request_names_a_known_tool_and_a_strict_version_only(path: str) -> None:
    found = tenv_request(path)
    if found is not None:
        assert found.tool in ("opentofu", "terraform", "terragrunt")
        assert found.version is None or re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?", found.version)
        assert found.file is None or "/" not in found.file


def test_the_listing_links_each_version_folder_as_tenv_reads_it() -> None:
    assert '<a href="v1.12.6/">v1.12.6</a>' in tenv_listing("opentofu", ["1.12.6", "1.10.10"])
    assert '<a href="1.5.7/">1.5.7</a>' in tenv_listing("terraform", ["1.5.7"])
    assert sums_name("opentofu", "1.12.6") == "tofu_1.12.6_SHA256SUMS"
    assert sums_name("terraform", "1.5.7") == "terraform_1.5.7_SHA256SUMS"
    assert sums_name("terragrunt", "1.1.3") == "SHA256SUMS"
