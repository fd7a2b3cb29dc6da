"""`python -m tools.gpu_check prepare|check|dry-run` (the nox sessions gpu-prepare and gpu call these)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """prepare: fill .gpu/ (ensure: only when missing or stale); dry-run: check it; check: on a GPU the device run,
    elsewhere the dry run."""
    command = argv[0] if argv else "check"
    if command in ("prepare", "ensure"):  # ensure: only when the folder is missing or made for other groups
        from tools.gpu_check.carry import FOLDER, groups_digest, read_manifest
        from tools.gpu_check.prepare import prepare

        manifest = read_manifest(FOLDER)
        if command == "prepare" or manifest is None or manifest.get("digest") != groups_digest():
            prepare()
        return 0
    from tools.gpu_check.run import device_run, dry_run, has_gpu  # msgspec: not needed to prepare

    if command == "dry-run" or (command == "check" and not has_gpu()):
        return dry_run()
    if command == "check":
        return device_run()
    print(f"unknown command {command!r}: prepare, ensure, check or dry-run", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
