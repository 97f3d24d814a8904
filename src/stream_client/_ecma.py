"""ECMA-262 regular expressions, as JSON Schema's ``pattern`` means them.

``_ecma_pattern()`` translates a pattern to Python's ``re`` where both mean the
same, and refuses it otherwise (docs/json-schema.md).
"""
import re
import typing
import unicodedata
import warnings

from ._json import SchemaError, _seen


# -- ECMA-262 patterns in Python's re -----------------------------------------------------------------
# JSON Schema patterns are ECMA-262 regular expressions with Unicode semantics. Each one is translated
# construct by construct; what has no faithful translation is refused, never given a looser meaning.
# Compiled with re.ASCII, \d, \w and \b keep ECMA's ASCII meaning; the rest is spelled out here.

# \s: WhiteSpace, LineTerminator
_ECMA_SPACE = '\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff'
_ECMA_NOT_NEWLINE = '[^\n\r\u2028\u2029]'  # what . matches
_CONTROL_ESCAPES = {'t': '\t', 'n': '\n', 'v': '\x0b', 'f': '\x0c', 'r': '\r'}
# General_Category names and aliases ECMA-262 accepts in \p{...}, each to the categories it covers.
_GENERAL_CATEGORIES = {
    'L': 'Lu Ll Lt Lm Lo', 'Letter': 'Lu Ll Lt Lm Lo', 'LC': 'Lu Ll Lt', 'Cased_Letter': 'Lu Ll Lt',
    'Lu': 'Lu', 'Uppercase_Letter': 'Lu', 'Ll': 'Ll', 'Lowercase_Letter': 'Ll', 'Lt': 'Lt',
    'Titlecase_Letter': 'Lt', 'Lm': 'Lm', 'Modifier_Letter': 'Lm', 'Lo': 'Lo', 'Other_Letter': 'Lo',
    'M': 'Mn Mc Me', 'Mark': 'Mn Mc Me', 'Combining_Mark': 'Mn Mc Me', 'Mn': 'Mn', 'Nonspacing_Mark': 'Mn',
    'Mc': 'Mc', 'Spacing_Mark': 'Mc', 'Me': 'Me', 'Enclosing_Mark': 'Me',
    'N': 'Nd Nl No', 'Number': 'Nd Nl No', 'Nd': 'Nd', 'Decimal_Number': 'Nd', 'digit': 'Nd', 'Nl': 'Nl',
    'Letter_Number': 'Nl', 'No': 'No', 'Other_Number': 'No',
    'P': 'Pc Pd Ps Pe Pi Pf Po', 'Punctuation': 'Pc Pd Ps Pe Pi Pf Po', 'punct': 'Pc Pd Ps Pe Pi Pf Po',
    'Pc': 'Pc', 'Connector_Punctuation': 'Pc', 'Pd': 'Pd', 'Dash_Punctuation': 'Pd', 'Ps': 'Ps',
    'Open_Punctuation': 'Ps', 'Pe': 'Pe', 'Close_Punctuation': 'Pe', 'Pi': 'Pi', 'Initial_Punctuation': 'Pi',
    'Pf': 'Pf', 'Final_Punctuation': 'Pf', 'Po': 'Po', 'Other_Punctuation': 'Po',
    'S': 'Sm Sc Sk So', 'Symbol': 'Sm Sc Sk So', 'Sm': 'Sm', 'Math_Symbol': 'Sm', 'Sc': 'Sc',
    'Currency_Symbol': 'Sc', 'Sk': 'Sk', 'Modifier_Symbol': 'Sk', 'So': 'So', 'Other_Symbol': 'So',
    'Z': 'Zs Zl Zp', 'Separator': 'Zs Zl Zp', 'Zs': 'Zs', 'Space_Separator': 'Zs', 'Zl': 'Zl',
    'Line_Separator': 'Zl', 'Zp': 'Zp', 'Paragraph_Separator': 'Zp',
    'C': 'Cc Cf Cs Co Cn', 'Other': 'Cc Cf Cs Co Cn', 'Cc': 'Cc', 'Control': 'Cc', 'cntrl': 'Cc', 'Cf': 'Cf',
    'Format': 'Cf', 'Cs': 'Cs', 'Surrogate': 'Cs', 'Co': 'Co', 'Private_Use': 'Co', 'Cn': 'Cn', 'Unassigned': 'Cn',
}
_CATEGORY_RANGES: dict[str, list[tuple[int, int]]] = {}  # filled once, on the first \p{...}
_PATTERNS: dict[str, re.Pattern] = {}  # each pattern source, translated and compiled once per process


