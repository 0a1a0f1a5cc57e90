"""Tamper evidence for the results JSON and the HTML report: digests, an Ed25519 signature, and their check.

Every results document the run finishes carries an ``integrity`` block: the sha256 of the results (the document
without the block, as canonical JSON), of the profile (its resolved content, as the cover shows it) and of the
replayed bundle (its files), and one digest per part of the results (each check's fields, each promise, the
verdict, each GPU's identity, ...). With a key (``--gpu-sign-key KEY.pem``: an Ed25519 private key in PEM, as
``openssl genpkey -algorithm ed25519 -out KEY.pem`` writes it) the block is signed; the signature covers the digests,
so it covers the document.

The HTML report carries the signed results document inside it and, after its last line, a block of its own: the
sha256 of the page, one digest per section the report drew (marked ``<!--gf:NAME-->...<!--/gf:NAME-->``), and the
signature over them.

:func:`verify_path` checks either file: the digests against the content, the signature against the key given. Where
something was changed it names the part (``checks[3] hbm-bandwidth GPU0 ...: found``, ``section promise
hbm-bandwidth[GPU0]``), since the per-part digests say which part no longer matches what was signed.

Signing goes through ``cryptography`` (pyca), never hand-rolled. Digests work without it. The results' block is
made and checked in report/integrity.py, the report's in report/html_signing.py; this module reads the keys and
checks files, one by one (``gpufabric verify``) or a fleet's node folders.
"""


from __future__ import annotations

import stat
from pathlib import Path

from ..errors import GpuFabricError
from .html_signing import HTML_MARK, verify_html
from .integrity import DuplicateKey, Verification, loads, verify_document

#: a file `gpufabric verify` reads whole at the most (a 10,000-node fleet's results are tens of MB)
MAX_VERIFY_BYTES = 1_000_000_000


class SigningError(GpuFabricError):
    """A key that cannot be read or used; the message names the file and what is wrong."""


# --- keys -----------------------------------------------------------------------------------------------


def load_private_key(path: Path | str):
    """The Ed25519 private key in a PEM file (unencrypted PKCS#8, as `openssl genpkey -algorithm ed25519` writes)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_key(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path}: a {type(key).__name__.replace('_', '')}, not an Ed25519 key (make one with "
                           "`openssl genpkey -algorithm ed25519 -out KEY.pem`)")
    return key


def load_public_key(path: Path | str):
    """The Ed25519 public key in a PEM file (`openssl pkey -in KEY.pem -pubout`); a private key file gives its
    public half."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    data = _read_key(path)
    if b"PRIVATE KEY" in data:
        key = load_private_key(path)
        return key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningError(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path}: a {type(key).__name__.replace('_', '')}, not an Ed25519 key")
    return key


