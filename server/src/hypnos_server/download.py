"""`hypnos models pull <id>[:<quant>]`: fetch a catalog variant's files into models_dir (resume, progress, sizes)."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from hypnos.engine import missing_library

from hypnos_server.catalog import Catalog, CatalogFile, file_state, variant_files

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
STAGING = ".hypnos-downloads"


class DownloadError(Exception):
    """A download that cannot go ahead or failed; the message says why and what to do."""


@dataclass
class PullReport:
    """What one pull did per file: fetched, already there, outdated (size differs from the catalog)."""

    fetched: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    outdated: list[str] = field(default_factory=list)


def hub_endpoint() -> str:
    """HF_ENDPOINT, else the Hugging Face hub."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def is_loopback(url: str) -> bool:
    """True for an http(s) URL on this machine's loopback interface."""
    return (urlsplit(url).hostname or "") in LOOPBACK_HOSTS


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set to a true value."""
    values = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(v.strip().lower() in ("1", "true", "yes", "on") for v in values)


def check_allowed(url: str) -> None:
    """Refuse a download while HF_HUB_OFFLINE is set, unless it goes to a loopback stand-in hub."""
    if offline() and not is_loopback(url):
        raise DownloadError(
            f"HF_HUB_OFFLINE is set, so nothing is downloaded from {url}; unset HF_HUB_OFFLINE to download, "
            "or copy the files into models_dir yourself"
        )


def _hf_download(file: CatalogFile, target: Path, staging: Path, redo: bool, out: IO[str]) -> None:
    """One file, or a folder (remote ending in /), of a Hugging Face repository through huggingface_hub (resumes
    from its .incomplete files)."""
    try:
        import huggingface_hub
        from huggingface_hub import constants, hf_hub_download, snapshot_download
        from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, HfHubHTTPError, RepositoryNotFoundError
    except ImportError:
        raise DownloadError(missing_library("huggingface_hub", "hypnos-server[download]").message) from None
    endpoint = hub_endpoint()
    check_allowed(endpoint)
    offline_before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = False  # only reached for an online run or the loopback stand-in
    common: dict[str, Any] = {
        "endpoint": endpoint,
        "library_name": "hypnos",
        "library_version": huggingface_hub.__version__,
    }
    folder = file.remote.strip("/")
    try:
        if file.remote.endswith("/"):
            patterns = [f"{folder}/*"] if folder else None
            snapshot_download(file.repo, local_dir=staging, allow_patterns=patterns, force_download=redo, **common)
            fetched = staging / folder if folder else staging
        else:
            fetched = Path(hf_hub_download(file.repo, file.remote, local_dir=staging, force_download=redo, **common))
    except GatedRepoError:
        raise DownloadError(
            f"{file.remote} is in the gated repository {file.repo}: accept the model's license at "
            f"{endpoint}/{file.repo} with your account, then set HF_TOKEN to a token of that account"
        ) from None
    except (RepositoryNotFoundError, EntryNotFoundError) as error:
        raise DownloadError(f"{file.repo}/{file.remote} is not on {endpoint}: {error}") from None
    except (HfHubHTTPError, OSError) as error:
        raise DownloadError(f"downloading {file.repo}/{file.remote} failed ({error}); run it again to resume") from None
    finally:
        constants.HF_HUB_OFFLINE = offline_before
    if not file.remote.endswith("/"):
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(fetched, target)
        return
    for item in sorted(fetched.rglob("*")):
        relative = item.relative_to(fetched)
        if item.is_file() and ".cache" not in relative.parts:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(item, target / relative)


def _url_download(file: CatalogFile, target: Path, staging: Path, redo: bool, out: IO[str]) -> None:
    """One file under an https:// base URL, resumed with a Range request from its .part file."""
    import httpx
    from tqdm import tqdm

    url = file.repo.rstrip("/") + "/" + file.remote.lstrip("/")
    check_allowed(url)
    part = staging / (file.local.replace("/", "__") + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    if redo and part.exists():
        part.unlink()
    done = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={done}-"} if done else {}
    try:
        with httpx.stream("GET", url, headers=headers, follow_redirects=True, timeout=60) as response:
            if response.status_code == 416:  # already complete
                pass
            elif response.status_code not in (200, 206):
                raise DownloadError(f"{url} answered {response.status_code}")
            else:
                if response.status_code == 200:
                    done = 0
                total = done + int(response.headers.get("content-length", 0) or 0)
                with (
                    part.open("ab" if done else "wb") as sink,
                    tqdm(
                        total=total or None, initial=done, unit="B", unit_scale=True, desc=file.local, file=out
                    ) as bar,
                ):
                    for chunk in response.iter_bytes():  # as received: a cut connection keeps what came
                        sink.write(chunk)
                        bar.update(len(chunk))
    except httpx.HTTPError as error:
        raise DownloadError(f"downloading {url} failed ({error}); run it again to resume") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(part, target)


def pull(catalog: Catalog, spec: str, models_dir: Path, out: IO[str]) -> PullReport:
    """Fetch the files of a catalog variant that are missing or outdated; sizes checked against the catalog."""
    entry, variant = catalog.find(spec)
    report = PullReport()
    staging = models_dir / STAGING / entry.id.replace(":", "_")
    for file in variant_files(variant):
        present, outdated = file_state(models_dir, file)
        if present and not outdated:
            report.present.append(file.local)
            out.write(f"{file.local}: present\n")
            continue
        target = models_dir / file.local
        is_url = file.repo.startswith(("https://", "http://"))
        if is_url and file.local.endswith("/"):
            raise DownloadError(f"{file.local} is a folder under a plain URL; fetch {file.repo} into {target} yourself")
        fetch = _url_download if is_url else _hf_download
        fetch(file, target, staging, outdated, out)
        report.fetched.append(file.local)
        if file.size is not None and target.is_file() and target.stat().st_size != file.size:
            report.outdated.append(file.local)
            out.write(
                f"{file.local}: outdated, {target.stat().st_size} bytes where the catalog lists {file.size}; "
                "the file differs from the tested one\n"
            )
    shutil.rmtree(staging, ignore_errors=True)  # every file is in place: the resume data is no longer needed
    return report
