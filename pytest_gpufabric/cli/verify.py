"""`gpufabric verify`: are results JSON and HTML reports as their run wrote them, and who signed them
(report/signing.py)."""

from __future__ import annotations

import argparse

from .common import printable


def register(sub: argparse._SubParsersAction) -> None:
    verify = sub.add_parser(
        "verify", help="check that a results JSON or HTML report is as the run wrote it, and who signed it",
        description="Exit 0: untouched and signed (with --key: by that key), its verdict the one its own promises "
                    "give, and results and reports given together of one run; 1: changed since the run (the parts "
                    "that changed are named), unsigned (digests anyone can recompute show nothing of who wrote a "
                    "file: --allow-unsigned accepts that), signed by another key, or of another run; 2: a file or key "
                    "that cannot be read.")
    verify.add_argument("files", nargs="+", metavar="RESULTS.json|REPORT.html",
                        help="results files or HTML reports a run wrote")
    verify.add_argument("--key", metavar="PUB.pem", help="the Ed25519 public key the files must be signed with "
                        "(`openssl pkey -in KEY.pem -pubout -out PUB.pem`); without it a signature is checked against "
                        "the key it names, which shows it whole, not whose it is")
    verify.add_argument("--allow-unsigned", action="store_true",
                        help="accept an unsigned file whose digests match (they show it whole, not who wrote it)")
    verify.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    """Digests and signature of results JSON or HTML reports (report/signing.py)."""
    from ..report.signing import verify_command

    code, lines = verify_command(args.files, args.key, args.allow_unsigned)
    for line in lines:
        print(printable(line))
    return code
