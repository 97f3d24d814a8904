"""The headers a user adds to every request (``--header 'Name: value'``), checked before anything is sent.

The client owns the framing and the key: Host, Content-Length, Transfer-Encoding and Connection follow
from the request itself, and Authorization comes from MODEL_API_KEY only; a header of those names is
refused. A header's value may be a tenant key or a session token, so no message ever quotes it: the
record keeps the names only (``request.headers``), and a value the server echoes back is masked in the
record and the capture as the key is (``_header_secrets()``).
"""
import re

from ._limits import UsageError
from ._http import _TOKEN

# The names the client sets itself, lower case, and why a user may not.
_OWNED_HEADERS = {'host': 'the client sends the host of --url',
                  'content-length': 'the client frames the body itself',
                  'transfer-encoding': 'the client frames the body itself',
                  'connection': 'the client manages its connections (--keep-alive)',
                  'authorization': 'the key is read from MODEL_API_KEY only, never from the command line'}
_FIELD_NAME = re.compile(_TOKEN.decode())  # a field name (RFC 9110, section 5.1)
_VALUE = re.compile(r'[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?')  # visible ASCII, inner spaces only
_MAX_HEADERS = 64
_MAX_VALUE_CHARS = 8192
_MIN_MASKED_CHARS = 8  # a value this long or longer is masked where the server echoes it


def _parse_header(text: str) -> tuple[str, str]:
    """'Name: value' (as curl -H takes it) as (name, value); UsageError naming the name, never the value."""
    name, colon, value = text.partition(':')
    if not colon:
        raise UsageError("--header takes 'Name: value' (a colon between the name and the value)")
    return name, value.strip(' \t')


def _checked_headers(headers) -> tuple[tuple[str, str], ...]:
    """headers (a mapping or (name, value) pairs) checked, in order; ValueError starting with 'header'
    for a name that is not a token, one the client owns, one given twice, or a value that cannot be sent.
    The messages name the header, never its value."""
    pairs = tuple(headers.items() if isinstance(headers, dict) else headers)
    if len(pairs) > _MAX_HEADERS:
        raise ValueError(f'header: at most {_MAX_HEADERS} headers, got {len(pairs)}')
    seen: set[str] = set()
    for number, pair in enumerate(pairs):
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(part, str) for part in pair)):
            raise ValueError('header: each header is a (name, value) pair of strings')
        name, value = pair
        if not _FIELD_NAME.fullmatch(name):
            raise ValueError(f'header[{number}]: a name is letters, digits and !#$%&\'*+.^_`|~- only, with '
                             'nothing before the colon but the name (neither is shown, as either may hold a secret)')
        if name.lower() in _OWNED_HEADERS:
            raise ValueError(f'header {name!r} is set by the client ({_OWNED_HEADERS[name.lower()]}); it cannot be '
                             'given')
        if name.lower() in seen:
            raise ValueError(f'header {name!r} is given twice')
        seen.add(name.lower())
        if len(value) > _MAX_VALUE_CHARS or not _VALUE.fullmatch(value):
            raise ValueError(f'header {name!r}: the value must be 1 to {_MAX_VALUE_CHARS} visible ASCII characters '
                             '(spaces inside only); the value is not shown')
    return pairs


def _with_headers(headers: dict, added: tuple[tuple[str, str], ...]) -> dict:
    """The client's headers with the user's added; one of the same name (in any case) replaces the client's."""
    names = {name.lower() for name, _ in added}
    return {**{name: value for name, value in headers.items() if name.lower() not in names}, **dict(added)}


def _header_secrets(added: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The values to mask in what the server sends back: each of at least _MIN_MASKED_CHARS characters
    (a shorter one, say "1" or "eu", would mask every such string of the answer and its framing)."""
    return tuple(value for _, value in added if len(value) >= _MIN_MASKED_CHARS)
