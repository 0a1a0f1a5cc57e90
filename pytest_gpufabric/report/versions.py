"""A results document judged again by the rules of its format, or refused: never its own claims taken as given.

``gpufabric verify`` and the fleet both call :func:`judge_again`. The format (``schema_version``) is a field the file
controls, so it never decides *whether* a file is judged, only *how*:

- the current format (RESULTS_SCHEMA_VERSION) and format 3: judged again from the file's tests, checks and promise
  list, the list made again from the profile the file embeds (rejudge.derive_verdict);
- format 2 (before the promise list came from the profile): judged with the promise list made again from the
  profile the file embeds; a format-2 file that embeds no profile cannot show what was promised, and is refused;
- format 1 (before the verdict had promises), any other number, a string or a boolean: refused, the version named.
"""

from __future__ import annotations

from ..catalogue import CHECK_HERE
from ..rejudge import derive_verdict
from .results import RESULTS_SCHEMA_VERSION

__all__ = ["NotJudgeable", "judge_again", "version_problem"]

#: the formats whose files carry their own promise list (results.schema.json: ``promised``)
_WITH_PROMISE_LIST = (3, RESULTS_SCHEMA_VERSION)


class NotJudgeable(ValueError):
    """A results document whose verdict cannot be derived again from its own evidence; the message says why."""


def version_problem(version: object) -> str | None:
    """Why a ``schema_version`` value is no format a verdict can be judged again by, or None when it is one."""
    if isinstance(version, bool) or not isinstance(version, int):
        return f"its results format {version!r} is not a format number (pytest-gpufabric writes an integer)"
    if version == 1:
        return "it is results format 1, written before the verdict had promises: its verdict cannot be judged again"
    if version not in (2, *_WITH_PROMISE_LIST):
        newer = version > RESULTS_SCHEMA_VERSION
        return (f"it is results format {version}, " + (
            f"newer than this pytest-gpufabric reads (up to {RESULTS_SCHEMA_VERSION})" if newer
            else "which no version of pytest-gpufabric wrote") + ": its verdict cannot be judged")
    return None


def with_promise_list(document: dict) -> dict:
    """The document as its format's rules judge it: a format-2 file gets an empty promise list of its own, so the
    list is made again, whole, from the profile it embeds (catalogue.expected_promises adds every id the profile
    makes). Raises NotJudgeable where that cannot be done, or where a later format lacks its list."""
    version = document.get("schema_version")
    problem = version_problem(version)
    if problem:
        raise NotJudgeable(problem)
    if not isinstance(document.get("tests"), dict) or not isinstance(document.get("checks"), list):
        raise NotJudgeable("it holds no tests and checks to judge its promises by")
    if version in _WITH_PROMISE_LIST:
        profile = document.get("profile")
        if profile is not None and not isinstance(document.get("promised"), dict):
            raise NotJudgeable(f"it is results format {version} without its promise list (promised): what was "
                               "promised cannot be shown")
        if profile is not None and not (isinstance(profile, dict) and isinstance(profile.get("data"), dict)):
            raise NotJudgeable(f"it is results format {version} without the profile it ran (profile.data): its "
                               "promise list cannot be made again from it")
        return document
    profile = document.get("profile")
    if not isinstance(profile, dict) or not isinstance(profile.get("data"), dict):
        raise NotJudgeable("it is results format 2 and embeds no profile: the promise list cannot be made again "
                           "from its profile, so what was promised cannot be shown (run the acceptance again)")
    return {**document, "promised": {"promised": [], "scope": ""}}


def judge_again(document: dict, embedded=CHECK_HERE) -> tuple[str, str, dict]:
    """(verdict, reason, promise counts) of a results document by the rules of its format (rejudge.derive_verdict;
    ``embedded``: the profile it embeds, checked already, as there). Raises NotJudgeable as the module says."""
    judged = with_promise_list(document)
    try:
        return derive_verdict(judged, embedded)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise NotJudgeable(f"its promises cannot be judged again ({type(exc).__name__}: {exc})") from None
