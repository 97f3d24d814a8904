"""Dialects: a server's known departures from its vendor's protocol, as data (docs/dialects.md).

Each ``DialectRule`` names one departure, says what the server does instead, the
other proof of completeness the client then requires, and the source line it
follows. A ``Dialect`` is a server's rules. The grammars ask their dialect
whether a rule holds (``Dialect.allows()``); every rule keeps a proof that a
cut or budget-ended answer cannot give. ``strict`` (the vendor protocols as
documented) has none, and vLLM speaks it.
"""
import dataclasses
import typing

# The rules' names, as the grammars ask for them.
_RESPONSES_UNNUMBERED = 'responses_unnumbered'
_MESSAGES_BLOCKS_OVERLAP = 'messages_blocks_overlap'
_CALLS_WITHOUT_FINISH = 'calls_without_finish'
_RESPONSES_UNTYPED = 'responses_untyped'


@dataclasses.dataclass(frozen=True)
class DialectRule:
    """One known departure of a server from its vendor's protocol: on which API, what the server does,
    what the client requires instead to call the answer finished, and the source it follows."""

    name: str
    api: str
    departs: str
    proof: str
    source: str


@dataclasses.dataclass(frozen=True)
class Dialect:
    """A server's known departures (its ``rules``); ``server`` names who speaks it."""

    name: str
    server: str
    rules: tuple[DialectRule, ...] = ()

    def allows(self, rule: str) -> bool:
        return any(known.name == rule for known in self.rules)


_LLAMA_TASK = 'llama.cpp tools/server/server-task.cpp'
_STRICT = Dialect('strict', 'the vendor protocols as documented (OpenAI, Anthropic); vLLM')
DIALECTS = {dialect.name: dialect for dialect in (
    _STRICT,
    Dialect('llama.cpp', 'llama-server (llama.cpp)', (
        DialectRule(_RESPONSES_UNNUMBERED, 'responses',
             'no sequence_number, output_index or content_index on any event: an event names its item by item_id '
             '(a function call by its call_id), and its part is the item\'s last; no reasoning_text.done or '
             'function_call_arguments.done; response.completed says status "completed" also when '
             'max_output_tokens cut the answer',
             'response.completed carries usage.output_tokens, below the request\'s max_output_tokens (the '
             'budget was not used up); every closing copy still equals what the deltas assembled',
             f'{_LLAMA_TASK}: server_task_result_cmpl_partial::to_json_oaicompat_resp, '
             'server_task_result_cmpl_final::to_json_oaicompat_resp_stream'),
        DialectRule(_MESSAGES_BLOCKS_OVERLAP, 'messages',
             'a block starts while the blocks before it are still open (text while thinking is, tool_use '
             'while text is); all stop at the end in index order, the thinking block after an empty '
             'signature_delta',
             'every block stops before message_delta, whose stop_reason decides as in the vendor protocol '
             '(max_tokens when the budget cut the answer)',
             f'{_LLAMA_TASK}: server_task_result_cmpl_partial::to_json_anthropic, '
             'server_task_result_cmpl_final::to_json_anthropic_stream'),
    )),
    Dialect('tgi', 'text-generation-inference (Hugging Face TGI)', (
        DialectRule(_CALLS_WITHOUT_FINISH, 'chat',
             'a tool-call stream ends with data: [DONE] and no finish_reason: once the call\'s JSON is whole '
             'the router returns to buffering, and the token that carries the finish is never sent; the '
             'router streams one call at most (index 0), and no text beside it',
             'the answer is one tool call alone (no second call, no text or reasoning beside it), [DONE] '
             'arrived, and the call\'s arguments are one complete JSON object (valid against the tool\'s '
             'parameters when --tools gives them); any other shape is judged by the vendor rules, and a '
             'finish_reason that does come (length) decides as usual',
             'text-generation-inference 3.x router/src/chat.rs: ChatState::push, StreamState::Tool back to '
             'Buffering; router/src/infer/tool_grammar.rs: one {"function": ...} object'),
    )),
    Dialect('litellm', 'the LiteLLM proxy (a gateway in front of any of these servers)', (
        DialectRule(_RESPONSES_UNTYPED, 'responses',
             'Responses events come without an event: line (their type is in the data only), and data: [DONE] '
             'follows the terminal event, as on chat: the proxy writes every route\'s stream the same way',
             'the data\'s type stands for the missing event field (an event line that is there must still agree); '
             'after the terminal event one data: [DONE] and nothing else; every other rule of the vendor '
             'protocol holds, sequence numbers and closing copies included',
             'LiteLLM proxy 1.108.7 in front of vLLM 0.32, as captured (testdata/litellm-1.108.7): the proxy\'s '
             'stream generator writes each chunk as data: JSON and ends every stream with data: [DONE]'),
    )),
)}


def _dialect_named(name: str | None) -> Dialect | None:
    """The dialect of this name; None for no name (detect it from the response). ValueError for another."""
    if name is None:
        return None
    if name not in DIALECTS:
        raise ValueError(f'dialect must be one of {", ".join(DIALECTS)}, got {name!r}')
    return DIALECTS[name]


def _detect_dialect(header: typing.Callable[[str], str | None]) -> tuple[Dialect, str] | None:
    """The dialect a response head shows (``header`` gives a header's value by name), with what showed
    it: LiteLLM's ``x-litellm-version``, llama-server's ``Server: llama.cpp``, TGI's ``x-compute-type``. None
    when nothing does (the vendor rules then hold)."""
    if header('x-litellm-version') is not None:  # the proxy re-encodes what it relays: its dialect first
        return DIALECTS['litellm'], 'the x-litellm-version header (LiteLLM)'
    products = [token.split('/')[0] for token in (header('server') or '').lower().split()]
    if 'llama.cpp' in products:  # a product token of the Server header (RFC 9110, 10.2.4)
        return DIALECTS['llama.cpp'], 'the Server header (llama.cpp)'
    if header('x-compute-type') is not None:
        return DIALECTS['tgi'], 'the x-compute-type header (TGI)'
    return None


def _detect_in_chunk(chunk: dict) -> tuple[Dialect, str] | None:
    """The dialect a chat chunk shows: TGI's system_fingerprint ends in ``-native`` (its version and
    its build's label), which no other server sends."""
    fingerprint = chunk.get('system_fingerprint')
    if isinstance(fingerprint, str) and fingerprint.endswith('-native'):
        return DIALECTS['tgi'], f'system_fingerprint {fingerprint[:40]!r} (TGI)'
    return None
