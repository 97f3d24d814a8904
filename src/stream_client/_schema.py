"""JSON Schema, drafts 2020-12 and 7 (sans-IO).

``JsonSchema`` checks a schema once when it is built and then says why an
instance does not match it, for tool-call arguments and JSON answers.
"""
import itertools
import operator
import re
from urllib.parse import unquote, urljoin, urlsplit

from ._limits import _count
from ._json import _exact, _is_type, _json_key, _properties, SchemaError, _seen, _where
from ._ecma import _ecma_pattern


# -- the schema ---------------------------------------------------------------------------------------

_JSON_TYPES = ('null', 'boolean', 'integer', 'number', 'string', 'array', 'object')
_DRAFTS = {'https://json-schema.org/draft/2020-12/schema': '2020-12', 'http://json-schema.org/draft-07/schema': '7',
          'http://json-schema.org/draft-06/schema': '7', 'http://json-schema.org/draft-04/schema': '7'}
# Keywords that never change whether a value is valid, and are not reported.
_ANNOTATIONS = frozenset({'title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated',
                         'readOnly', 'writeOnly', 'strict', '$vocabulary', '$anchor', '$dynamicAnchor', '$defs',
                         'definitions'})
# Annotations that some tools assert: reported in ``unchecked`` as not asserted.
_NOT_ASSERTED = frozenset({'format', 'contentMediaType', 'contentEncoding', 'contentSchema'})
_COMMON_KEYWORDS = frozenset({
    '$ref', 'type', 'enum', 'const', 'minLength', 'maxLength', 'pattern', 'minimum', 'maximum', 'exclusiveMinimum',
    'exclusiveMaximum', 'multipleOf', 'minItems', 'maxItems', 'uniqueItems', 'items', 'contains', 'required',
    'minProperties', 'maxProperties', 'properties', 'patternProperties', 'additionalProperties', 'propertyNames',
    'allOf', 'anyOf', 'oneOf', 'not', 'if', 'then', 'else'})
_CHECKED_KEYWORDS = {
    '2020-12': _COMMON_KEYWORDS | {'$dynamicRef', 'prefixItems', 'minContains', 'maxContains', 'dependentRequired',
                                  'dependentSchemas', 'unevaluatedItems', 'unevaluatedProperties',
                                  'dependencies'},  # draft 7's, still read by 2020-12 validators for compatibility
    '7': _COMMON_KEYWORDS | {'additionalItems', 'dependencies'},
}
# Where subschemas sit: keyword -> 'one' (a schema), 'list' (schemas), 'map' (name -> schema).
_SUBSCHEMAS = {
    'additionalProperties': 'one', 'propertyNames': 'one', 'not': 'one', 'if': 'one', 'then': 'one', 'else': 'one',
    'contains': 'one', 'unevaluatedItems': 'one', 'unevaluatedProperties': 'one', 'additionalItems': 'one',
    'allOf': 'list', 'anyOf': 'list', 'oneOf': 'list', 'prefixItems': 'list',
    'properties': 'map', 'patternProperties': 'map', '$defs': 'map', 'definitions': 'map', 'dependentSchemas': 'map',
}
_MAX_REFERENCES = 256  # references followed within one check, beyond which a schema is taken to loop
_ROOT_URI = 'urn:stream-client:schema'  # the base URI of a schema without $id


def _join(base: str, ref: str) -> str:
    """A reference resolved against a base URI (RFC 3986), URNs included."""
    if ref.startswith('#'):
        return base.partition('#')[0] + ref
    if urlsplit(ref).scheme:
        return ref
    return urljoin(base, ref)


def _pointer_tokens(fragment: str) -> list[str]:
    """The reference tokens of a JSON pointer fragment, with %-escapes, ~1 and ~0 undone."""
    return [token.replace('~1', '/').replace('~0', '~') for token in unquote(fragment).split('/')[1:]]


class _Seen:
    """What the keywords applied so far evaluated at one instance location (for unevaluated*):
    property names, and array items as a leading count plus single indices."""

    __slots__ = ('names', 'upto', 'indices')

    def __init__(self) -> None:
        self.names: set = set()
        self.upto = 0
        self.indices: set = set()

    def add(self, other: '_Seen') -> None:
        self.names |= other.names
        self.upto = max(self.upto, other.upto)
        self.indices |= other.indices


