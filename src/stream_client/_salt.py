"""--cache-salt: a marker at the very start of every prompt, so that a server's prefix cache cannot serve
a replayed pass from what an earlier pass left.

A pass is one load: a --repeat, a sweep's step, one run of a command. ``_pass_salt()`` gives a pass its
marker, from the load's block (its random id, or for a sharded plan the plan's id, which every shard
shares); ``for_session()`` derives a session's own from it. ``_salted()`` and ``_Salt.body()`` put the
marker at the start of the first text a request sends (the system message where there is one, else the
prompt or first message), the same for every request of the pass (or of the session), so the sharing a
trace's ``hash_ids`` or a session's history intend is kept behind it, and nothing is shared across
passes. With ``,vllm`` the marker also goes as vLLM's ``cache_salt`` request field. Sans-IO.
"""
import dataclasses
import hashlib
import json

from ._request import _render_request, PreparedRequest

_SALT_CHOICES = ('off', 'pass', 'session', 'pass,vllm', 'session,vllm')  # what --cache-salt accepts
_SALT_FIELD = 'cache_salt'  # vLLM's request field (chat completions and completions): salts its block hashes


@dataclasses.dataclass(frozen=True)
class _Salt:
    """One marker (8 hex digits), the --cache-salt choice it serves (pass or session), and whether it is
    also sent as vLLM's cache_salt field."""

    mode: str
    marker: str
    field: bool = False

    @property
    def text(self) -> str:
        """What goes before the first text of the request: about six tokens with the usual tokenizers."""
        return f'[salt {self.marker}] '

    def for_session(self, session: str) -> '_Salt':
        """This pass's marker for one session: the pass's own under pass, one per session under session."""
        if self.mode != 'session':
            return self
        return dataclasses.replace(self, marker=_digest(f'{self.marker}/{session}'))

    def described(self) -> dict:
        """What the record's request settings say of it."""
        return {'mode': self.mode, 'marker': self.marker, 'field': self.field}

    def body(self, api: str, body: dict) -> dict:
        """The request body with the marker before its first text (and the cache_salt field, if asked).
        The first text is the system message where the body has one, else the prompt or the first message;
        a content given as blocks gets the marker in its first text block."""
        body = dict(body)
        if self.field:
            body[_SALT_FIELD] = self.marker
        system = {'responses': 'instructions', 'messages': 'system'}.get(api)
        if system in body:
            body[system] = self._before(body[system])
        elif api == 'completions':
            body['prompt'] = self._before(body['prompt'])
        else:
            key = 'input' if api == 'responses' else 'messages'
            items = body[key]
            body[key] = self._before(items) if isinstance(items, str) else \
                [{**items[0], 'content': self._before(items[0]['content'])}, *items[1:]]
        return body

    def _before(self, content):
        """content with the marker before it: a string, or a list of blocks whose first text block gets it."""
        if isinstance(content, str):
            return self.text + content
        if isinstance(content, list):
            for index, block in enumerate(content):
                if isinstance(block, dict) and isinstance(block.get('text'), str):
                    return [*content[:index], {**block, 'text': self.text + block['text']}, *content[index + 1:]]
        raise ValueError(f'--cache-salt: no text to put the marker before in {type(content).__name__} content')


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _pass_salt(choice: str, described: dict) -> _Salt | None:
    """The marker of the pass a load's block describes, for --cache-salt choice (None: off): a digest of the
    load's id (random, so each command gets its own) with its repeat and step (so each --repeat and each
    sweep step does too); the shards of one plan digest the plan's id instead, and so share one marker (the
    id holds --start-at: a new start, a new marker)."""
    mode, _, field = choice.partition(',')
    if mode == 'off':
        return None
    plan = described.get('plan') or {}
    source = f'plan {plan["id"]}' if plan.get('shards', 1) > 1 else f'load {described["id"]}'
    return _Salt(mode, _digest(f'{source} repeat {described.get("repeat")} step {described.get("step")}'),
                 field == 'vllm')


def _salted(request: PreparedRequest, salt: _Salt | None) -> PreparedRequest:
    """The prepared request (and its --cross-check twin) with the salt's marker before its first text,
    its settings saying which (request.cache_salt); the request itself when salt is None. prompt_sha256
    stays the prompt's own, so the passes of one prompt can be told."""
    if salt is None:
        return request
    data = json.dumps(salt.body(request.api, json.loads(request.body)), ensure_ascii=False).encode()
    twin = request.twin and _salted(dataclasses.replace(request.twin, twin=None), salt)
    return dataclasses.replace(request, body=data, twin=twin,
                               wire=_render_request(request.scheme, request.host, request.port, request.path,
                                                    request.headers, data),
                               settings={**request.settings, 'cache_salt': salt.described()})
