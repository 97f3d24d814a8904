"""Workload files, the conversations and the prompts they make, sans-IO.

``_parse_sessions()`` reads a --sessions file (JSON Lines of sessions, or a
ShareGPT-style JSON array) into ``_Session`` values, and ``_parse_trace()`` a
--trace file (Mooncake's JSON Lines, or timestamps and prompts) into
``_TraceLine`` values; both raise UsageError naming the file, the line and the
field. ``_Conversation`` is the history one session sends, in its API's shape.
``_prompt_words()`` builds a prompt's words deterministically: the words of a
block depend on its id alone, so equal hash_ids give byte-equal prefixes. No
socket, no clock.
"""
import dataclasses
import hashlib
import json
import random

from ._limits import UsageError


_DEFAULT_TOOL_ROUNDS = 4   # tool rounds per turn at most, unless a session says
_MAX_TOOL_ROUNDS = 64
_SESSION_KEYS = ('id', 'system', 'tools', 'turns', 'tool_results', 'max_tool_rounds', 'think_time_s')
_SHAREGPT_USER = ('human', 'user')
_SHAREGPT_MODEL = ('gpt', 'assistant', 'chatgpt', 'model', 'bing', 'bard')


@dataclasses.dataclass(frozen=True)
class _Session:
    """One conversation of a --sessions file: its user turns, the tools it offers (chat-completions shape)
    and what the agent returns for each tool's calls (a tuple consumed in order, its last result
    repeating), the tool rounds a turn may take, and the seconds the agent thinks between turns."""

    id: str
    turns: tuple[str, ...]
    where: str = dataclasses.field(default='', compare=False)  # the file and line, for messages
    system: str | None = None
    tools: list | None = None
    tool_results: dict = dataclasses.field(default_factory=dict)  # tool name -> tuple of result strings
    max_tool_rounds: int = _DEFAULT_TOOL_ROUNDS
    think_time_s: float = 0.0


class _ToolResults:
    """The results one session's run hands out: per tool, the next of its list (the last repeats)."""

    def __init__(self, session: _Session) -> None:
        self._results, self._used = session.tool_results, {}

    def next(self, name: str) -> str:
        results = self._results[name]
        used = self._used.get(name, 0)
        self._used[name] = used + 1
        return results[min(used, len(results) - 1)]


def _result_text(value: object) -> str:
    """A tool's result as the conversation carries it: a string as it is, any other JSON value as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _bad(where: str, field: str, problem: str) -> UsageError:
    return UsageError(f'{where}: {field}: {problem}')


def _parse_sessions(path: str, text: str) -> list[_Session]:
    """The sessions of a --sessions file's text: a JSON array (ShareGPT) if it starts with [, else JSON
    Lines of sessions. UsageError names the file, the line (or item) and the field at fault."""
    if text.lstrip().startswith('['):
        return _sharegpt_sessions(path, text)
    sessions, seen = [], {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f'--sessions {path} line {number}'
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise UsageError(f'{where}: not JSON ({exc})') from None
        session = _session(where, value)
        if session.id in seen:
            raise _bad(where, 'id', f'{session.id!r} is the id of line {seen[session.id]} too')
        seen[session.id] = number
        sessions.append(session)
    if not sessions:
        raise UsageError(f'--sessions {path} has no sessions')
    return sessions


def _session(where: str, value: object) -> _Session:
    """One line of a sessions file, checked."""
    if not isinstance(value, dict):
        raise UsageError(f'{where}: expected a JSON object with "id" and "turns"')
    unknown = sorted(set(value) - set(_SESSION_KEYS))
    if unknown:
        raise _bad(where, unknown[0], f'unknown key; a session has {", ".join(_SESSION_KEYS)}')
    for key in ('id', 'turns'):
        if key not in value:
            raise _bad(where, key, 'missing')
    if not isinstance(value['id'], str) or not value['id']:
        raise _bad(where, 'id', 'must be a non-empty string')
    turns = value['turns']
    if not isinstance(turns, list) or not turns:
        raise _bad(where, 'turns', 'must be a non-empty list of user messages')
    for index, turn in enumerate(turns):
        if not isinstance(turn, str) or not turn:
            raise _bad(where, f'turns[{index}]', 'must be a non-empty string')
    system = value.get('system')
    if system is not None and not isinstance(system, str):
        raise _bad(where, 'system', 'must be a string')
    tools = value.get('tools')
    names = _tool_names(where, tools)
    results = value.get('tool_results', {})
    if not isinstance(results, dict):
        raise _bad(where, 'tool_results', 'must be an object: per tool name, a result or a list of results')
    for name in names:
        if name not in results:
            raise _bad(where, 'tool_results', f'no result for tool {name!r}')
    for name, result in results.items():
        if name not in names:
            raise _bad(where, f'tool_results.{name}', 'no tool of that name is offered')
        if isinstance(result, list) and not result:
            raise _bad(where, f'tool_results.{name}', 'an empty list gives no result')
    rounds = value.get('max_tool_rounds', _DEFAULT_TOOL_ROUNDS)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 0 <= rounds <= _MAX_TOOL_ROUNDS:
        raise _bad(where, 'max_tool_rounds', f'must be a whole number from 0 to {_MAX_TOOL_ROUNDS}')
    think = value.get('think_time_s', 0)
    if isinstance(think, bool) or not isinstance(think, (int, float)) or not 0 <= think <= 3600:
        raise _bad(where, 'think_time_s', 'must be a number of seconds from 0 to 3600')
    return _Session(value['id'], tuple(turns), where, system, tools,
                    {name: tuple(map(_result_text, result if isinstance(result, list) else [result]))
                     for name, result in results.items()}, rounds, float(think))


def _tool_names(where: str, tools: object) -> list[str]:
    """The names of a session's tools (chat-completions shape), checked."""
    if tools is None:
        return []
    if not isinstance(tools, list) or not tools:
        raise _bad(where, 'tools', 'must be a non-empty list of tools in the chat-completions shape')
    names = []
    for index, tool in enumerate(tools):
        function = tool.get('function') if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get('name'), str) or not function['name']:
            raise _bad(where, f'tools[{index}].function.name', 'missing: a tool is {"type": "function", '
                                                               '"function": {"name", "parameters"}}')
        names.append(function['name'])
    return names