def _category_ranges(category: str) -> list[tuple[int, int]]:
    """The code point ranges of one General_Category, from this Python's Unicode database."""
    if not _CATEGORY_RANGES:
        found: dict[str, list[tuple[int, int]]] = {}
        start, current = 0, unicodedata.category('\0')
        for point in range(1, 0x110000):
            kind = unicodedata.category(chr(point))
            if kind != current:
                found.setdefault(current, []).append((start, point - 1))
                start, current = point, kind
        found.setdefault(current, []).append((start, 0x10FFFF))
        _CATEGORY_RANGES.update(found)  # whole, at once: another thread never sees a part
    return _CATEGORY_RANGES.get(category, [])


def _property_members(name: str) -> str:
    """The members of a class for \\p{name}; SchemaError for a property that has no faithful translation."""
    key = name.split('=', 1)[1] if name.startswith(('General_Category=', 'gc=')) else name
    if key == 'Any':
        return '\\x00-\\U0010ffff'
    if key == 'ASCII':
        return '\\x00-\\x7f'
    if key not in _GENERAL_CATEGORIES:
        raise SchemaError(f'the property class \\p{{{name}}} is not supported (only General_Category '
                          'values, ASCII and Any are)', 'unsupported')
    ranges = sorted(piece for category in _GENERAL_CATEGORIES[key].split() for piece in _category_ranges(category))
    return ''.join(f'\\U{low:08x}' if low == high else f'\\U{low:08x}-\\U{high:08x}' for low, high in ranges)


