"""Strict JSON (_json), without a socket: strict_json's refusals, every event's JSON read as json.loads reads
it, records written whole whatever the server's text, and surrogate pairs split between deltas."""
from __future__ import annotations

import json
import unittest

import stream_client
from .tiers import sans_io


@sans_io
class JsonTests(unittest.TestCase):
    def test_strict_json_refuses_what_json_loads_lets_through(self):
        for text in ('NaN', '-Infinity', '{"a": Infinity}', '1e999', '26e00008859', '{"a": 1, "a": 2}', '{} {}'):
            with self.subTest(text=text), self.assertRaises(ValueError):
                stream_client.strict_json(text)
        self.assertEqual(stream_client.strict_json(' {"a": [1, 2.5, null, true]} '), {'a': [1, 2.5, None, True]})

    def test_strict_json_reads_as_json_loads_with_its_hooks_does(self):
        """strict_json keeps one decoder for every call: each text still gets what json.loads(text, **hooks) gives,
        or its exception and message (a byte order mark first, an empty text, trailing text, nesting)."""
        hooks = stream_client._json._STRICT_HOOKS
        for text in ('{"b": 1, "a": {"b": 2.5}}', '\ufeff{}', '', '  ', '[1, 2] x', '"\\ud800"', '{"a": NaN}',
                     '[' * 5000 + ']' * 5000, '{"k": "v", "k": "v"}', '{"a": 1}', ' 7 '):
            with self.subTest(text=text[:20]):
                try:
                    expected = json.loads(text, **hooks)
                except (ValueError, RecursionError) as exc:
                    with self.assertRaises(ValueError) as raised:
                        stream_client.strict_json(text)
                    if not isinstance(exc, RecursionError):
                        self.assertEqual(str(raised.exception), str(exc))
                else:
                    self.assertEqual(stream_client.strict_json(text), expected)

    def test_an_events_json_is_what_json_loads_says(self):
        """_json_value() calls json.loads's scanner directly: every text gets json.loads's value, or its
        exception with its message, including those the scanner alone would read differently."""
        texts = ['{"a": [1, 2.5, null, true]}', ' {"a": 1}', '{"a": 1} \t\r\n', '{"a": 1}\x0b', '{"a": 1}\u00a0',
                 '\ufeff{"a": 1}', '', ' ', '{"a": 1}{}', '{"a": 1} x', 'NaN', '"s"', '12', '-', '{"a": }',
                 '{"a": 1', '[' * 100_000, '{"a": 1, "a": 2}', '1e999', 'tru', 'true ', '[1]]', '{"a": "\\ud800"}']

        def outcome(loads, text):
            try:
                return 'value', loads(text)
            except (ValueError, RecursionError) as exc:
                return type(exc).__name__, str(exc)
        for text in texts:
            with self.subTest(text=text[:20]):
                self.assertEqual(outcome(stream_client._json._json_value, text), outcome(json.loads, text))

    def test_a_record_is_written_whole_whatever_the_servers_text(self):
        self.assertEqual(stream_client._json._json_text({'text': 'w\u00e9'}), '{"text": "w\u00e9"}')  # kept itself
        for value in ('X\ud83d', '\ude00', 'a\ud83d\ude00b'):  # halves of a pair, as a server's escapes may bring
            with self.subTest(value=ascii(value)):
                text = stream_client._json._json_text({'text': value})
                text.encode('utf-8')  # UTF-8 can hold it: no lone surrogate left in the text
                # read back as JSON reads the server's escapes: a pair is its character, a lone half stays
                self.assertEqual(json.loads(text), {'text': stream_client._json._paired(value)})

    def test_a_dict_written_from_its_parts_texts_is_what_json_text_writes(self):
        """_GrowingJson gives _json_text's bytes for a dict whose list grows, whose first item and other values
        are replaced in place, and which holds non-ASCII text and lone surrogates (which make the whole text
        escaped, not the item alone)."""
        json_text = stream_client._json._json_text
        additions = [{'role': 'user', 'content': 'h\u00e9', 'z': 1, 'a': [None, 1.5]}, {'b': {'y': 1, 'x': 2}},
                     {'content': 'X\ud83d'}, {'content': '\ud83d'}, {}, {'content': '\u2028 "q" \\'}]
        for sort_keys in (False, True):
            growing, items = stream_client._json._GrowingJson('messages', sort_keys=sort_keys), []
            value = {'model': 'm', 'messages': [], 'stream': True, 'tools': [{'\u00fc': 'k'}]}
            with self.subTest(sort_keys=sort_keys, items=0):
                self.assertEqual(growing.text(value), json_text(value, sort_keys=sort_keys))
            for count, item in enumerate(additions, 1):
                items.append(json.loads(json.dumps(item)))  # the escapes decoded: lone halves as JSON gives them
                for replaced in (False, True):
                    listed = [{**items[0], 'content': f'[salt {count}] x'}, *items[1:]] if replaced else list(items)
                    value = {'model': 'm', 'messages': listed, 'stream': True,
                             'tools': [{'\u00fc': 'k'}] if replaced else value['tools'], 'system': f's{count}'}
                    with self.subTest(sort_keys=sort_keys, items=count, replaced=replaced):
                        self.assertEqual(growing.text(value), json_text(value, sort_keys=sort_keys))
            self.assertTrue(growing.text(value).isascii())  # a lone half: all of it escaped

    def test_a_pair_split_between_strings_is_its_character_and_a_lone_half_stays(self):
        paired, same = stream_client._json._paired, stream_client._json._same_text
        self.assertEqual(paired('X\ud83d' + '\ude00Y'), 'X\U0001f600Y')
        self.assertEqual(paired('X\ud83dY'), 'X\ud83dY')
        self.assertEqual(paired('\ude00\ud83d'), '\ude00\ud83d')  # halves in the wrong order pair with nothing
        self.assertEqual(paired('plain'), 'plain')
        self.assertTrue(same('X\U0001f600Y', 'X\ud83d\ude00Y'))
        self.assertFalse(same('X\U0001f601Y', 'X\ud83d\ude00Y'))
        self.assertFalse(same(None, ''))


if __name__ == '__main__':
    unittest.main()
