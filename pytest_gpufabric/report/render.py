"""The Jinja2 environment of the report and the fleet page: templates/ of this package, autoescaping on for every
template (so no value can become markup by omission), undefined names an error (a template that asks for data the
Python side did not prepare fails its test, not the customer's page)."""

from __future__ import annotations

import functools
from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")


@functools.lru_cache(maxsize=1)
def environment():
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=False, lstrip_blocks=False,
                              keep_trailing_newline=False, finalize=_cleaned)


def _cleaned(value: object) -> object:
    """Every value a template prints, its control characters written out (formats/clean.py): a GPU's name or a
    node's folder name cannot put an escape sequence into a page that is later printed or piped to a terminal."""
    if not isinstance(value, str):
        return value
    from ..formats.clean import clean_text

    cleaned = clean_text(value)
    return value if cleaned == value else type(value)(cleaned)  # Markup stays Markup, its text cleaned


def render(name: str, **data) -> str:
    """The template ``name`` rendered with ``data`` (plain values: str, numbers, lists, dicts)."""
    return environment().get_template(name).render(**data)


def trusted(text: str):
    """Text the caller vouches is safe inside the page as it is: only the embedded results JSON, whose '<', '>' and
    '&' html_signing.embed_results_json writes as JSON escapes."""
    from markupsafe import Markup

    return Markup(text)