class _EcmaPattern:
    """One ECMA-262 pattern read left to right and written out as a Python pattern of the same meaning."""

    QUANTIFIER = re.compile(r'\{(\d+)(,(\d*))?\}')

    def __init__(self, source: str) -> None:
        self.source, self.at, self.out = source, 0, []
        self.quantifiable = False  # whether the last piece written may take a quantifier

    def refuse(self, what: str, kind: str = 'unsupported') -> typing.NoReturn:
        raise SchemaError(f'pattern {_seen(self.source)}: {what}', kind)

    def translate(self) -> str:
        source = self.source
        while self.at < len(source):
            char = source[self.at]
            self.at += 1
            if char == '\\':
                self.out.append(self.escape(in_class=False))
                self.quantifiable = self.out[-1] not in ('\\b', '\\B')
            elif char == '[':
                self.out.append(self.character_class())
                self.quantifiable = True
            elif char == '(':
                self.out.append(self.group_opening())
            elif char in '*+?{':
                self.quantifier(char)
            elif char in ')|^':
                self.out.append(char)
                self.quantifiable = char == ')'
            elif char == '$':
                self.out.append('\\Z')  # end of input only: Python's $ also matches before a final newline
                self.quantifiable = False
            elif char == '.':
                self.out.append(_ECMA_NOT_NEWLINE)
                self.quantifiable = True
            else:
                self.out.append(re.escape(char))
                self.quantifiable = True
        return ''.join(self.out)

    def quantifier(self, char: str) -> None:
        if char == '{':
            match = self.QUANTIFIER.match(self.source, self.at - 1)
            if match is None:
                self.out.append('\\{')  # not a quantifier: the character itself
                self.quantifiable = True
                return
            low, _, high = match.groups()
            if high and int(high) < int(low):
                self.refuse(f'the quantifier {match.group()} has its numbers out of order', 'invalid')
            self.at = match.end()
            char = match.group()
        if not self.quantifiable:
            self.refuse(f'nothing to repeat before {char}', 'invalid')
        self.out.append(char)
        if self.source.startswith('?', self.at):  # lazy
            self.out.append('?')
            self.at += 1
        self.quantifiable = False

    def group_opening(self) -> str:
        self.quantifiable = False
        rest = self.source[self.at:]
        for opening in ('?:', '?=', '?!', '?<=', '?<!'):
            if rest.startswith(opening):
                self.at += len(opening)
                return '(' + opening
        name = re.match(r'\?<([A-Za-z_$][A-Za-z0-9_$]*)>', rest)
        if name:
            self.at += name.end()
            return f'(?P<{name.group(1)}>'
        if rest.startswith('?'):
            self.refuse(f'the group ({rest[:2]} is not ECMA-262', 'invalid')
        return '('

    def code_point(self) -> int:
        """After \\u: XXXX, a surrogate pair \\uXXXX\\uXXXX (one code point), or {X...}."""
        braces = re.match(r'\{([0-9A-Fa-f]{1,6})\}', self.source[self.at:])
        if braces:
            self.at += braces.end()
            point = int(braces.group(1), 16)
            if point > 0x10FFFF:
                self.refuse(f'\\u{{{braces.group(1)}}} is beyond U+10FFFF', 'invalid')
            return point
        four = re.match(r'[0-9A-Fa-f]{4}', self.source[self.at:])
        if not four:
            self.refuse('\\u needs four hex digits or {...}', 'invalid')
        self.at += 4
        point = int(four.group(), 16)
        low = re.match(r'\\u(d[c-f][0-9a-f]{2})', self.source[self.at:], re.I)
        if 0xD800 <= point <= 0xDBFF and low:
            self.at += 6
            point = 0x10000 + ((point - 0xD800) << 10) + (int(low.group(1), 16) - 0xDC00)
        return point

    def escape(self, in_class: bool) -> str:
        """The Python for the escape after a backslash: a class member when in_class, else a piece."""
        if self.at >= len(self.source):
            self.refuse('it ends with a lone backslash', 'invalid')
        char = self.source[self.at]
        self.at += 1
        if char in 'dDwW' or (char == 'B' and not in_class):
            return '\\' + char  # ASCII-only under re.ASCII, as in ECMA-262
        if char == 'b':
            return '\\x08' if in_class else '\\b'
        if char == 's':
            return _ECMA_SPACE if in_class else f'[{_ECMA_SPACE}]'
        if char == 'S':
            return f'[^{_ECMA_SPACE}]'
        if char in _CONTROL_ESCAPES:
            return re.escape(_CONTROL_ESCAPES[char])
        if char == 'c':
            letter = self.source[self.at:self.at + 1]
            if not ('A' <= letter <= 'Z' or 'a' <= letter <= 'z'):
                self.refuse('\\c needs a letter', 'invalid')
            self.at += 1
            return f'\\x{ord(letter) % 32:02x}'
        if char == 'x':
            digits = self.source[self.at:self.at + 2]
            if not re.fullmatch(r'[0-9A-Fa-f]{2}', digits):
                self.refuse('\\x needs two hex digits', 'invalid')
            self.at += 2
            return f'\\x{digits}'
        if char == 'u':
            return f'\\U{self.code_point():08x}'
        if char == '0' and not self.source[self.at:self.at + 1].isdigit():
            return '\\x00'
        if char.isdigit():
            self.refuse(f'the backreference \\{char} is not supported (a reference to a group that has not '
                        'matched matches nothing in Python, the empty string in ECMA-262)')
        if char == 'k':
            self.refuse('the named backreference \\k is not supported')
        if char in 'pP':
            name = re.match(r'\{([A-Za-z_=]+)\}', self.source[self.at:])
            if not name:
                self.refuse(f'\\{char} needs a property name in braces', 'invalid')
            self.at += name.end()
            members = _property_members(name.group(1))
            return (members if in_class else f'[{members}]') if char == 'p' else f'[^{members}]'
        if char.isalnum() or char == '_':
            self.refuse(f'the escape \\{char} is not ECMA-262', 'invalid')
        return re.escape(char)

    def character_class(self) -> str:
        """A [...] class. Members that are themselves negated (\\S, \\P{...}) become alternatives."""
        negated = self.source.startswith('^', self.at)
        self.at += negated
        members, complements = [], []
        while True:
            if self.at >= len(self.source):
                self.refuse('a [ is never closed', 'invalid')
            char = self.source[self.at]
            self.at += 1
            if char == ']':
                break
            member = self.escape(in_class=True) if char == '\\' else re.escape(char)
            if member.startswith('[^'):
                complements.append(member)
                continue
            if self.source.startswith('-', self.at) and not self.source.startswith('-]', self.at):
                self.at += 1
                high_char = self.source[self.at]
                self.at += 1
                high = self.escape(in_class=True) if high_char == '\\' else re.escape(high_char)
                if not (_single(member) and _single(high)):
                    self.refuse('a range in a class must go from one character to another', 'invalid')
                if _single(member) > _single(high):
                    self.refuse('a range in a class has its ends out of order', 'invalid')
                member = f'{member}-{high}'
            members.append(member)
        alternatives = ([f'[{"".join(members)}]'] if members else []) + complements
        if not negated:
            return alternatives[0] if len(alternatives) == 1 else f'(?:{"|".join(alternatives) or "(?!)"})'
        if not alternatives:
            return '(?s:.)'
        if not complements:
            return f'[^{"".join(members)}]'
        return f'(?:(?!{"|".join(alternatives)})(?s:.))'


def _single(member: str) -> str | None:
    """The one character a translated class member stands for, or None when it stands for a set."""
    if len(member) == 1:
        return member
    if re.fullmatch(r'\\x[0-9a-fA-F]{2}|\\U[0-9a-f]{8}', member):
        return chr(int(member[2:], 16))
    if len(member) == 2 and member[0] == '\\' and not member[1].isalnum():
        return member[1]
    return None


def _ecma_pattern(source: str) -> re.Pattern:
    """The compiled Python pattern with the meaning of an ECMA-262 pattern, cached; SchemaError
    (naming the construct) when there is no faithful translation."""
    compiled = _PATTERNS.get(source)
    if compiled is None:
        python = _EcmaPattern(source).translate()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                compiled = re.compile(python, re.ASCII)
        except re.error as exc:
            raise SchemaError(f'pattern {_seen(source)} cannot be checked here ({exc})', 'unsupported') from None
        except RecursionError:
            raise SchemaError(f'pattern {_seen(source)} nests too deeply', 'unsupported') from None
        _PATTERNS[source] = compiled
    return compiled
