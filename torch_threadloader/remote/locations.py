"""Item locations: a list, a function of the index, or a template with columns expanded
lazily; none may leave its base."""

from __future__ import annotations

import operator
import re
import string
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from torch_threadloader.remote.errors import LocationError, redact_url

__all__ = ["Locations", "make_locations", "template_base", "template_path_base"]

LocationsArg = Sequence[str] | Callable[[int], str] | str


class Locations:
    """The location of each item, by index: ``len()`` items, ``locations[i]`` a string.

    Built by :func:`make_locations`; a location is made (and checked) only when asked for, so
    a template over ten million rows costs nothing up front. ``base``: when not empty, every
    location must start with it (a template's base: see :func:`template_base`) and the
    rest must pass :func:`path_problem` (the path as a server sees it: no ``.``, ``..`` or
    empty segment in any spelling, ...); a relative location from a list or function is
    appended to it. A base ending in ``:`` (a template whose port is a field) takes a port
    number (1 to 65535) and a ``/`` first; with a host or port field, ``path_base`` (see
    :func:`template_path_base`) must follow the host and port. A location that breaks this
    raises :class:`LocationError` naming the item; nothing outside the base is ever
    returned. A list or function without ``base`` is used as it is. Messages and ``repr``
    show locations and the base redacted (:func:`redact_url`)."""

    def __init__(self, get: Callable[[int], Any], length: int, base: str, what: str, path_base: str = "/") -> None:
        self._checked = bool(base) or what == "template"
        self._get = get
        self._length = length
        self.base = base
        self.what = what
        self.path_base = path_base

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> str:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"an item index must be an integer, got {type(index).__name__}") from None
        n = self._length
        if not -n <= i < n:
            raise IndexError(f"item {i} is out of range: the dataset has {n} items")
        if i < 0:
            i += n
        location = self._get(i)
        if not isinstance(location, str):
            raise LocationError(f"item {i}: the location from the {self.what} is {type(location).__name__}, not str")
        return self._check(i, location)

    def _check(self, index: int, location: str) -> str:
        base = self.base
        if not self._checked:
            return location
        if not base:
            rest = location
        elif location.startswith(base):
            rest = location[len(base) :]
        elif "://" in location or location.startswith("/") or base.endswith(":"):
            raise LocationError(
                f"item {index}: {redact_url(location)!r} is outside the base {redact_url(base)!r}; it is not fetched"
            )
        else:
            rest = location
            location = base + location
        if base.endswith(":"):  # the template's port is a field: a number, then the path
            port = re.match(r"([0-9]{1,5})/", rest)
            if port is None or not 0 < int(port.group(1)) < 65536:
                raise LocationError(
                    f"item {index}: {redact_url(location)!r} has no port number and '/' after the base "
                    f"{redact_url(base)!r}; it is not fetched"
                )
            rest = rest[port.end() :]
            if not rest.startswith(self.path_base[1:]):
                raise self._outside_path(index, location)
        elif base.endswith("://") and not ("/" + rest.partition("/")[2]).startswith(self.path_base):
            raise self._outside_path(index, location)
        problem = path_problem(rest, relative=bool(base), http=is_http(location))
        if problem:
            raise LocationError(
                f"item {index}: {redact_url(location)!r} leaves its base {redact_url(base)!r} ({problem}); "
                f"it is not fetched"
            )
        return location

    def _outside_path(self, index: int, location: str) -> LocationError:
        return LocationError(
            f"item {index}: {redact_url(location)!r} has not the template's path {self.path_base!r} after its "
            f"host and port (the base {redact_url(self.base)!r}); it is not fetched"
        )

    def __repr__(self) -> str:
        return f"Locations({self.what}, {self._length} items, base={redact_url(self.base)!r})"


#: Where a URL's path ends, as a client sends it (the query and fragment are not path).
_PATH_END = re.compile(r"[?#]")
#: What an encoded character in an HTTP path may not decode to: it would change the path a
#: server sees (an encoded ``?`` or ``#`` ends it for a server that decodes first, as nginx does).
_ENCODED_IN_PATH = (("?", "an encoded '?'"), ("#", "an encoded '#'"))
_IIS_ESCAPE = re.compile(r"%u[0-9a-fA-F]{4}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: A path of plain segments (no escape, no segment starting with a dot, no empty one but a
#: last): nothing in it can climb, so the full check is skipped (the common case, fast).
_PLAIN = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9_~.-]*(?:/[A-Za-z0-9_~-][A-Za-z0-9_~.-]*)*/?")
_PLAIN_HTTP = re.compile(_PLAIN.pattern + r"(?:[?#].*)?", re.DOTALL)  # then a query or fragment