def _read_key(path: Path | str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SigningError(f"cannot read key {path}: {exc.strerror or exc}") from None


# --- either file ------------------------------------------------------------------------------------------


def verify_path(path: Path | str, public_key=None) -> Verification:
    """Check RESULTS.json or REPORT.html (told apart by their content). Raises GpuFabricError for a file that is
    neither."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise GpuFabricError(f"cannot read {path}: not a regular file")
        if info.st_size > MAX_VERIFY_BYTES:
            raise GpuFabricError(f"{path}: {info.st_size / 1e6:,.1f} MB, larger than any results file or report "
                                 f"({MAX_VERIFY_BYTES / 1e6:,.0f} MB): not read")
        data = path.read_bytes()
    except OSError as exc:
        raise GpuFabricError(f"cannot read {path}: {exc.strerror or exc}") from None
    return verify_bytes(data, public_key, path)


def verify_bytes(data: bytes, public_key=None, path: Path | str = "results") -> Verification:
    """verify_path on a file's bytes already read (the fleet checks and then judges the very bytes it read once)."""
    path = Path(path)
    try:
        # utf-8-sig: a byte-order mark an editor put first is not content, as CRLF line endings are not (read
        # as LF, as Python's text mode reads them): neither changes what a browser or a JSON reader shows
        text = data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise GpuFabricError(f"cannot read {path}: {exc}") from None
    try:
        if text.lstrip().startswith("{"):
            try:
                document = loads(text)
            except DuplicateKey as exc:
                return Verification(str(path), "results", [f"the results changed after they were written: {exc}"])
            except ValueError as exc:
                raise GpuFabricError(f"{path}: not JSON ({exc})") from None
            if not isinstance(document, dict) or "schema_version" not in document:
                raise GpuFabricError(f"{path}: not a gpufabric results document")
            return verify_document(document, public_key, str(path))
        if "<html" in text[:4096].lower() or HTML_MARK in text:
            return verify_html(text, public_key, str(path))
    except RecursionError:
        raise GpuFabricError(f"{path}: its JSON nests too deep to read (no run writes that)") from None
    raise GpuFabricError(f"{path}: neither a results JSON nor an HTML report")


# --- `gpufabric verify` ---------------------------------------------------------------------------------


def verify_command(paths: list[str], key: str | None, allow_unsigned: bool = False) -> tuple[int, list[str]]:
    """`gpufabric verify FILE... [--key PUB.pem] [--allow-unsigned]`: (exit code, lines to print).

    0: every file is whole and signed (by the key given, where one was), and results and reports given together
    are of one run; 1: a file changed, is unsigned (unless ``allow_unsigned``: the caller accepts that its digests,
    which anyone can recompute, show only that it is whole), is signed by another key, says a verdict its own
    promises do not give, or is of another run than its partner; 2: a file or key that cannot be read."""
    public_key = load_public_key(key) if key else None
    code, lines, runs = 0, [], []
    if key and b"PRIVATE KEY" in _read_key(key):
        lines.append(f"note: {key} is a private key: its public half was used. Give a customer only the public half "
                     f"(openssl pkey -in {key} -pubout -out PUB.pem); the private key signs, and stays with you")
    for path in paths:
        result = verify_path(path, public_key)
        runs.append((path, result))
        if not result.valid:
            code = 1
            lines.append(f"{path}: INVALID")
            lines += [f"  {problem}" for problem in result.problems]
        elif not result.signed:
            state = "its digests match, but it is unsigned: digests anyone can recompute show nothing of who wrote it"
            if allow_unsigned:
                lines.append(f"{path}: whole, unsigned: {state} (accepted: --allow-unsigned)")
            else:
                code = 1
                lines.append(f"{path}: UNSIGNED: {state}; sign with --gpu-sign-key, or give --allow-unsigned to "
                             "accept an unsigned file")
        else:
            who = f", signed by key {result.signed_by}" if public_key is not None else ""
            state = "the results are as the run wrote them" if result.kind == "results" else \
                "the report is as the run wrote it"
            lines.append(f"{path}: valid: {state}{who}")
        lines += [f"  note: {note}" for note in result.notes if "not signed" not in note]
    mismatch = _other_runs(runs)
    if mismatch:
        code = 1
        lines += mismatch
    return code, lines


#: said of a results file and a report given together when either names no run
NO_RUN_ID = "cannot show they are one run: no run id"


def _other_runs(runs: list[tuple[str, Verification]]) -> list[str]:
    """Results and reports given together must be of one run (the run id each carries under its signature); a
    file that names no run (written before run ids were) cannot be shown to be of its partner's run."""
    results = [(path, r) for path, r in runs if r.kind == "results"]
    reports = [(path, r) for path, r in runs if r.kind == "report"]
    if not results or not reports:
        return []
    lines = []
    result_runs = {r.run_id for _, r in results if r.run_id is not None}
    report_runs = {r.run_id for _, r in reports if r.run_id is not None}
    for path, r in results + reports:
        partners = report_runs if r.kind == "results" else result_runs
        if r.run_id is None:
            lines.append(f"{path}: NOT VALID TOGETHER: {NO_RUN_ID} (written before run ids were): the results and "
                         "reports given cannot be shown to be of one run")
        elif r.run_id not in partners:
            other = "report" if r.kind == "results" else "results"
            lines.append(f"{path}: OF ANOTHER RUN: run {r.run_id}, and no {other} given is of that run "
                         f"({', '.join(sorted(str(p) for p in partners)) or NO_RUN_ID})")
    return lines
