"""A request's headers read where the WSGI server put them, in ``request.META``
(docs/bench-log/2026-12-03.md, "Headers read from the environ").

``request.headers`` (Django's ``HttpHeaders``) copies every ``HTTP_*`` entry of the environ
into a case-insensitive mapping when first read, and each lookup goes through three layers
of Python; a webhook delivery reads about twenty headers (its scheme's, its integration's,
the ones kept on the inbox row, the correlation id's), most of them absent. ``EnvironHeaders``
answers the same lookups with one dictionary read each: the WSGI server names each header
``HTTP_`` + its name upper-cased with ``-`` as ``_`` (PEP 3333), so a name is turned into that
key (once per name) and read from the environ. Lookups by name answer as ``request.headers``
does (``tests/core/test_headers.py`` holds them to it); views that need more keep
``request.headers``."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping

from django.http.request import HttpHeaders


@functools.lru_cache(maxsize=1024)  # names come from the code, a bounded set
def environ_key(name: str) -> str:
    """The environ key under which a WSGI server stores header ``name`` (``X-Request-Id``:
    ``HTTP_X_REQUEST_ID``; ``Content-Type`` and ``Content-Length``: without the prefix), or
    ``""`` for a name that is not ASCII once lower-cased, which no server stores (HTTP names
    are tokens). Lower-cased first, as ``request.headers`` compares names."""
    folded = name.lower()
    if not folded.isascii():
        return ""
    return HttpHeaders.to_wsgi_name(folded)


class EnvironHeaders(Mapping[str, str]):
    """The headers of the request whose environ (``request.META``) is given, looked up by
    name as ``request.headers`` looks them up: any case, ``_`` for ``-``."""

    __slots__ = ("_environ",)

    def __init__(self, environ: Mapping[str, object]):
        self._environ = environ

    def get(self, name, default=None):
        # One dictionary read: what Mapping.get would do through __getitem__ and a KeyError
        # for every absent header. Environ entries that are not strings are not headers.
        key = environ_key(name)
        value = self._environ.get(key) if key else None
        return value if isinstance(value, str) else default

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        for key in self._environ:
            name = HttpHeaders.parse_header_name(key)
            if name:
                yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)