def _sharegpt_sessions(path: str, text: str) -> list[_Session]:
    """ShareGPT-style conversations: [{"id"?, "conversations": [{"from", "value"}, ...]}, ...]. The human
    turns become the user turns, a system entry the system message; the model's turns are left out (the
    live model answers instead)."""
    try:
        items = json.loads(text)
    except (ValueError, RecursionError) as exc:
        line = getattr(exc, 'lineno', None)
        raise UsageError(f'--sessions {path}' + (f' line {line}' if line else '') + f': not JSON ({exc})') from None
    sessions, seen = [], {}
    for number, item in enumerate(items, 1):
        where = f'--sessions {path} item {number}'
        entries = item.get('conversations') if isinstance(item, dict) else None
        if not isinstance(entries, list):
            raise _bad(where, 'conversations', 'missing: expected {"conversations": [{"from", "value"}, ...]}')
        turns, system = [], None
        for index, entry in enumerate(entries):
            speaker = entry.get('from') if isinstance(entry, dict) else None
            said = entry.get('value') if isinstance(entry, dict) else None
            if not isinstance(said, str):
                raise _bad(where, f'conversations[{index}].value', 'must be a string')
            if speaker in _SHAREGPT_USER:
                turns.append(said)
            elif speaker == 'system':
                system = said
            elif speaker not in _SHAREGPT_MODEL:
                raise _bad(where, f'conversations[{index}].from', f'{speaker!r} is not human, gpt or system')
        if not turns:
            raise _bad(where, 'conversations', 'no human turn')
        name = item.get('id')
        name = name if isinstance(name, str) and name else f'sharegpt-{number}'
        if name in seen:  # two conversations of one id would be counted as one session
            raise _bad(where, 'id', f'{name!r} is the id of item {seen[name]} too')
        seen[name] = number
        sessions.append(_Session(name, tuple(turns), where, system))
    if not sessions:
        raise UsageError(f'--sessions {path} has no conversations')
    return sessions


