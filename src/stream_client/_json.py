"""Strict JSON: what ``json.loads`` accepts, less what a careful reader refuses.

``strict_json()`` refuses duplicate keys, NaN and Infinity, and numbers beyond
the float range, for tool-call arguments and JSON answers. ``_json_value()`` is
``json.loads`` itself, in fewer steps, for every event's data; ``_json_text()``
writes what any UTF-8 file can hold.
"""
import fractions
import itertools
import json
import math
import operator
import re

from ._limits import _shorten


_SURROGATE = re.compile('[\ud800-\udfff]')


def _paired(text: str) -> str:
    """text with each surrogate pair joined into its character. JSON writes a character beyond the BMP as
    two escaped halves (RFC 8259, section 7); when a stream's deltas split the two, each delta decodes to a
    lone half, and the deltas joined hold two code points where a whole copy holds one character. Lone
    halves that pair with nothing stay as they are."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode('utf-16-le', 'surrogatepass').decode('utf-16-le', 'surrogatepass')


def _same_text(claimed: object, assembled: str) -> bool:
    """Whether a closing copy (or an unstreamed twin's text) says the same text the deltas assembled,
    surrogate pairs split between deltas counted as their characters (_paired)."""
    return claimed == assembled or (isinstance(claimed, str) and _paired(claimed) == _paired(assembled))


class SchemaError(ValueError):
    """A schema (of a tool's parameters, or of --json-schema) that cannot be checked. ``kind`` says why:
    'invalid' (the schema breaks its draft's rules), 'remote' (it needs another document, which is never
    fetched) or 'unsupported' (a construct that cannot be checked faithfully, e.g. a pattern Python's re
    cannot express with ECMA-262's meaning)."""

    def __init__(self, message: str, kind: str = 'invalid') -> None:
        super().__init__(message)
        self.kind = kind


def _reject_constant(name: str) -> None:
    raise ValueError(f'{name} is not JSON')


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f'the number {_shorten(text, 30)} is out of range (it would be {value})')
    return value


def _unique_keys(pairs: list) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f'the key {_shorten(repr(repeated), 40)} appears twice')
    return value


_STRICT_HOOKS = {'parse_constant': _reject_constant, 'parse_float': _finite_float, 'object_pairs_hook': _unique_keys}
_STRICT_DECODE = json.JSONDecoder(**_STRICT_HOOKS).decode  # what json.loads(text, **_STRICT_HOOKS) builds at each call


def strict_json(text: str) -> object:
    """One JSON value and nothing else (RFC 8259): ValueError for NaN, Infinity, a number out of the
    float range, a repeated key, trailing text or anything json.loads refuses."""
    try:
        if isinstance(text, str) and not text.startswith('\ufeff'):  # json.loads refuses a byte order mark first
            return _STRICT_DECODE(text)
        return json.loads(text, **_STRICT_HOOKS)
    except RecursionError:
        raise ValueError('nested too deeply') from None


_SCAN = json.JSONDecoder().scan_once  # the scanner json.loads runs, in C where CPython has it
_JSON_WHITESPACE = ' \t\n\r'


def _json_value(text: str) -> object:
    """What ``json.loads(text)`` returns or raises, for a str: the scanner it runs is called directly when
    the text starts with its value (a server's event data does), and json.loads itself decides the rest
    (leading whitespace, a byte order mark, no value, text after the value)."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        return json.loads(text)
    return value


def _json_text(value: object, **options) -> str:
    """``json.dumps`` for a file or a terminal: non-ASCII characters as themselves, unless a string holds a
    lone surrogate, which no UTF-8 text can (a server's JSON escape ``\\ud800`` decodes to one): then every
    non-ASCII character is escaped, and nothing is lost."""
    return _utf8_or_escaped(json.dumps(value, ensure_ascii=False, **options), value, options)


def _utf8_or_escaped(text: str, value: object, options: dict) -> str:
    """text (value's JSON with non-ASCII characters as themselves) when UTF-8 can hold it, else value's JSON
    with every non-ASCII character escaped."""
    if not text.isascii():
        try:
            text.encode('utf-8')
        except UnicodeEncodeError:
            return json.dumps(value, **options)
    return text


def _utf8_json(around: tuple[str, str], middle: str, value_of, **options) -> bytes:
    """around[0] + middle + around[1] (a value's JSON with non-ASCII characters as themselves) in UTF-8; when
    it holds a lone surrogate, which UTF-8 cannot, value_of()'s JSON with every non-ASCII character escaped,
    as _json_text writes it."""
    try:
        return (around[0] + middle + around[1]).encode()
    except UnicodeEncodeError:
        return json.dumps(value_of(), **options).encode()


class _GrowingJson:
    """``_json_text(value, sort_keys=...)`` of a dict written again and again (a session's request body, each
    turn), whose list under one key grows (the history): each pair, and each item of that list, is encoded
    once, and again only when the dict holds another object in its place (a salted first message). What
    it is given is not changed once given. A dict whose other pairs stay the same is written faster as its
    text around() the list and the list's list_text() (see _utf8_json)."""

    def __init__(self, key: str, sort_keys: bool = False) -> None:
        self.key, self.sort_keys = key, sort_keys
        self.encode = json.JSONEncoder(ensure_ascii=False, sort_keys=sort_keys).encode  # what json.dumps calls
        self.pairs: dict[str, tuple[object, str]] = {}  # name: (its value, the pair's text)
        self.items: list = []
        self.texts: list[str] = []

    def text(self, value: dict) -> str:
        """The dict's JSON, byte for byte what _json_text writes (json.dumps joins pairs with ', ' and ': ')."""
        parts, pairs = [], self.pairs
        for name in (sorted(value) if self.sort_keys else value):
            item = value[name]
            kept = pairs.get(name)
            if kept is None or kept[0] is not item:
                written = self.list_text(item) if name == self.key and isinstance(item, list) else self.encode(item)
                kept = pairs[name] = item, f'{self.encode(name)}: {written}'
            parts.append(kept[1])
        return _utf8_or_escaped('{' + ', '.join(parts) + '}', value, {'sort_keys': self.sort_keys})

    def around(self, value: dict) -> tuple[str, str]:
        """The dict's JSON before and after the value of the key (which it holds), as text() writes it."""
        names = sorted(value) if self.sort_keys else list(value)
        at = names.index(self.key)
        pairs = [f'{self.encode(name)}: {self.encode(value[name])}' for name in names]
        return ('{' + ''.join(pair + ', ' for pair in pairs[:at]) + f'{self.encode(self.key)}: ',
                ''.join(', ' + pair for pair in pairs[at + 1:]) + '}')

    def list_text(self, items: list) -> str:
        """The list's JSON (its items given before encoded once)."""
        known, texts = self.items, self.texts
        for index in itertools.compress(range(len(known)), map(operator.is_not, items, known)):
            known[index], texts[index] = items[index], self.encode(items[index])
        for item in items[len(known):]:
            known.append(item)
            texts.append(self.encode(item))
        return '[' + ', '.join(texts if len(items) == len(texts) else texts[:len(items)]) + ']'


_TYPE_NAMES = {float: 'number', str: 'string', list: 'array', dict: 'object'}


def _json_type(value: object) -> str:
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'boolean'
    if isinstance(value, int):
        return 'integer'
    return _TYPE_NAMES[type(value)]


def _is_type(value: object, name: str) -> bool:
    kind = _json_type(value)
    return kind == name or (name == 'number' and kind == 'integer') or \
        (name == 'integer' and kind == 'number' and float(value).is_integer())


def _json_key(value: object) -> tuple:
    """A hashable stand-in that is equal exactly when the values are equal as JSON: 1 and 1.0 are
    equal, true and 1 are not, and the order of an object's members does not matter."""
    if isinstance(value, bool) or value is None:
        return ('literal', value)
    if isinstance(value, (int, float)):
        return ('number', value)  # Python's 1 == 1.0 and hash(1) == hash(1.0), exactly as JSON means it
    if isinstance(value, str):
        return ('string', value)
    if isinstance(value, list):
        return ('array', tuple(_json_key(item) for item in value))
    return ('object', frozenset((name, _json_key(item)) for name, item in value.items()))


def _exact(number: int | float) -> fractions.Fraction:
    """The number as its shortest decimal text says it, exactly: 0.1 is 1/10, not the binary float."""
    return fractions.Fraction(number if isinstance(number, int) else repr(number))


def _where(path: tuple | None) -> str:
    """An instance location, kept as (parent, key) pairs while checking, in the user's terms: $.tags[2]."""
    keys = []
    while path is not None:
        path, key = path
        keys.append(key)
    text = '$'
    for key in reversed(keys):
        text = _child(text, key)
    return text


def _child(path: str, key: object) -> str:
    if isinstance(key, int):
        return f'{path}[{key}]'
    return f'{path}.{key}' if re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', key) else f'{path}[{json.dumps(key)}]'


def _properties(number: int) -> str:
    return f'{number} {"property" if number == 1 else "properties"}'


def _seen(value: object) -> str:
    return _shorten(json.dumps(value, ensure_ascii=False), 40)