class _Node:
    """One compiled schema: the checks of its keywords, in a fixed order, and its schema resource.
    Each check takes (value, path, seen, scope) and returns a problem or None; ``final`` holds the
    unevaluated* checks, which run after the others with what they evaluated."""

    __slots__ = ('checks', 'final', 'resource')

    def __init__(self, resource: str) -> None:
        self.checks: list = []
        self.final: list = []
        self.resource = resource

    def problem(self, value: object, path: tuple | None, seen: _Seen | None, scope: tuple) -> str | None:
        if self.resource != scope[0]:
            scope = (self.resource, scope, scope[2])
        if not self.final:
            for check in self.checks:
                problem = check(value, path, seen, scope)
                if problem:
                    return problem
            return None
        own = _Seen()
        for check in itertools.chain(self.checks, self.final):
            problem = check(value, path, own, scope)
            if problem:
                return problem
        if seen is not None:
            seen.add(own)
        return None


class JsonSchema:
    """A JSON Schema (draft 2020-12, or draft 7 and older when ``$schema`` names them), checked when
    built (SchemaError), that says of a value the first place where it breaks the schema.

    Every keyword of the applicator and validation vocabularies is checked, with boolean schemas,
    $ref to any JSON pointer or $anchor of the same document (and $id-relative references within
    it), $dynamicRef, and unevaluatedProperties/unevaluatedItems. Patterns are ECMA-262 and are
    translated faithfully or refused. ``format`` and the content keywords are annotations: they
    are listed in ``unchecked`` as not asserted, with any keyword this draft does not know.
    A reference to another document is refused (kind 'remote'): nothing is ever fetched.
    """

    def __init__(self, schema: object) -> None:
        self.root = schema
        self.unchecked: list[str] = []
        self.draft = self._draft(schema)
        self.keywords = _CHECKED_KEYWORDS[self.draft]
        self._resources: dict[str, object] = {}       # absolute URI (no fragment) -> schema
        self._anchors: dict[str, object] = {}         # absolute URI with #name -> schema
        self._dynamic: set[str] = set()               # the anchors of those that are $dynamicAnchor
        self._base_of: dict[int, str] = {}            # id(schema) -> the base URI it sits under
        self._nodes: dict[int, _Node] = {}
        self._resources[_ROOT_URI] = schema
        try:
            self._register(schema, _ROOT_URI, '#')
            self._node = self._compile(schema, _ROOT_URI, '#')
        except RecursionError:
            raise SchemaError('the schema is nested too deeply to be checked', 'unsupported') from None

    def problem(self, value: object) -> str | None:
        """The first violation, as '$.city: expected string, got 3', or None when the value is valid."""
        try:
            return self._node.problem(value, None, None, (_ROOT_URI, None, 0))
        except RecursionError:  # a value nested deeper than Python's stack: not shown to be valid
            return '$: nested too deeply to be checked against the schema'

    # -- the document: drafts, resources and anchors -------------------------------------------------

    @staticmethod
    def _draft(schema: object) -> str:
        named = schema.get('$schema') if isinstance(schema, dict) else None
        if named is None:
            return '2020-12'
        if not isinstance(named, str):
            raise SchemaError(f'#/$schema: expected a URI, got {_seen(named)}')
        draft = _DRAFTS.get(named.rstrip('#'))
        if draft is None:
            raise SchemaError(f'#/$schema: {named!r} is neither draft 2020-12 nor draft 7 (or older); another '
                              'meta-schema is another document, which is never fetched', 'remote')
        return draft

    def _register(self, schema: object, base: str, where: str) -> None:
        """Record the resources ($id) and anchors of the document, with the base URI of each schema."""
        if not isinstance(schema, dict):
            return
        if where != '#' and '$schema' in schema and _DRAFTS.get(str(schema['$schema']).rstrip('#')) != self.draft:
            raise SchemaError(f'{where}: $schema {_seen(schema["$schema"])} differs from the document\'s; '
                              'one draft per document is supported', 'unsupported')
        ignore_siblings = self.draft == '7' and '$ref' in schema
        identifier = schema.get('$id') if not ignore_siblings else None
        if identifier is not None:
            if not isinstance(identifier, str):
                raise SchemaError(f'{where}/$id: expected a URI reference, got {_seen(identifier)}')
            resolved = _join(base, identifier)
            uri, _, fragment = resolved.partition('#')
            if fragment and self.draft == '7' and identifier.startswith('#'):
                self._anchors[resolved] = schema  # draft 7: "$id": "#name" names a location
            elif fragment:
                raise SchemaError(f'{where}/$id: {identifier!r} has a fragment; use $anchor', 'invalid')
            else:
                base = uri
                self._resources[uri] = schema
        self._base_of[id(schema)] = base
        for keyword in ('$anchor', '$dynamicAnchor') if self.draft == '2020-12' else ():
            name = schema.get(keyword)
            if name is None:
                continue
            if not isinstance(name, str) or not re.fullmatch(r'[A-Za-z_][-A-Za-z0-9._]*', name):
                raise SchemaError(f'{where}/{keyword}: expected a plain name, got {_seen(name)}')
            self._anchors[f'{base}#{name}'] = schema
            if keyword == '$dynamicAnchor':
                self._dynamic.add(f'{base}#{name}')
        if ignore_siblings:
            return
        for keyword, sub, at in self._subschemas(schema, where):
            self._register(sub, base, at)

    def _subschemas(self, schema: dict, where: str):
        """(keyword, subschema, where) for each subschema this draft reads, known keywords only."""
        for keyword, value in schema.items():
            shape = _SUBSCHEMAS.get(keyword) if keyword in self.keywords or keyword in ('$defs', 'definitions') \
                else None
            if keyword == 'items':
                shape = 'list' if isinstance(value, list) and self.draft == '7' else 'one'
            elif keyword == 'dependencies':
                shape = 'map'
            if shape == 'one':
                yield keyword, value, f'{where}/{keyword}'
            elif shape == 'list' and isinstance(value, list):
                for number, sub in enumerate(value):
                    yield keyword, sub, f'{where}/{keyword}/{number}'
            elif shape == 'map' and isinstance(value, dict):
                for name, sub in value.items():
                    if not (keyword == 'dependencies' and isinstance(sub, list)):
                        yield keyword, sub, f'{where}/{keyword}/{name}'

    def _target(self, ref: str, base: str, where: str) -> tuple[object, str]:
        """The schema a reference names, and its base URI; SchemaError when it is not in this document."""
        resolved = _join(base, ref)
        uri, _, fragment = resolved.partition('#')
        if resolved in self._anchors:
            found = self._anchors[resolved]
            return found, self._base_of.get(id(found), uri)
        if uri not in self._resources:
            raise SchemaError(f'{where}: $ref {ref!r} is another document, which is never fetched', 'remote')
        found = self._resources[uri]
        if fragment and not fragment.startswith('/'):
            raise SchemaError(f'{where}: $ref {ref!r} names no $anchor of this schema')
        for token in _pointer_tokens(fragment) if fragment else ():
            if isinstance(found, dict) and token in found:
                found = found[token]
            elif isinstance(found, list) and re.fullmatch(r'0|[1-9][0-9]*', token) and int(token) < len(found):
                found = found[int(token)]
            else:
                raise SchemaError(f'{where}: $ref {ref!r} points to nothing in this schema')
            if isinstance(found, dict) and isinstance(found.get('$id'), str) and id(found) not in self._base_of:
                uri = _join(uri, found['$id']).partition('#')[0]
        if not isinstance(found, (bool, dict)):
            raise SchemaError(f'{where}: $ref {ref!r} points to {_seen(found)}, which is not a schema')
        return found, self._base_of.get(id(found), uri)

    # -- compiling: the schema's keywords to checks ---------------------------------------------------

    def _compile(self, schema: object, base: str, where: str) -> _Node:
        node = self._nodes.get(id(schema))
        if node is not None:
            return node
        if isinstance(schema, bool):
            node = _Node(base)
            if not schema:
                node.checks.append(lambda value, path, seen, scope: f'{_where(path)}: no value is allowed here, '
                                                                    f'got {_seen(value)}')
            return node
        if not isinstance(schema, dict):
            raise SchemaError(f'{where}: a schema must be an object or a boolean, not {_seen(schema)}')
        base = self._base_of.get(id(schema), base)
        node = self._nodes[id(schema)] = _Node(base)  # before its keywords, so that a schema may refer to itself
        overridden = self.draft == '7' and '$ref' in schema  # draft 7: $ref alone counts
        applied = {'$ref': schema['$ref']} if overridden else schema
        for key in schema:
            if key in self.keywords and key not in applied:
                self.unchecked.append(f'{key} at {where} (ignored beside $ref, as draft 7 says)')
            elif key not in self.keywords and key not in _ANNOTATIONS:
                note = ' (an annotation, not asserted)' if key in _NOT_ASSERTED else ''
                self.unchecked.append(f'{key} at {where}{note}')
        for keyword in ('$defs', 'definitions'):
            if keyword in schema and not isinstance(schema[keyword], dict):
                raise SchemaError(f'{where}/{keyword}: expected an object of schemas, got {_seen(schema[keyword])}')
        for build in self._BUILDERS:
            check = build(self, applied, base, where)
            if check is not None:
                (node.final if build in self._FINAL else node.checks).append(check)
        for keyword, sub, at in self._subschemas(schema, where) if not overridden else ():
            self._compile(sub, base, at)  # the schemas under $defs too, so that every error shows now
        return node

    def _sub(self, schema: dict, keyword: str, base: str, where: str) -> _Node:
        return self._compile(schema[keyword], base, f'{where}/{keyword}')

    def _subs(self, schema: dict, keyword: str, base: str, where: str, non_empty: bool = True) -> list[_Node]:
        value = schema[keyword]
        if not isinstance(value, list) or (non_empty and not value):
            raise SchemaError(f'{where}/{keyword}: expected a {"non-empty " if non_empty else ""}list of schemas, '
                              f'got {_seen(value)}')
        return [self._compile(sub, base, f'{where}/{keyword}/{number}') for number, sub in enumerate(value)]

    def _schema_map(self, schema: dict, keyword: str, base: str, where: str) -> dict[str, _Node]:
        value = schema.get(keyword, {})
        if not isinstance(value, dict):
            raise SchemaError(f'{where}/{keyword}: expected an object of schemas, got {_seen(value)}')
        return {name: self._compile(sub, base, f'{where}/{keyword}/{name}') for name, sub in value.items()}

    @staticmethod
    def _count_of(schema: dict, keyword: str, where: str, default: int | None = None) -> int | None:
        """A non-negative integer keyword (2.0 is 2, as the spec says), or the default when absent."""
        if keyword not in schema:
            return default
        value = schema[keyword]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
            raise SchemaError(f'{where}/{keyword}: expected a non-negative integer, got {_seen(value)}')
        return int(value)

    @staticmethod
    def _number_of(schema: dict, keyword: str, where: str) -> int | float | None:
        value = schema.get(keyword)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SchemaError(f'{where}/{keyword}: expected a number, got {_seen(value)}')
        return value

    def _build_ref(self, schema: dict, base: str, where: str):
        if '$ref' not in schema:
            return None
        ref = schema['$ref']
        if not isinstance(ref, str):
            raise SchemaError(f'{where}/$ref: expected a reference, got {_seen(ref)}')
        target, target_base = self._target(ref, base, f'{where}/$ref')
        node = self._compile(target, target_base, f'{where}/$ref')

        def check(value, path, seen, scope):
            if scope[2] >= _MAX_REFERENCES:
                return f'{_where(path)}: the schema refers to itself more than {_MAX_REFERENCES} times here'
            return node.problem(value, path, seen, (scope[0], scope[1], scope[2] + 1))
        return check

    def _build_dynamic_ref(self, schema: dict, base: str, where: str):
        if '$dynamicRef' not in schema or self.draft == '7':
            return None
        ref = schema['$dynamicRef']
        if not isinstance(ref, str):
            raise SchemaError(f'{where}/$dynamicRef: expected a reference, got {_seen(ref)}')
        target, target_base = self._target(ref, base, f'{where}/$dynamicRef')
        initial = self._compile(target, target_base, f'{where}/$dynamicRef')
        resolved = _join(base, ref)
        name = resolved.partition('#')[2]
        dynamic = resolved in self._dynamic  # else it behaves as $ref
        candidates = {uri: self._compile(found, uri.partition('#')[0], f'{where}/$dynamicRef')
                      for uri, found in self._anchors.items() if uri in self._dynamic and uri.endswith('#' + name)}

        def check(value, path, seen, scope):
            if scope[2] >= _MAX_REFERENCES:
                return f'{_where(path)}: the schema refers to itself more than {_MAX_REFERENCES} times here'
            node = initial
            if dynamic:
                resources, link = [], scope
                while link is not None:
                    resources.append(link[0])
                    link = link[1]
                for resource in reversed(resources):  # the outermost dynamic scope first
                    if f'{resource}#{name}' in candidates:
                        node = candidates[f'{resource}#{name}']
                        break
            return node.problem(value, path, seen, (scope[0], scope[1], scope[2] + 1))
        return check

    def _build_type(self, schema: dict, base: str, where: str):
        if 'type' not in schema:
            return None
        names = schema['type'] if isinstance(schema['type'], list) else [schema['type']]
        if not names or any(name not in _JSON_TYPES for name in names) or len(set(names)) != len(names):
            raise SchemaError(f'{where}/type: expected one of {", ".join(_JSON_TYPES)}, got {_seen(schema["type"])}')

        def check(value, path, seen, scope):
            if any(_is_type(value, name) for name in names):
                return None
            return f'{_where(path)}: expected {" or ".join(names)}, got {_seen(value)}'
        return check

    def _build_choices(self, schema: dict, base: str, where: str):
        if 'enum' not in schema and 'const' not in schema:
            return None
        options = schema.get('enum')
        if options is not None and not isinstance(options, list):
            raise SchemaError(f'{where}/enum: expected a list, got {_seen(options)}')
        allowed = None if options is None else {_json_key(option) for option in options}
        constant = _json_key(schema['const']) if 'const' in schema else None

        def check(value, path, seen, scope):
            key = _json_key(value)
            if allowed is not None and key not in allowed:
                return f'{_where(path)}: expected one of {_seen(options)}, got {_seen(value)}'
            if constant is not None and key != constant:
                return f'{_where(path)}: expected {_seen(schema["const"])}, got {_seen(value)}'
            return None
        return check

    def _build_string(self, schema: dict, base: str, where: str):
        low, high = self._count_of(schema, 'minLength', where), self._count_of(schema, 'maxLength', where)
        source = schema.get('pattern')
        if source is not None and not isinstance(source, str):
            raise SchemaError(f'{where}/pattern: expected a regular expression, got {_seen(source)}')
        pattern = _ecma_pattern(source) if source is not None else None
        if low is None and high is None and pattern is None:
            return None

        def check(value, path, seen, scope):
            if not isinstance(value, str):
                return None
            if low is not None and len(value) < low:
                return (f'{_where(path)}: expected at least {_count(low, "character")}, '
                        f'got {_count(len(value), "character")}')
            if high is not None and len(value) > high:
                return (f'{_where(path)}: expected at most {_count(high, "character")}, '
                        f'got {_count(len(value), "character")}')
            if pattern is not None and not pattern.search(value):
                return f'{_where(path)}: expected a match of {source!r}, got {_seen(value)}'
            return None
        return check

    def _build_number(self, schema: dict, base: str, where: str):
        low, high = self._number_of(schema, 'minimum', where), self._number_of(schema, 'maximum', where)
        low_open, high_open = schema.get('exclusiveMinimum'), schema.get('exclusiveMaximum')
        for keyword, value in (('exclusiveMinimum', low_open), ('exclusiveMaximum', high_open)):
            if value is not None and not isinstance(value, (int, float)):
                raise SchemaError(f'{where}/{keyword}: expected a number (or, as in draft 4, a boolean), got '
                                  f'{_seen(value)}')
        if low_open is True:  # draft 4: a flag on minimum
            low, low_open = None, low
        if high_open is True:
            high, high_open = None, high
        divisor = self._number_of(schema, 'multipleOf', where)
        if divisor is not None and divisor <= 0:
            raise SchemaError(f'{where}/multipleOf: expected a number above 0, got {_seen(divisor)}')
        bounds = [(bound, fails, word) for bound, fails, word in (
            (low, operator.lt, 'at least'), (high, operator.gt, 'at most'),
            (low_open if low_open is not False else None, operator.le, 'more than'),
            (high_open if high_open is not False else None, operator.ge, 'less than')) if bound is not None]
        exact_divisor = _exact(divisor) if divisor is not None else None
        if not bounds and divisor is None:
            return None

        def check(value, path, seen, scope):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            for bound, fails, word in bounds:
                if fails(value, bound):
                    return f'{_where(path)}: expected a number {word} {bound}, got {_seen(value)}'
            if exact_divisor is not None and (_exact(value) / exact_divisor).denominator != 1:
                return f'{_where(path)}: expected a multiple of {divisor}, got {_seen(value)}'
            return None
        return check

    def _build_array(self, schema: dict, base: str, where: str):
        low, high = self._count_of(schema, 'minItems', where), self._count_of(schema, 'maxItems', where)
        unique = schema.get('uniqueItems', False)
        if not isinstance(unique, bool):
            raise SchemaError(f'{where}/uniqueItems: expected a boolean, got {_seen(unique)}')
        prefix: list[_Node] = []
        rest = None
        if self.draft == '7' and isinstance(schema.get('items'), list):
            prefix = self._subs(schema, 'items', base, where, non_empty=False)
            rest = self._sub(schema, 'additionalItems', base, where) if 'additionalItems' in schema else None
        else:
            if 'prefixItems' in schema and self.draft != '7':
                prefix = self._subs(schema, 'prefixItems', base, where)
            if 'items' in schema:
                if isinstance(schema['items'], list):
                    raise SchemaError(f'{where}/items: a list of schemas is draft 7\'s items; name draft 7 in '
                                      '$schema, or use prefixItems (draft 2020-12)')
                rest = self._sub(schema, 'items', base, where)
        contains = self._sub(schema, 'contains', base, where) if 'contains' in schema else None
        fewest = self._count_of(schema, 'minContains', where, 1) if self.draft != '7' else 1
        most = self._count_of(schema, 'maxContains', where) if self.draft != '7' else None
        if low is None and high is None and not unique and not prefix and rest is None and contains is None:
            return None

        def check(value, path, seen, scope):
            if not isinstance(value, list):
                return None
            size = len(value)
            if low is not None and size < low:
                return f'{_where(path)}: expected at least {_count(low, "item")}, got {_count(size, "item")}'
            if high is not None and size > high:
                return f'{_where(path)}: expected at most {_count(high, "item")}, got {_count(size, "item")}'
            for number, item in enumerate(value):
                sub = prefix[number] if number < len(prefix) else rest
                if sub is None:
                    break
                problem = sub.problem(item, (path, number), None, scope)
                if problem:
                    return problem
            if seen is not None:
                seen.upto = max(seen.upto, size if rest is not None else min(len(prefix), size))
            if contains is not None:
                problem = self._contains_problem(contains, fewest, most, value, path, seen, scope)
                if problem:
                    return problem
            return _duplicate(value, path) if unique else None
        return check

    @staticmethod
    def _contains_problem(contains: _Node, fewest: int, most: int | None, value: list, path, seen, scope):
        matched = [number for number, item in enumerate(value)
                   if contains.problem(item, (path, number), None, scope) is None]
        if seen is not None:
            seen.indices.update(matched)
        if len(matched) < fewest:
            return (f'{_where(path)}: expected at least {_count(fewest, "item")} matching "contains", '
                    f'got {len(matched)}')
        if most is not None and len(matched) > most:
            return f'{_where(path)}: expected at most {_count(most, "item")} matching "contains", got {len(matched)}'
        return None

    def _build_object(self, schema: dict, base: str, where: str):
        required = schema.get('required', [])
        if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
            raise SchemaError(f'{where}/required: expected a list of names, got {_seen(required)}')
        low, high = self._count_of(schema, 'minProperties', where), self._count_of(schema, 'maxProperties', where)
        properties = self._schema_map(schema, 'properties', base, where)
        patterns = [(_ecma_pattern(source), node) for source, node in
                    self._schema_map(schema, 'patternProperties', base, where).items()]
        extra = self._sub(schema, 'additionalProperties', base, where) if 'additionalProperties' in schema else None
        extra_false = schema.get('additionalProperties') is False
        names = self._sub(schema, 'propertyNames', base, where) if 'propertyNames' in schema else None
        needs, dependents = self._dependencies(schema, base, where)
        if not (required or low is not None or high is not None or properties or patterns or extra or names or
                needs or dependents):
            return None

        def check(value, path, seen, scope):
            if not isinstance(value, dict):
                return None
            for name in required:
                if name not in value:
                    return f'{_where((path, name))}: required, but missing'
            if low is not None and len(value) < low:
                return f'{_where(path)}: expected at least {_properties(low)}, got {len(value)}'
            if high is not None and len(value) > high:
                return f'{_where(path)}: expected at most {_properties(high)}, got {len(value)}'
            for name, item in value.items():
                here = (path, name)
                node = properties.get(name)
                matched = node is not None
                if matched:
                    problem = node.problem(item, here, None, scope)
                    if problem:
                        return problem
                for pattern, sub in patterns:
                    if pattern.search(name):
                        matched = True
                        problem = sub.problem(item, here, None, scope)
                        if problem:
                            return problem
                if not matched and extra is not None:
                    if extra_false:
                        return f'{_where(here)}: not allowed (additionalProperties is false)'
                    problem = extra.problem(item, here, None, scope)
                    if problem:
                        return problem
                if matched or extra is not None:
                    if seen is not None:
                        seen.names.add(name)
                if names is not None:
                    problem = names.problem(name, None, None, scope)
                    if problem:
                        return f'the name of {_where(here)}: {problem.partition(": ")[2]}'
            for name, wanted in needs:
                if name in value:
                    for other in wanted:
                        if other not in value:
                            return (f'{_where((path, other))}: required when {_where((path, name))} is present, '
                                    'but missing')
            for name, node in dependents:
                if name in value:
                    problem = node.problem(value, path, seen, scope)
                    if problem:
                        return problem
            return None
        return check

    def _dependencies(self, schema: dict, base: str, where: str) -> tuple[list, list]:
        """(name, names it requires) and (name, schema applied when it is present), from
        dependentRequired/dependentSchemas (2020-12) and dependencies (draft 7, and 2020-12 too)."""
        needs, dependents = [], []
        for keyword in ('dependencies',) if self.draft == '7' else ('dependentRequired', 'dependentSchemas',
                                                                     'dependencies'):
            value = schema.get(keyword)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise SchemaError(f'{where}/{keyword}: expected an object, got {_seen(value)}')
            for name, sub in value.items():
                if keyword != 'dependentSchemas' and isinstance(sub, list):
                    if not all(isinstance(other, str) for other in sub):
                        raise SchemaError(f'{where}/{keyword}/{name}: expected a list of names, got {_seen(sub)}')
                    needs.append((name, sub))
                elif keyword == 'dependentRequired':
                    raise SchemaError(f'{where}/{keyword}/{name}: expected a list of names, got {_seen(sub)}')
                else:
                    dependents.append((name, self._compile(sub, base, f'{where}/{keyword}/{name}')))
        return needs, dependents

    def _build_combined(self, schema: dict, base: str, where: str):
        every = self._subs(schema, 'allOf', base, where) if 'allOf' in schema else []
        some = self._subs(schema, 'anyOf', base, where) if 'anyOf' in schema else None
        one = self._subs(schema, 'oneOf', base, where) if 'oneOf' in schema else None
        negated = self._sub(schema, 'not', base, where) if 'not' in schema else None
        condition = self._sub(schema, 'if', base, where) if 'if' in schema else None
        then = self._sub(schema, 'then', base, where) if 'then' in schema and condition else None
        otherwise = self._sub(schema, 'else', base, where) if 'else' in schema and condition else None
        if not every and some is None and one is None and negated is None and condition is None:
            return None

        def check(value, path, seen, scope):
            for node in every:
                problem = node.problem(value, path, seen, scope)
                if problem:
                    return problem
            if some is not None:
                problem = _any_of_problem(some, value, path, seen, scope)
                if problem:
                    return problem
            if one is not None:
                problem = _one_of_problem(one, value, path, seen, scope)
                if problem:
                    return problem
            if negated is not None and negated.problem(value, path, None, scope) is None:
                return f'{_where(path)}: expected not to match the schema under "not", got {_seen(value)}'
            if condition is not None and (then or otherwise or seen is not None):
                own = _Seen() if seen is not None else None
                branch = then if condition.problem(value, path, own, scope) is None else otherwise
                if own is not None and branch is then:
                    seen.add(own)
                if branch is not None:
                    return branch.problem(value, path, seen, scope)
            return None
        return check

    def _build_unevaluated_items(self, schema: dict, base: str, where: str):
        if 'unevaluatedItems' not in schema or self.draft == '7':
            return None
        node = self._sub(schema, 'unevaluatedItems', base, where)

        def check(value, path, seen, scope):
            if not isinstance(value, list):
                return None
            for number in range(seen.upto, len(value)):
                if number not in seen.indices:
                    problem = node.problem(value[number], (path, number), None, scope)
                    if problem:
                        return problem
            seen.upto = len(value)
            return None
        return check

    def _build_unevaluated_properties(self, schema: dict, base: str, where: str):
        if 'unevaluatedProperties' not in schema or self.draft == '7':
            return None
        node = self._sub(schema, 'unevaluatedProperties', base, where)
        refused = schema['unevaluatedProperties'] is False

        def check(value, path, seen, scope):
            if not isinstance(value, dict):
                return None
            for name, item in value.items():
                if name not in seen.names:
                    if refused:
                        return f'{_where((path, name))}: not allowed (unevaluatedProperties is false)'
                    problem = node.problem(item, (path, name), None, scope)
                    if problem:
                        return problem
            seen.names.update(value)
            return None
        return check

    _BUILDERS = (_build_ref, _build_dynamic_ref, _build_type, _build_choices, _build_string, _build_number,
                 _build_array, _build_object, _build_combined, _build_unevaluated_items,
                 _build_unevaluated_properties)
    _FINAL = (_build_unevaluated_items, _build_unevaluated_properties)


