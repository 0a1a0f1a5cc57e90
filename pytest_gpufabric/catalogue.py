"""What a profile promises: every promise id, computed from the profile alone, before any test runs.

The verdict is a statement about these promises, not about the tests pytest happened to run: a promise of this
list that no test judged (deselected, ignored, not collected, interrupted) is *not checked*, whatever pytest
selected. The list is made on the pytest-xdist controller as well as without xdist, written into the results
(``promised``), and read again by the fleet report and ``gpufabric verify``.

Each kind of promise is declared once, in its family under kinds/ (its name, what it is in words, the suite that
judges it, and which of its ids a profile makes); the suites' ``@promise(name)`` markers name the kind, and a test
is promised exactly when its id is on this list. Some promises are the operator's to ask for (the burn-in, with
``--gpu-burn-in``): a run that leaves them out says so in its verdict ("ACCEPTED without the burn-in the profile
promises").

Plain functions of plain data: no pytest, no NVML.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from .kinds import Kind, promise_kinds
from .kinds.base import BURN_IN
from .kinds.burn_in import SECTION as BURN_IN_SECTION
from .profile.loader import canonical_json
from .profile.model import Profile

__all__ = ["BURN_IN", "KINDS", "PromiseKind", "PromiseList", "Promised", "promise_list"]

#: a kind of promise (kinds/base.py), by the name a site's plugin knows it
PromiseKind = Kind

#: how a verdict names a part the operator left out
SCOPE_WORDS = {BURN_IN: "the burn-in"}


@dataclass(frozen=True)
class Promised:
    """One promise the run must judge: its id, what it is, the suite that judges it."""

    id: str
    what: str
    suite: str
    asked: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PromiseList:
    """The promises of one run: ``promised`` must each be judged; ``left_out`` the profile makes but the operator
    did not ask for this time (``why``: part -> why it was left out)."""

    promised: tuple[Promised, ...]
    left_out: tuple[Promised, ...] = ()
    why: tuple[tuple[str, str], ...] = ()  # part -> why the run does not include it
    asked: frozenset[str] = frozenset()  # the parts the operator asked for
    site_kinds: frozenset[str] = frozenset()  # the names of the kinds a site's plugin added

    def makes_kind(self, name: str) -> bool:
        """Whether ``name`` is a kind of promise this run's list is made of (shipped, or a site's)."""
        return name in KINDS or name in self.site_kinds

    def not_asked(self, promise_id: str) -> str | None:
        """Why this run does not judge a promise of a part the operator asks for (the burn-in), or None."""
        kind = KINDS.get(promise_id.split("[", 1)[0])
        if kind is None or kind.asked is None or kind.asked in self.asked:
            return None
        return dict(self.why).get(kind.asked, f"not asked for ({SCOPE_WORDS.get(kind.asked, kind.asked)})")

    def ids(self) -> list[str]:
        return [p.id for p in self.promised]

    def get(self, promise_id: str) -> Promised | None:
        return self._by_id().get(promise_id)

    def _by_id(self) -> dict[str, Promised]:
        cached = self.__dict__.get("_index")
        if cached is None:
            cached = {p.id: p for p in self.promised}
            object.__setattr__(self, "_index", cached)
        return cached

    @property
    def scope(self) -> str:
        """'' for the whole acceptance, else "without the burn-in the profile promises"."""
        parts = sorted({p.asked for p in self.left_out if p.asked})
        if not parts:
            return ""
        return "without " + " and ".join(SCOPE_WORDS.get(part, part) for part in parts) + " the profile promises"

    def to_json(self) -> dict:
        return {"promised": [p.to_dict() for p in self.promised],
                "left_out": [p.to_dict() for p in self.left_out],
                "left_out_why": {part: why for part, why in self.why if any(p.asked == part for p in self.left_out)},
                "scope": self.scope}


# --- the kinds ------------------------------------------------------------------------------------------------

#: every kind of promise, in promise order: the registry's view (kinds/), each kind declared in its family
KINDS: dict[str, PromiseKind] = promise_kinds()

#: the suite that judges another tool's results (evidence.py): its promises come from the evidence given
_EVIDENCE = "test_evidence.py"


def promise_id(name: str, params: str) -> str:
    return f"{name}[{params}]" if params else name


def profile_promises_burn_in(profile) -> bool:
    """A profile promises a burn-in when it says how one is judged (its ``burn_in:`` section)."""
    return BURN_IN_SECTION in profile.data


def promise_list(profile, *, asked: Iterable[str] = (), left_out_why: dict[str, str] | None = None,
                 evidence_promises: Iterable[tuple[str, str]] = (),
                 site_kinds: Iterable[PromiseKind] = ()) -> PromiseList:
    """Every promise this run must judge, from the profile alone.

    ``asked``: the parts the operator asked for (BURN_IN); a part the profile promises but the run does not
    include is ``left_out``, with ``left_out_why[part]`` saying why. ``evidence_promises``: (id, what) of the
    results another tool's output given with the run speaks to (``dcgmi diag``, nvbandwidth), each a promise to
    pass it; an id the profile already makes is not listed twice. ``site_kinds``: the kinds a site's plugin adds
    (hookspecs.pytest_gpufabric_promise_kinds), after the shipped ones."""
    asked = set(asked)
    promised: list[Promised] = []
    left_out: list[Promised] = []
    for kind in [*KINDS.values(), *site_kinds]:
        entries = [Promised(promise_id(kind.name, params), kind.what, kind.suite, kind.asked)
                   for params in kind.ids(profile)]
        if kind.asked is None or kind.asked in asked:
            promised += entries
        elif kind.asked == BURN_IN and profile_promises_burn_in(profile):
            left_out += entries
    seen = {p.id for p in promised}
    for pid, what in evidence_promises:
        if pid not in seen:
            seen.add(pid)
            promised.append(Promised(pid, what, _EVIDENCE))
    why = tuple(sorted((left_out_why or {}).items()))
    return PromiseList(tuple(promised), tuple(left_out), why, frozenset(asked),
                       frozenset(kind.name for kind in site_kinds))


# --- reading a results document again (the fleet report, gpufabric verify) ---------------------------------------

#: the id of the promise that a results file's embedded profile is the one its sha256 names
PROFILE_INTEGRITY = "profile-integrity"


#: expected_promises' default: the embedded profile is checked against its sha256 there
CHECK_HERE = object()


#: kinds a results format made first: a file of an earlier format was judged before they existed, and is not held to
#: them when it is judged again (versions.py keeps the format from deciding *whether* a file is judged)
ADDED_IN_FORMAT = {kind.name: kind.added_in_format for kind in KINDS.values() if kind.added_in_format}


def _made_before(promise_id: str, version: object) -> bool:
    """Whether a results file of format ``version`` was written before the kind of ``promise_id`` existed."""
    since = ADDED_IN_FORMAT.get(promise_id.split("[", 1)[0])
    return since is not None and isinstance(version, int) and not isinstance(version, bool) and version < since


def expected_promises(document: dict, embedded=CHECK_HERE) -> tuple[list[str] | None, str, dict[str, str]]:
    """(the ids a results document must have judged, its scope, why for those it lacks on its own list).

    The document's own ``promised`` list, and where it embeds its resolved profile, the list made again from that
    profile: an id the profile makes but the file's list lacks is expected all the same (a list edited shorter
    does not shrink the promise). A profile that is not the one its sha256 names is itself a promise not kept.
    None for results written before the list was (formats 1 and 2): the caller judges them as they were.
    ``embedded``: what embedded_profile gave for this document's profile part, where the caller has it (the fleet's
    reader checks a fleet's one profile once, not once per node); by default it is checked here."""
    block = document.get("promised")
    if not isinstance(block, dict):
        return None, "", {}
    ids = [p["id"] for p in block.get("promised") or []]
    why: dict[str, str] = {}
    profile_doc = document.get("profile") or {}
    if isinstance(profile_doc.get("data"), dict):
        profile = embedded_profile(profile_doc) if embedded is CHECK_HERE else embedded
        if profile is None:
            ids.append(PROFILE_INTEGRITY)
            why[PROFILE_INTEGRITY] = "the profile these results embed is not the one their profile.sha256 names"
        else:
            asked = frozenset(p.get("asked") for p in block.get("promised") or [] if p.get("asked"))
            listed = set(ids)
            version = document.get("schema_version")
            for pid in _profile_ids(profile, asked):
                if pid not in listed and not _made_before(pid, version):
                    ids.append(pid)
                    why[pid] = ("the profile these results embed is not a profile" if pid == PROFILE_INTEGRITY else
                                "the profile promises it, but the results' own promise list lacks it")
    return ids, str(block.get("scope") or ""), why


def _profile_ids(profile, asked: frozenset) -> list[str]:
    """The ids a profile makes (a fleet's nodes share a profile: made once per profile and scope)."""
    key = (profile.sha256, asked)
    if key not in _IDS_OF_PROFILE:
        try:
            _IDS_OF_PROFILE[key] = promise_list(profile, asked=asked).ids()
        except (KeyError, TypeError, ValueError, AttributeError):  # a document no validated profile could be
            _IDS_OF_PROFILE[key] = [PROFILE_INTEGRITY]
    return _IDS_OF_PROFILE[key]


_IDS_OF_PROFILE: dict[tuple, list[str]] = {}


def embedded_profile(profile_doc: dict):
    """The Profile a results document's profile part embeds (``data``), or None when it is not the one the part's
    ``sha256`` names (or not a profile)."""
    import hashlib

    data, sha256 = profile_doc.get("data"), str(profile_doc.get("sha256") or "")
    try:
        if hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest() != sha256:
            return None
        return Profile(name=str(data["name"]), path=None, sha256=sha256, data=data)
    except (KeyError, TypeError, ValueError):
        return None