class _Conversation:
    """The history one session sends, in its API's shape: chat's messages (the system message first),
    the Messages API's messages (tool_use and tool_result blocks), or the Responses API's input items
    (function_call and function_call_output). The system message of the last two goes in its own key,
    which prepare() sets. Reasoning is not sent back."""

    def __init__(self, api: str, system: str | None) -> None:
        self.api = api
        self.items: list[dict] = [{'role': 'system', 'content': system}] if api == 'chat' and system is not None \
            else []

    def user(self, text: str) -> None:
        self.items.append({'role': 'user', 'content': text})

    def answer(self, text: str, calls: list[tuple[str, str, str]]) -> None:
        """The assistant's answer as it was streamed: its text and its calls (id, name, arguments)."""
        if self.api == 'chat':
            message = {'role': 'assistant', 'content': text if text or not calls else None}
            if calls:
                message['tool_calls'] = [{'id': id_, 'type': 'function', 'function': {'name': name,
                                                                                      'arguments': arguments}}
                                         for id_, name, arguments in calls]
            self.items.append(message)
        elif self.api == 'messages':
            blocks = [{'type': 'text', 'text': text}] if text else []
            blocks += [{'type': 'tool_use', 'id': id_, 'name': name, 'input': json.loads(arguments)}
                       for id_, name, arguments in calls]
            self.items.append({'role': 'assistant', 'content': blocks})
        else:
            if text:
                self.items.append({'type': 'message', 'role': 'assistant',
                                   'content': [{'type': 'output_text', 'text': text}]})
            self.items += [{'type': 'function_call', 'call_id': id_, 'name': name, 'arguments': arguments}
                           for id_, name, arguments in calls]

    def results(self, outputs: list[tuple[str, str]]) -> None:
        """The tool results, (call id, result text), of the calls of the last answer."""
        if self.api == 'chat':
            self.items += [{'role': 'tool', 'tool_call_id': id_, 'content': output} for id_, output in outputs]
        elif self.api == 'messages':
            self.items.append({'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': id_,
                                                            'content': output} for id_, output in outputs]})
        else:
            self.items += [{'type': 'function_call_output', 'call_id': id_, 'output': output}
                           for id_, output in outputs]

    def body_fields(self) -> dict:
        """The request body's conversation key, as it stands."""
        return {_history_key(self.api): list(self.items)}


def _history_key(api: str) -> str:
    """The request body's key that holds a session's history on an API."""
    return 'input' if api == 'responses' else 'messages'


# Prompts of a given length. Each word is a common English word that the usual BPE tokenizers (GPT-2's,
# Llama's, Qwen's) encode, with the space before it, as one token: a prompt of N words is about N tokens
# (the approximation, without a server's /tokenize). 256 of them, one per byte of a SHA-256 digest.
_WORDS = tuple("""
the of and to in is was for on are with as be at by this had not but from or have an they which one you were
all we her she there would their will when who him been has more if no out so said what up its about than into
them can only other new some could time these two may then do first any my now such like our over man me even
most made after also did many before must through back years where much your way well down should because each
just those people how too little state good very make world still own see men work long get here between both
life being under never day same another know while last might us great old year off come since against go came
right used take three himself few house use during without again place around however home small found
thought went say part once general high upon school every does got left number course war until
always away something fact though water less public put think almost hand enough far took head yet government
system better set told nothing night end why called eyes find going look asked later knew point next city
give group toward young days let room president side social present given several order national possible rather
second face among form important often things looked early white case become large big need four within
felt along children saw best church ever least power development light thing
""".split())


def _words_of(seed: str, count: int) -> list[str]:
    """count words drawn from seed alone (SHA-256 of the seed and a counter, one word per byte)."""
    words: list[str] = []
    counter = 0
    while len(words) < count:
        words += [_WORDS[byte] for byte in hashlib.sha256(f'{seed}/{counter}'.encode()).digest()]
        counter += 1
    return words[:count]


def _prompt_words(count: int, blocks: tuple[int, ...] = (), block_size: int = 512, own: str = '') -> list[str]:
    """The first count words of: each block's block_size words (a block's words depend on its id alone),
    then words of the prompt's own (seeded by own). Two prompts whose blocks start alike begin with the
    same words, so their text is byte-equal as far as those blocks go."""
    words: list[str] = []
    for block in blocks:
        if len(words) >= count:
            break
        words += _words_of(f'block {block}', block_size)
    if len(words) < count:
        words += _words_of(f'own {own}', count - len(words))
    return words[:count]


@dataclasses.dataclass(frozen=True)
class _TraceLine:
    """One request of a --trace file: when it starts (ms, from the file), and either its lengths (Mooncake:
    input_length tokens, hash_ids the blocks of its shared prefix) or its prompt; output_length, if given,
    is its output budget."""

    line: int
    timestamp_ms: float
    input_length: int | None = None
    output_length: int | None = None
    hash_ids: tuple[int, ...] = ()
    prompt: str | None = None


_TRACE_KEYS = ('timestamp', 'input_length', 'output_length', 'hash_ids', 'prompt')
_MAX_TRACE_TOKENS = 1_048_576


def _length(where: str, value: dict, key: str, low: int, high: int) -> int | None:
    length = value.get(key)
    if length is None:
        return None
    if isinstance(length, bool) or not isinstance(length, int) or not low <= length <= high:
        raise _bad(where, key, f'must be a whole number from {low} to {high}, got {json.dumps(length)[:40]}')
    return length