def _duplicate(value: list, path) -> str | None:
    """The second of two equal items, as JSON equality sees them, in linear time. Only the hash of
    each item's key is kept (a large array of keys would crowd memory); equal hashes are compared."""
    first: dict[int, list[int]] = {}
    for number, item in enumerate(value):
        key = _json_key(item)
        earlier = first.setdefault(hash(key), [])
        if any(_json_key(value[other]) == key for other in earlier):
            return f'{_where((path, number))}: expected unique items, got {_seen(item)} twice'
        earlier.append(number)
    return None


def _any_of_problem(nodes: list[_Node], value, path, seen, scope) -> str | None:
    """None when a schema of anyOf matches; with ``seen``, every one is tried, for what it evaluates."""
    problems, matched = [], False
    for node in nodes:
        own = _Seen() if seen is not None else None
        problem = node.problem(value, path, own, scope)
        if problem is None:
            matched = True
            if seen is None:
                return None
            seen.add(own)
        else:
            problems.append(problem)
    return None if matched else f'{_where(path)}: matches none of anyOf ({"; ".join(problems)})'


def _one_of_problem(nodes: list[_Node], value, path, seen, scope) -> str | None:
    matching = []
    for node in nodes:
        own = _Seen() if seen is not None else None
        if node.problem(value, path, own, scope) is None:
            matching.append(own)
    if len(matching) != 1:
        return f'{_where(path)}: matches {len(matching)} of oneOf, expected exactly 1'
    if seen is not None:
        seen.add(matching[0])
    return None
