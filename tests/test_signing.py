"""Tamper evidence (issue 24): a run signed with an Ed25519 key, then `gpufabric verify` on what it wrote, untouched
and after one digit, one cell or the key changed; the fleet's results signed the same way, and `fleet report
--require-signed` refusing a node whose results are unsigned or changed.

The runs are real replays of the shipped 2x H200 acceptance bundle (its all_reduce rows are what a digit is changed
in); the keys are made here, in the PEM form `openssl genpkey -algorithm ed25519` writes (PKCS#8), and by openssl itself
where it is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_nodes import derived, replayed, write_node

from pytest_gpufabric.report.integrity import INTEGRITY_KEY, sign_document, verify_document
from pytest_gpufabric.report.signing import load_private_key

RESULTS = "gpufabric-results.json"
REPORT = "acceptance.html"


def _gpufabric(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """KEY.pem (PKCS#8 private, as openssl genpkey writes it) and PUB.pem (SubjectPublicKeyInfo, as openssl pkey
    -pubout writes it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the signing tests"


@pytest.fixture(scope="module")
def signed_run(tmp_path_factory) -> dict[str, Path]:
    """`gpufabric accept --sign-key KEY.pem` on the 2x H200 acceptance replay, once for the module."""
    work = tmp_path_factory.mktemp("signed-run")
    key, pub = _key_pair(work, "vendor")
    _, other = _key_pair(work, "someone-else")
    # that bundle holds no kernel log: xid-events waived in writing, so that the run is ACCEPTED
    done = _gpufabric("accept", "--profile", "h200-nvswitch-x2", "--replay", "h200-nvswitch-x2-acceptance",
                      "--sign-key", str(key), "--customer", "ACME Compute", "--gpu-waive", NO_KERNEL_LOG,
                      cwd=work, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {"work": work, "key": key, "pub": pub, "other": other, "results": work / "reports" / RESULTS,
            "report": work / "reports" / REPORT}


def _copy(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(source, folder / source.name))


def test_untouched_signed_results_and_report_are_valid(signed_run):
    done = _gpufabric("verify", str(signed_run["results"]), str(signed_run["report"]), "--key",
                      str(signed_run["pub"]), cwd=signed_run["work"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if not line.startswith("  note: its evidence is a replay")]
    key_id = json.loads(signed_run["results"].read_text())[INTEGRITY_KEY]["signature"]["key_id"]
    assert lines[0] == f"{signed_run['results']}: valid: the results are as the run wrote them, signed by key {key_id}"
    assert lines[1] == f"{signed_run['report']}: valid: the report is as the run wrote it, signed by key {key_id}"
    # the report's cover says who signed it, and its integrity section shows the digests
    page = signed_run["report"].read_text(encoding="utf-8")
    document = json.loads(signed_run["results"].read_text())
    assert document[INTEGRITY_KEY]["results_sha256"] in page and key_id in page


def test_one_digit_changed_in_the_results_is_named(signed_run, tmp_path):
    results = _copy(signed_run["results"], tmp_path)
    text = results.read_text(encoding="utf-8")
    document = json.loads(text)
    index, check = next((i, c) for i, c in enumerate(document["checks"])
                        if c["name"] == "bandwidth-all_reduce" and c["subject"].endswith("1GiB"))
    before = f'"busbw_gbps": {check["found"]["busbw_gbps"]}'
    assert text.count(before) >= 1
    digit = before[-1]
    after = before[:-1] + ("1" if digit != "1" else "2")  # the last digit of the 1 GiB busbw
    results.write_text(text.replace(before, after, 1), encoding="utf-8")
    done = _gpufabric("verify", str(results), "--key", str(signed_run["pub"]), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[:2] == [
        f"{results}: INVALID",
        f"  the results changed after they were written: checks[{index}] bandwidth-all_reduce {check['subject']}: "
        "found changed"]


def test_a_cell_changed_in_the_report_is_named(signed_run, tmp_path):
    report = _copy(signed_run["report"], tmp_path)
    page = report.read_text(encoding="utf-8")
    row = re.search(r'<td class="id">collective-<wbr>bandwidth\[<wbr>all_<wbr>reduce-<wbr>1GiB\]</td>'
                    r'<td class="expected">[^<]*</td>'
                    r'<td class="found">([0-9.]+) GB/s busbw</td>', page)
    assert row, "the all_reduce 1 GiB row"
    found = row.group(1)
    edited = page[:row.start(1)] + str(round(float(found) + 10, 1)) + page[row.end(1):]
    report.write_text(edited, encoding="utf-8")
    done = _gpufabric("verify", str(report), "--key", str(signed_run["pub"]), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[:2] == [
        f"{report}: INVALID",
        "  the report changed after it was written: promise collective-bandwidth[all_reduce-1GiB] changed"]


def test_the_wrong_key_is_invalid(signed_run, tmp_path):
    done = _gpufabric("verify", str(signed_run["results"]), str(signed_run["report"]), "--key",
                      str(signed_run["other"]), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.count("INVALID") == 2
    assert "not by the key given" in done.stdout


def test_a_re_signed_block_does_not_match_the_vendor_key(signed_run, tmp_path):
    """Whoever edits the results and signs them again with their own key is told apart by the key."""
    document = json.loads(signed_run["results"].read_text(encoding="utf-8"))
    document["summary"]["verdict"] = "ACCEPTED"
    forger, _ = _key_pair(tmp_path, "forger")
    forged = sign_document(document, load_private_key(forger))
    from pytest_gpufabric.report.signing import load_public_key

    assert verify_document(forged).valid  # whole, as signed ...
    result = verify_document(forged, load_public_key(signed_run["pub"]))
    assert not result.valid and "not by the key given" in result.problems[0]  # ... but not by the vendor


def test_an_edited_integrity_block_breaks_the_signature(signed_run, tmp_path):
    results = _copy(signed_run["results"], tmp_path)
    document = json.loads(results.read_text(encoding="utf-8"))
    document[INTEGRITY_KEY]["profile_sha256"] = "0" * 64
    results.write_text(json.dumps(document, indent=2), encoding="utf-8")
    done = _gpufabric("verify", str(results), "--key", str(signed_run["pub"]), cwd=tmp_path)
    assert done.returncode == 1 and "the signature does not match its digests" in done.stdout


def test_unsigned_results_are_checked_by_digest_and_refused_against_a_key(tmp_path):
    work = tmp_path / "unsigned"
    work.mkdir()
    done = _gpufabric("accept", "-k", "topology", cwd=work)
    assert done.returncode == 6, done.stdout[-2000:] + done.stderr[-2000:]  # INCOMPLETE: -k left promises out
    results = work / "reports" / RESULTS
    # digests anyone can recompute show nothing of who wrote the file: unsigned is not valid unless accepted so
    plain = _gpufabric("verify", str(results), cwd=work)
    assert plain.returncode == 1 and "UNSIGNED: its digests match, but it is unsigned" in plain.stdout
    allowed = _gpufabric("verify", str(results), "--allow-unsigned", cwd=work)
    assert allowed.returncode == 0 and "whole, unsigned" in allowed.stdout
    _, pub = _key_pair(tmp_path, "vendor")
    keyed = _gpufabric("verify", str(results), "--key", str(pub), cwd=work)
    assert keyed.returncode == 1 and "the results are not signed" in keyed.stdout


@pytest.mark.parametrize("args, message", [
    (["verify", "nosuch.json"], "cannot read nosuch.json"),
    (["verify", "reports/gpufabric-results.json", "--key", "garbage.pem"], "garbage.pem: not a PEM public key"),
])
def test_a_file_or_key_that_cannot_be_read_exits_2(signed_run, tmp_path, args, message):
    shutil.copytree(signed_run["work"] / "reports", tmp_path / "reports")
    (tmp_path / "garbage.pem").write_text("not a key\n")
    done = _gpufabric(*args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_a_bad_sign_key_is_a_usage_error_before_anything_runs(tmp_path):
    (tmp_path / "bad.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    done = _gpufabric("accept", "--sign-key", "bad.pem", cwd=tmp_path)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--gpu-sign-key: " in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "reports" / RESULTS).exists()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_keys_as_openssl_writes_them(tmp_path):
    """docs/acceptance-report.md's commands (openssl genpkey / pkey -pubout): a results document signed and verified
    with them."""
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", "key.pem"], cwd=tmp_path, check=True)
    subprocess.run(["openssl", "pkey", "-in", "key.pem", "-pubout", "-out", "pub.pem"], cwd=tmp_path, check=True)
    from pytest_gpufabric.report.signing import load_public_key

    document = sign_document(replayed("accepted"), load_private_key(tmp_path / "key.pem"))
    assert verify_document(document, load_public_key(tmp_path / "pub.pem")).valid


# --- fleets ---------------------------------------------------------------------------------------------


def _signed_fleet(root: Path, key: Path, unsigned: tuple[str, ...] = (), changed: tuple[str, ...] = ()) -> None:
    """Three nodes of the accepted replay (DERIVED: hosts and serials changed by fleet_nodes.derived), signed after
    they were derived, as each node's run would have signed its own."""
    private = load_private_key(key)
    for number in (1, 2, 3):
        name = f"gpu-{number:02d}"
        document = derived(replayed("accepted"), name)
        document = sign_document(document, None if name in unsigned else private)  # digests, a signature or not
        if name in changed:
            document["summary"]["verdict"] = "ACCEPTED"
            document["checks"][0]["found"] = {"edited": True}
        write_node(root, name, document)


def test_fleet_results_signed_and_verified(tmp_path):
    key, pub = _key_pair(tmp_path, "vendor")
    _signed_fleet(tmp_path / "nodes", key)
    out = tmp_path / "out"
    done = _gpufabric("fleet", "report", "--allow-replays", str(tmp_path / "nodes"), "-o", str(out), "--sign-key",
                      str(key), "--require-signed", "--key", str(pub), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
    assert document["signatures"]["verified"] == 3
    check = _gpufabric("verify", str(out / "fleet-results.json"), str(out / "fleet.html"), "--key", str(pub),
                       cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": valid: ") == 2
    # one node's verdict edited in the fleet's results: named by node
    text = (out / "fleet-results.json").read_text(encoding="utf-8")
    edited = json.loads(text)
    index = next(i for i, n in enumerate(edited["nodes"]) if n["name"] == "gpu-02")
    edited["nodes"][index]["verdict"] = "REJECTED"
    (out / "fleet-results.json").write_text(json.dumps(edited), encoding="utf-8")
    check = _gpufabric("verify", str(out / "fleet-results.json"), "--key", str(pub), cwd=tmp_path)
    assert check.returncode == 1
    assert f"nodes[{index}] gpu-02: verdict changed" in check.stdout


@pytest.mark.parametrize("unsigned, changed, why", [
    (("gpu-02",), (), "gpu-02: the results are not signed"),
    ((), ("gpu-03",), "gpu-03: the results changed after they were written"),
])
def test_fleet_report_refuses_unsigned_or_changed_nodes(tmp_path, unsigned, changed, why):
    key, pub = _key_pair(tmp_path, "vendor")
    _signed_fleet(tmp_path / "nodes", key, unsigned=unsigned, changed=changed)
    out = tmp_path / "out"
    done = _gpufabric("fleet", "report", "--allow-replays", str(tmp_path / "nodes"), "-o", str(out),
                      "--require-signed", "--key", str(pub), cwd=tmp_path)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "refused 1 node result(s) (--require-signed" in done.stderr and why in done.stderr
    assert not out.exists() or not (out / "fleet-results.json").exists()  # nothing written


def test_require_signed_without_a_key_is_a_usage_error(tmp_path):
    done = _gpufabric("fleet", "report", "--allow-replays", str(tmp_path), "--require-signed", cwd=tmp_path)
    assert done.returncode == 4 and "--require-signed needs --key PUB.pem" in done.stderr


# --- attacks on the files, and files verification must refuse without a traceback ---------------------------


def _verify(path: Path, key: Path, cwd: Path) -> subprocess.CompletedProcess:
    done = _gpufabric("verify", str(path), "--key", str(key), cwd=cwd)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done


def test_a_key_named_twice_is_refused(signed_run, tmp_path):
    """JSON readers differ on which of two values of one key they take; the digest covers only the last. In the
    results a first "verdict" could be what another reader shows; in the report's integrity block (an HTML
    comment) a first value can end the comment and put anything on the page."""
    text = signed_run["results"].read_text(encoding="utf-8")
    results = tmp_path / RESULTS
    results.write_text(text.replace('"verdict": "', '"verdict": "FORGED", "verdict": "', 1), encoding="utf-8")
    done = _verify(results, signed_run["pub"], tmp_path)
    assert done.returncode == 1 and 'the key "verdict" appears twice in one object' in done.stdout
    page = signed_run["report"].read_text(encoding="utf-8")
    at = page.rindex("<!-- gpufabric-integrity {") + len("<!-- gpufabric-integrity {")
    report = tmp_path / REPORT
    report.write_text(page[:at] + '"format":"--><h1>ACCEPTED BY EVERYONE</h1><!--",' + page[at:], encoding="utf-8")
    done = _verify(report, signed_run["pub"], tmp_path)
    assert done.returncode == 1 and 'in its integrity block the key "format" appears twice' in done.stdout


def test_non_finite_misshapen_or_deep_json_is_named_not_a_traceback(signed_run, tmp_path):
    text = signed_run["results"].read_text(encoding="utf-8")
    document = json.loads(text)
    index, check = next((i, c) for i, c in enumerate(document["checks"])
                        if isinstance(c["found"], dict) and isinstance(c["found"].get("busbw_gbps"), float))
    needle = f'"busbw_gbps": {check["found"]["busbw_gbps"]}'
    for number in ("NaN", "Infinity", "1e400"):  # json reads them; a run never writes them
        (tmp_path / RESULTS).write_text(text.replace(needle, f'"busbw_gbps": {number}', 1), encoding="utf-8")
        done = _verify(tmp_path / RESULTS, signed_run["pub"], tmp_path)
        assert done.returncode == 1, done.stdout
        assert f"checks[{index}] {check['name']} {check['subject']}: found changed" in done.stdout
    document["checks"] = 5
    (tmp_path / RESULTS).write_text(json.dumps(document), encoding="utf-8")
    assert _verify(tmp_path / RESULTS, signed_run["pub"], tmp_path).returncode == 1
    (tmp_path / RESULTS).write_text('{"schema_version": 2, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    done = _verify(tmp_path / RESULTS, signed_run["pub"], tmp_path)
    assert done.returncode == 2 and "nests too deep to read" in done.stderr
    page = signed_run["report"].read_text(encoding="utf-8")
    (tmp_path / REPORT).write_text(page.replace('"integrity":{', '"integrity":["x"],"was":{', 1), encoding="utf-8")
    done = _verify(tmp_path / REPORT, signed_run["pub"], tmp_path)
    assert done.returncode == 1 and "the report's embedded results carry no integrity block" in done.stdout


@pytest.mark.parametrize("edit", [{"comment": "audited"}, {"algorithm": "rsa"}, {"public_key": "A" * 43 + "="}])
def test_the_signature_entry_is_checked_field_by_field(signed_run, tmp_path, edit):
    """The entry (algorithm, key_id, public_key, value) is not under the signature itself: each field is checked."""
    document = json.loads(signed_run["results"].read_text(encoding="utf-8"))
    document[INTEGRITY_KEY]["signature"].update(edit)
    (tmp_path / RESULTS).write_text(json.dumps(document), encoding="utf-8")
    done = _verify(tmp_path / RESULTS, signed_run["pub"], tmp_path)
    assert done.returncode == 1 and "its signature entry was edited" in done.stdout


def test_a_bom_or_crlf_is_no_change_but_text_after_the_block_is(signed_run, tmp_path):
    """An editor's byte-order mark or CRLF line endings change nothing a reader sees; text after the report's
    integrity block is named as such (it is not a report without one)."""
    for source in (signed_run["results"], signed_run["report"]):
        data = b"\xef\xbb\xbf" + source.read_bytes().replace(b"\n", b"\r\n")
        (tmp_path / source.name).write_bytes(data)
        done = _verify(tmp_path / source.name, signed_run["pub"], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / REPORT).write_text(signed_run["report"].read_text(encoding="utf-8") + "<h1>ACCEPTED</h1>\n",
                                   encoding="utf-8")
    done = _verify(tmp_path / REPORT, signed_run["pub"], tmp_path)
    assert done.returncode == 1 and "its integrity block is damaged or followed by other text" in done.stdout


def test_a_key_cryptography_cannot_load_exits_2(signed_run, tmp_path):
    """A curve pyca does not support (secp112r1, as openssl writes it) is a key that cannot be read."""
    (tmp_path / "secp112r1.pem").write_text("-----BEGIN PUBLIC KEY-----\n"
                                            "MDIwEAYHKoZIzj0CAQYFK4EEAAYDHgAE13XRxzRCPs4uPJTqdXiMBm2sMSXh80FO\n"
                                            "WWsoLQ==\n-----END PUBLIC KEY-----\n")
    done = _verify(signed_run["results"], tmp_path / "secp112r1.pem", tmp_path)
    assert done.returncode == 2 and "secp112r1.pem: not a PEM public key" in done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_require_signed_refuses_a_node_file_that_is_not_regular(tmp_path):
    """A FIFO (or a link to /dev/zero) as a node's results would be read forever: refused unread."""
    key, pub = _key_pair(tmp_path, "vendor")
    _signed_fleet(tmp_path / "nodes", key)
    fifo = tmp_path / "nodes" / "gpu-02" / RESULTS
    fifo.unlink()
    os.mkfifo(fifo)
    done = _gpufabric("fleet", "report", "--allow-replays", str(tmp_path / "nodes"), "-o", str(tmp_path / "out"),
                      "--require-signed", "--key", str(pub), cwd=tmp_path, timeout=120)
    assert done.returncode == 4 and f"gpu-02: unreadable: {RESULTS} is not a regular file" in done.stderr


def test_a_node_file_changed_between_its_signature_check_and_its_reading_is_not_judged(tmp_path):
    """--require-signed checks the bytes it read and the fleet judges the bytes it read: the fleet's reading must
    find the very bytes whose signature held (a node rewriting its file in between is refused, not judged)."""
    from pytest_gpufabric.fleet.report import build_fleet_document
    from pytest_gpufabric.fleet.signatures import check_node_signatures

    key, pub = _key_pair(tmp_path, "vendor")
    root = tmp_path / "nodes"
    _signed_fleet(root, key)
    signatures, refused, signed = check_node_signatures([root], str(pub))
    assert refused == [] and signatures["verified"] == 3 and len(signed) == 3
    untouched = build_fleet_document([root], None, signed=signed, allow_replays=True)
    assert {n["name"]: n["state"] for n in untouched["nodes"]} == dict.fromkeys(("gpu-01", "gpu-02", "gpu-03"),
                                                                              "reported")
    results = root / "gpu-02" / RESULTS
    document = json.loads(results.read_text(encoding="utf-8"))
    document["checks"][0]["found"] = {"edited": True}  # after the check, before the reading
    results.write_text(json.dumps(document), encoding="utf-8")
    changed = build_fleet_document([root], None, signed=signed, allow_replays=True)
    node = next(n for n in changed["nodes"] if n["name"] == "gpu-02")
    assert node["state"] == "unreadable" and node["verdict"] is None
    assert "changed between the check of their signature and their reading" in node["reason"]
    assert changed["verdict"] != "ACCEPTED"


def test_verify_refuses_what_no_run_writes_unread(tmp_path, monkeypatch):
    """A file larger than any results file or report, or no regular file at all, is said in one line (exit 2),
    never read whole."""
    from pytest_gpufabric.report import signing

    big = tmp_path / "big.json"
    with open(big, "wb") as handle:  # sparse: nothing is written but its size
        handle.truncate(3 * 2**20)
    monkeypatch.setattr(signing, "MAX_VERIFY_BYTES", 1_000_000)
    with pytest.raises(signing.GpuFabricError, match=r"big.json: 3.1 MB, larger than any results file or report "
                                                     r"\(1 MB\): not read"):
        signing.verify_path(big)
    with pytest.raises(signing.GpuFabricError, match="not a regular file"):
        signing.verify_path(tmp_path)