def _parse_trace(path: str, text: str) -> list[_TraceLine]:
    """The requests of a --trace file: JSON Lines, each with "timestamp" (ms, never going backwards) and
    either "input_length" (and optionally "hash_ids") or "prompt"; "output_length" optional."""
    lines: list[_TraceLine] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f'--trace {path} line {number}'
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise UsageError(f'{where}: not JSON ({exc})') from None
        if not isinstance(value, dict):
            raise UsageError(f'{where}: expected a JSON object with "timestamp"')
        unknown = sorted(set(value) - set(_TRACE_KEYS))
        if unknown:
            raise _bad(where, unknown[0], f'unknown key; a trace line has {", ".join(_TRACE_KEYS)}')
        stamp = value.get('timestamp')
        if stamp is None:
            raise _bad(where, 'timestamp', 'missing')
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not 0 <= stamp < 1e15:
            raise _bad(where, 'timestamp', 'must be a non-negative number of milliseconds')
        if lines and stamp < lines[-1].timestamp_ms:
            raise _bad(where, 'timestamp', f'{stamp} goes backwards (line {lines[-1].line} has '
                                           f'{lines[-1].timestamp_ms:g})')
        prompt = value.get('prompt')
        if prompt is not None and (not isinstance(prompt, str) or not prompt):
            raise _bad(where, 'prompt', 'must be a non-empty string')
        if prompt is not None and ('input_length' in value or 'hash_ids' in value):
            raise _bad(where, 'prompt', 'a line has a prompt, or input_length and hash_ids, not both')
        if prompt is None and 'input_length' not in value:
            raise _bad(where, 'input_length', 'missing (or give a "prompt")')
        hash_ids = value.get('hash_ids', [])
        if not isinstance(hash_ids, list) or not all(type(h) is int and h >= 0 for h in hash_ids):
            raise _bad(where, 'hash_ids', 'must be a list of non-negative whole numbers')
        lines.append(_TraceLine(number, float(stamp), _length(where, value, 'input_length', 1, _MAX_TRACE_TOKENS),
                                _length(where, value, 'output_length', 1, 32768), tuple(hash_ids), prompt))
    if not lines:
        raise UsageError(f'--trace {path} has no lines')
    return lines


def _mean_spread(text: str, flag: str, low: int, high: int) -> tuple[int, int]:
    """MEAN or MEAN:SPREAD, whole numbers, every length MEAN-SPREAD to MEAN+SPREAD within low to high."""
    mean, _, spread = text.partition(':')
    try:
        values = int(mean), int(spread or 0)
    except ValueError:
        raise UsageError(f'{flag} {text!r}: expected MEAN or MEAN:SPREAD, whole numbers of tokens') from None
    if values[1] < 0 or not low <= values[0] - values[1] <= values[0] + values[1] <= high:
        raise UsageError(f'{flag} {text!r}: every length (MEAN-SPREAD to MEAN+SPREAD) must be from {low} to {high}')
    return values


@dataclasses.dataclass(frozen=True)
class _Synthetic:
    """What --input-tokens, --output-tokens and --shared-prefix-tokens ask for: lengths as (mean, spread)
    (None: not asked), a prefix of prefix_tokens shared by groups groups (run i in group i % groups)."""

    input_tokens: tuple[int, int] | None = None
    output_tokens: tuple[int, int] | None = None
    prefix_tokens: int = 0
    groups: int = 1

    def plan(self, count: int, seed: int) -> list[tuple[int | None, int | None, int | None]]:
        """(input length, output length, prefix group) of each of count runs, drawn uniformly from
        mean-spread to mean+spread by a generator seeded with seed: the same seed, the same load."""
        rng = random.Random(seed)
        def draw(lengths: tuple[int, int] | None) -> int | None:
            return None if lengths is None else rng.randint(lengths[0] - lengths[1], lengths[0] + lengths[1])
        return [(draw(self.input_tokens), draw(self.output_tokens), index % self.groups if self.prefix_tokens else None)
                for index in range(count)]


def _synthetic_words(count: int, run: int, seed: int, prefix_tokens: int = 0, group: int | None = None) -> list[str]:
    """The first count words of a synthetic prompt: its group's shared prefix (prefix_tokens words drawn from
    the group alone, as a trace's blocks are), then words of its own (from the seed and the run)."""
    prefix = _words_of(f'prefix {group}', prefix_tokens) if group is not None else []
    return (prefix + _words_of(f'synthetic {seed} {run}', max(0, count - len(prefix))))[:count]