def is_http(location: str) -> bool:
    """Whether ``location`` is an ``http(s)://`` URL (its path ends at ``?`` or ``#``)."""
    return location[:8].lower().startswith(("http://", "https://"))


def path_problem(rest: str, *, relative: bool, http: bool) -> str:
    """Why ``rest`` (the part of a location after its base) could reach outside the base
    on a server that decodes and normalises paths (nginx: percent-decode, then resolve
    ``.`` and ``..``; Tomcat: drop ``;`` parameters; IIS: ``%u`` escapes, trailing dots and
    spaces, full-width characters), or ``""``.

    With ``http``, the path is cut at the first literal ``?`` or ``#`` *before* decoding, as
    a client sends it; an encoded ``?`` or ``#`` left in it is refused. Then the path,
    percent-decoded repeatedly (``%252e`` -> ``%2e`` -> ``.``, each step strict UTF-8, so
    an overlong ``%c0%ae`` is refused), and again after NFKC normalisation, may hold no
    backslash, NUL or other control character, ``%u`` escape, segment of dots only (``.``, ``..``, ``...``, after
    dropping ``;`` parameters and surrounding spaces), empty segment, URL, nor (when
    ``relative``) a leading ``/``."""
    if (_PLAIN_HTTP if http else _PLAIN).fullmatch(rest):
        return ""
    path = _PATH_END.split(rest, maxsplit=1)[0] if http else rest
    decoded, problem = _fully_decoded(path)
    return problem or _decoded_problem(decoded, relative=relative, http=http)


def _fully_decoded(path: str) -> tuple[str, str]:
    """``path`` percent-decoded until it no longer changes (each step strict UTF-8), and
    ``""``; or ``""`` and why it cannot be."""
    decoded = path
    try:
        for _ in range(8):  # %252e%252e -> %2e%2e -> ..
            once = unquote(decoded, errors="strict")
            if once == decoded:
                return decoded, ""
            decoded = once
    except UnicodeDecodeError:
        return "", "a percent-escape that is not UTF-8"
    return "", "encoded more times than a location needs"


def _decoded_problem(decoded: str, *, relative: bool, http: bool) -> str:
    """What :func:`path_problem` refuses in a fully decoded path, or ``""``."""
    if _IIS_ESCAPE.search(decoded):
        return "a %u escape"
    if http:
        for char, what in _ENCODED_IN_PATH:
            if char in decoded:
                return what
    for form in dict.fromkeys((decoded, unicodedata.normalize("NFKC", decoded))):
        problem = _segments_problem(form, relative=relative)
        if problem:
            return problem
    return ""


def _char_problem(decoded: str) -> str:
    if "\\" in decoded:
        return "a backslash"
    if "\x00" in decoded:
        return "a NUL character"
    if _CONTROL.search(decoded):
        return "a control character"
    return ""


def _segments_problem(decoded: str, *, relative: bool) -> str:
    problem = _char_problem(decoded)
    if problem:
        return problem
    if relative and decoded.startswith("/"):
        return "an absolute path"
    if "://" in decoded:
        if relative:
            return "a URL"
        decoded = decoded.split("://", 1)[1]  # a whole URL from a column: its path is checked
    segments = decoded.split("/")
    # "..;x" is ".." to servers that drop path parameters; ".. " and "..." to those that trim.
    for s in segments:
        bare = s.split(";", 1)[0].strip()
        if bare and not bare.strip("."):
            return "a '.' or '..' segment"
    if any(s == "" for s in segments[1:-1]) or (relative and len(segments) > 1 and segments[0] == ""):
        return "an empty path segment"
    return ""


def template_base(template: str) -> str:
    """The part of ``template`` before its first field, up to and including the last ``/``
    (``"s3://b/train/{id}.jpg"`` -> ``"s3://b/train/"``), except when that field is glued to
    a host: then the host is the template's, whole (``"http://cdn.example.com{path}"`` ->
    ``"http://cdn.example.com/"``: the field must start the path, so no column changes the
    host), or a field right after ``host:`` is the port (base ``"http://h:"``). A field right
    after ``scheme://`` makes the host a column (base ``"http://"``)."""
    literal = ""
    for text, field, _spec, _conv in string.Formatter().parse(template):
        literal += text
        if field is not None:
            break
    _scheme, sep, authority = literal.partition("://")
    if sep and authority and "/" not in authority:  # the first field is inside the host part
        return literal if authority.endswith(":") else literal + "/"
    cut = literal.rfind("/")
    return literal[: cut + 1] if cut >= 0 else ""


