"""``workbench cache``: Triton's disk cache, seen and carried (:mod:`workbench.compiling.cache`)."""

from __future__ import annotations

from workbench.cli.args import Parser, UsageError


def build_parser() -> Parser:
    parser = Parser(
        prog="workbench cache",
        description="Triton's disk cache of compiled kernels: where it is and what it holds (info), "
        "removing what is stale (prune), and a tarball of one GPU's kernels for one Triton version to "
        "carry it to another machine, for example a CI runner (export / import). An archive for "
        "another device or Triton version is refused and the cache left untouched.",
        epilog="examples:\n  workbench cache info\n  workbench cache prune --other-tritons\n"
        "  workbench cache export results/triton-cache.tar.gz\n  workbench cache import results/triton-cache.tar.gz",
    )
    parser.add_argument("action", choices=("info", "prune", "export", "import"), help="what to do")
    parser.add_argument("file", nargs="?", help="the archive (export, import)")
    parser.add_argument(
        "--dir", default=None, help="the cache folder (default: Triton's, TRITON_CACHE_DIR or ~/.triton/cache)"
    )
    parser.add_argument("--device", default=None, help="the kernels' device, e.g. cuda/sm90 (default: this host's GPU)")
    parser.add_argument("--other-tritons", action="store_true", help="prune: kernels of another Triton version")
    parser.add_argument(
        "--older-than", type=float, default=None, metavar="DAYS", help="prune: entries not used for DAYS"
    )
    parser.add_argument("--all", action="store_true", help="prune: everything")
    parser.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    return parser


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def main(argv) -> int:
    from workbench.compiling import cache

    args = build_parser().parse_args(argv)
    if args.action in ("export", "import") and not args.file:
        raise UsageError(
            f"{args.action} needs the archive's path, e.g. workbench cache {args.action} triton-cache.tar.gz"
        )
    if args.action == "info":
        facts = cache.info(args.dir)
        print(f"{facts['dir']}: {facts['entries']} entries, {_size(facts['bytes'])}")
        for device, by_triton in sorted(facts["kernels"].items()):
            for version, slot in sorted(by_triton.items()):
                print(f"  kernels for {device}, Triton {version}: {slot['entries']} ({_size(slot['bytes'])})")
        host = facts["host_modules"]
        if host["entries"]:
            print(f"  host modules (launchers, CUDA utilities): {host['entries']} ({_size(host['bytes'])})")
        return 0
    if args.action == "prune":
        done = cache.prune(
            args.dir,
            other_tritons=args.other_tritons,
            older_than_days=args.older_than,
            everything=args.all,
            dry_run=args.dry_run,
        )
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {done['removed']} entries ({_size(done['bytes'])}); {done['kept']} kept")
        return 0
    if args.action == "export":
        manifest = cache.export(args.file, args.dir, device=args.device)
        print(
            f"wrote {args.file}: {len(manifest['kernels'])} kernels for {manifest['device']} (Triton {manifest['triton']}), "
            f"{len(manifest['host_modules'])} host modules, {_size(manifest['bytes'])} before compression"
        )
        return 0
    done = cache.import_archive(args.file, args.dir, device=args.device)
    skipped = f", {done['skipped']} host modules of another Python or machine left out" if done["skipped"] else ""
    print(
        f"imported {done['kernels']} kernels and {done['host_modules']} host modules ({done['already']} already there{skipped})"
    )
    return 0