def template_path_base(template: str) -> str:
    """For a template whose host or port is a field (its base ends with ``://`` or ``:``):
    the literal path after the host and port, up to its last ``/`` before the next field
    (``"http://{host}/data/{p}"`` -> ``"/data/"``); ``"/"`` otherwise. Every location of
    such a template has this path after its host and port, and its redirects stay under it."""
    base = template_base(template)
    if not base.endswith(("://", ":")):
        return "/"
    after_field = False
    for text, field, _spec, _conv in string.Formatter().parse(template):
        if after_field and "/" in text:
            path = text[text.index("/") :]
            return path[: path.rfind("/") + 1]
        after_field = after_field or field is not None
    return "/"


def make_locations(
    locations: LocationsArg,
    *,
    length: int | None = None,
    columns: Mapping[str, Sequence[Any]] | None = None,
    base: str | None = None,
) -> Locations:
    """Item locations from one of three forms:

    - a sequence of strings (``length`` must be ``None`` or its length);
    - a function of the index, with ``length`` (the number of items);
    - a ``str.format`` template with ``columns``, one sequence per field, all of one length
      (row ``i`` takes ``column[i]`` of each: a table, not a product); ``base`` is the
      template's text up to the last ``/`` before the first field.

    ``base`` (lists and functions): see :class:`Locations`. Errors name the argument."""
    if isinstance(locations, str):
        return _template(locations, length=length, columns=columns, base=base)
    if columns is not None:
        raise TypeError("columns is for a template (a str with {fields}); the locations here are not one")
    base = _check_base(base)
    if callable(locations):
        if length is None:
            raise TypeError("length is required with a function of the index as locations")
        return Locations(locations, _check_length(length), base, f"function {getattr(locations, '__name__', '?')}")
    if isinstance(locations, Sequence):
        n = len(locations)
        if length is not None and _check_length(length) != n:
            raise ValueError(f"length={length} but the locations list has {n} entries")
        return Locations(locations.__getitem__, n, base, "list")
    raise TypeError(
        f"locations must be a list of strings, a function of the index (with length=) or a template "
        f"str (with columns=), got {type(locations).__name__}"
    )


def _template(
    template: str, *, length: int | None, columns: Mapping[str, Sequence[Any]] | None, base: str | None
) -> Locations:
    fields = {field for _t, field, _s, _c in string.Formatter().parse(template) if field is not None}
    if not fields:
        raise TypeError(
            f"locations is the single string {template!r}; pass a list of one, or a template with {{fields}}"
        )
    if columns is None:
        raise TypeError(f"columns is required with the template {template!r} (fields: {sorted(fields)})")
    if base is not None:
        raise TypeError("base is taken from the template (its text before the first field); do not pass it")
    names = {f.split(".", 1)[0].split("[", 1)[0] for f in fields}
    if any(not name or name.isdigit() for name in names):
        raise ValueError(f"template {template!r}: every field must be named (no {{}} or {{0}})")
    missing = sorted(names - set(columns))
    if missing:
        raise ValueError(f"template {template!r} names fields with no column: {missing}")
    unused = sorted(set(columns) - names)
    if unused:
        raise ValueError(f"columns {unused} are not in the template {template!r}")
    lengths = {name: len(columns[name]) for name in sorted(names)}
    n = next(iter(lengths.values()))
    if any(v != n for v in lengths.values()):
        raise ValueError(f"the columns of a template must have one length, got {lengths}")
    if length is not None and _check_length(length) != n:
        raise ValueError(f"length={length} but the template's columns have {n} rows")
    cols = {name: columns[name] for name in names}

    def expand(i: int) -> str:
        row = {name: col[i] for name, col in cols.items()}
        try:
            return template.format_map(row)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise LocationError(f"item {i}: the template's fields cannot take {row!r}: {exc}") from None

    return Locations(expand, n, template_base(template), "template", template_path_base(template))


def _check_base(base: str | None) -> str:
    if base is None:
        return ""
    if not isinstance(base, str) or not base:
        raise TypeError(f"base must be a non-empty str or None, got {base!r}")
    return base if base.endswith("/") else base + "/"


def _check_length(length: int) -> int:
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an int >= 0, got {length!r}")
    return length
