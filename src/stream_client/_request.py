"""The request, checked before any connection.

``prepare()`` returns a frozen ``PreparedRequest``, which is what a run sends:
the URL checked (plain HTTP on loopback only), the proxy, the TLS context and
the body for the chosen API.
"""
import base64
import dataclasses
import hashlib
import http.client
import ipaddress
import json
import math
import os
import re
import socket
import ssl
import typing
from urllib.parse import unquote, urlsplit

from ._limits import _host_port, _shorten, __version__
from ._json import _json_text, SchemaError, _seen
from ._schema import JsonSchema
from ._dialects import _dialect_named
from ._validator import AnswerSpec, StreamValidator, _TOOL_CHOICES
from ._answer import _seeded, _STREAMED_ONLY_KEYS, _TOKEN_ID_APIS, VALIDATORS
from ._headers import _checked_headers, _header_secrets, _with_headers


_DEFAULT_URL = 'http://127.0.0.1:8000/v1/chat/completions'
_DEFAULT_PROMPT = 'Reply with exactly the word READY.'

# The APIs, by the end of the URL path that serves them.
_API_PATHS = {'/v1/chat/completions': 'chat', '/v1/completions': 'completions', '/v1/responses': 'responses',
             '/v1/messages': 'messages'}
# Per API, the request keys that have a flag of their own (or no say at all), which --extra may not set.
_RESERVED_KEYS = {
    'chat': {'model': '--model', 'messages': '--prompt/--system', 'stream': None, 'n': None,
             'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop', 'tools': '--tools',
             'tool_choice': '--tool-choice', 'response_format': '--json-schema'},
    'completions': {'model': '--model', 'prompt': '--prompt', 'stream': None, 'n': None,
                    'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop',
                    'response_format': '--json-schema'},
    'responses': {'model': '--model', 'input': '--prompt', 'instructions': '--system', 'stream': None,
                  'max_output_tokens': '--max-tokens', 'temperature': '--temperature', 'stop': '--stop',
                  'tools': '--tools', 'tool_choice': '--tool-choice', 'text': '--json-schema'},
    'messages': {'model': '--model', 'messages': '--prompt', 'system': '--system', 'stream': None,
                 'max_tokens': '--max-tokens', 'temperature': '--temperature', 'stop_sequences': '--stop',
                 'tools': '--tools', 'tool_choice': '--tool-choice', 'output_config': '--json-schema'},
}
_FINISHES = ('stop', 'length')
_ANTHROPIC_VERSION = '2023-06-01'  # the anthropic-version header of a /v1/messages request


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower().rstrip('.') == 'localhost'


def _positive_finite(value: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclasses.dataclass(frozen=True)
class _Proxy:
    """A forward proxy to tunnel https through (CONNECT): where it is, and the Proxy-Authorization that
    the credentials of its URL make. The credentials stay out of its repr and of every output."""

    host: str
    port: int
    authorization: str = dataclasses.field(default='', repr=False)
    secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)  # what the outputs must never hold

    @property
    def address(self) -> str:
        return _host_port(self.host, self.port)

    def connect_request(self, host: str, port: int) -> bytes:
        host = host if host.isascii() else host.encode('idna').decode('ascii')  # as DNS and TLS name it
        target = _host_port(host, port)
        lines = [f'CONNECT {target} HTTP/1.1', f'Host: {target}', f'User-Agent: stream-client/{__version__}']
        if self.authorization:
            lines.append(f'Proxy-Authorization: {self.authorization}')
        return ('\r\n'.join(lines) + '\r\n\r\n').encode('ascii')

    def facts(self) -> dict:
        """What the record says of the proxy: where it is and whether credentials were used, never which."""
        return {'address': self.address, 'credentials': bool(self.authorization)}


def _proxy_from_environment(scheme: str, host: str, environ: typing.Mapping[str, str]) -> _Proxy | None:
    """The proxy that HTTPS_PROXY/https_proxy (HTTP_PROXY/http_proxy for http; lower case first, as
    curl reads them, and an empty one as unset) names for this host, unless NO_PROXY/no_proxy covers
    it; loopback never goes through a proxy. ValueError for a proxy URL this client cannot use."""
    if _is_loopback(host):
        return None
    names = ('https_proxy', 'HTTPS_PROXY') if scheme == 'https' else ('http_proxy', 'HTTP_PROXY')
    url = next((environ[name] for name in names if environ.get(name)), None)
    no_proxy = next((environ[name] for name in ('no_proxy', 'NO_PROXY') if environ.get(name)), '')
    if url is None or _bypasses_proxy(host, no_proxy):
        return None
    parts = urlsplit(url if '://' in url else 'http://' + url)
    if parts.scheme != 'http' or not parts.hostname:
        raise ValueError(f'the proxy in {names[1]} must be an http:// URL (CONNECT over plain TCP), not '
                         f'{parts.scheme or "(none)"}://...')
    try:
        port = parts.port or 80
    except ValueError:
        raise ValueError(f'the proxy in {names[1]} has an invalid port') from None
    user, password = unquote(parts.username or ''), unquote(parts.password or '')
    if not (user or password):
        return _Proxy(parts.hostname, port)
    pair = f'{user}:{password}'
    if not pair.isascii() or not pair.isprintable():
        raise ValueError(f'the proxy credentials in {names[1]} hold characters that cannot go into a header')
    authorization = 'Basic ' + base64.b64encode(pair.encode()).decode()
    return _Proxy(parts.hostname, port, authorization, tuple(secret for secret in (authorization, pair, password)
                                                            if secret))


def _bypasses_proxy(host: str, no_proxy: str) -> bool:
    """Whether NO_PROXY covers host, as curl matches it: '*' covers every host; a name covers itself and the
    hosts of its domain (a leading dot is ignored); an IP address covers itself, a CIDR block its addresses."""
    host = host.lower().strip('[]').rstrip('.')
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (part.strip().lower() for part in no_proxy.split(',')):
        if entry == '*':
            return True
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry.strip('[]'), strict=False)
        except ValueError:
            name = entry.lstrip('.').rstrip('.')
            if name and (host == name or host.endswith('.' + name)):
                return True
            continue
        if address is not None and address.version == network.version and address in network:
            return True
    return False


@dataclasses.dataclass(frozen=True)
class PreparedRequest:
    """One checked request: where it goes, what it sends and how long it may take.

    Build it with prepare(). It checks its own invariants when built, and its
    repr shows neither the API key nor the headers that carry it.
    """

    url: str
    scheme: str
    host: str
    port: int
    path: str
    api: str
    model: str
    body: bytes = dataclasses.field(repr=False)
    headers: dict = dataclasses.field(repr=False)
    wire: bytes = dataclasses.field(repr=False)  # the whole request as sent, formatted once by http.client
    idle: float
    deadline: float
    settings: dict  # the request settings the record reports (no prompt text, no key)
    max_tokens: int = 128
    expect_finish: str = 'stop'
    source: str = 'endpoint'
    ssl_context: ssl.SSLContext | None = dataclasses.field(default=None, repr=False, compare=False)
    token: str = dataclasses.field(default='', repr=False)
    spec: AnswerSpec = dataclasses.field(default_factory=AnswerSpec, repr=False)  # tools, tool choice, JSON schema
    proxy: _Proxy | None = None  # the forward proxy https goes through, if one does
    twin: 'PreparedRequest | None' = dataclasses.field(default=None, repr=False)  # --cross-check's unstreamed twin
    dialect: str | None = None  # the server's dialect (docs/dialects.md); None: detected from the response
    header_secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)  # --header values to mask

    def __post_init__(self) -> None:
        if self.scheme not in ('http', 'https'):
            raise ValueError(f'expected scheme http or https, got {self.scheme!r}')
        if self.scheme == 'https' and self.ssl_context is None:
            raise ValueError('an https request needs an SSL context')
        if self.scheme == 'http' and self.proxy is not None:
            raise ValueError('plain http goes to loopback only, and loopback never goes through a proxy')
        if not 0 < self.port < 65536:
            raise ValueError(f'port must be 1 to 65535, got {self.port}')
        if not (_positive_finite(self.idle) and _positive_finite(self.deadline)):
            raise ValueError('idle and deadline must be positive finite numbers')
        if self.api not in VALIDATORS or self.expect_finish not in _FINISHES:
            raise ValueError(f'unknown api {self.api!r} or expected finish {self.expect_finish!r}')

    @property
    def origin(self) -> tuple:
        """Where a connection of this request leads: requests with the same origin may share one."""
        return self.scheme, self.host, self.port, self.proxy

    @property
    def address(self) -> str:
        """host:port as a URL writes it ([::1]:8000 for an IPv6 address)."""
        return _host_port(self.host, self.port)

    def secrets(self) -> tuple[str, ...]:
        """The strings no output may hold: the API key, the proxy's credentials and the --header values."""
        return ((self.token,) if self.token else ()) + (self.proxy.secrets if self.proxy else ()) + self.header_secrets

    def new_validator(self) -> StreamValidator:
        return VALIDATORS[self.api](self.expect_finish, self.max_tokens, self.spec, _dialect_named(self.dialect))


def _check_url(url: str):
    """The parts and port of a URL this client may connect to, or ValueError."""
    parts = urlsplit(url)
    if parts.scheme not in ('http', 'https'):
        path = '' if '/' in url else '/v1/chat/completions'
        hint = f'; did you mean http://{url}{path}?' if '://' not in url and url[:1].isalnum() else ''
        raise ValueError(f'expected an http:// or https:// URL such as {_DEFAULT_URL}, got '
                         f'{_shorten(repr(url), 80)}{hint}')
    if parts.username is not None or parts.password is not None:
        raise ValueError('the URL must not contain credentials; put the API key in MODEL_API_KEY')
    if not parts.hostname:
        raise ValueError(f'the URL has no host: {url!r}')
    if parts.query or parts.fragment:
        raise ValueError('the URL must not contain a query or fragment')
    try:
        port = parts.port or (443 if parts.scheme == 'https' else 80)
    except ValueError:
        raise ValueError(f'the URL has an invalid port: {parts.netloc!r}') from None
    if parts.scheme == 'http':
        _check_plain_host(parts.hostname, port)
    return parts, port


def _check_plain_host(host: str, port: int) -> None:
    """Plain http only to loopback: an IP address must be one, and a name must resolve only to loopback
    addresses (the connection checks again the address it really reached)."""
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            found = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
        except (OSError, UnicodeError) as exc:
            raise ValueError(f'cannot resolve {host!r} for plain http: '
                             f'{getattr(exc, "strerror", None) or exc}') from None
        addresses = [ipaddress.ip_address(address.partition('%')[0]) for address in found]
    outside = sorted(str(address) for address in addresses if not address.is_loopback)
    if outside:
        resolved = '' if outside == [host] else f', but {host!r} resolves to {", ".join(outside)}'
        raise ValueError(f'plain http is allowed only to loopback addresses{resolved or f", not {host!r}"}; '
                         'use https or an SSH tunnel to 127.0.0.1')


def _check_number(name: str, value, low: float, low_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < low or (value == low and not low_ok):
        bound = f'at least {low:g}' if low_ok else f'more than {low:g}'
        raise ValueError(f'{name} must be a finite number {bound}, got {value!r}')
    return float(value)


def _api_of(path: str, api: str | None = None) -> str:
    """The API a request goes to: the one named, or the one its URL path ends with."""
    if api is not None:
        if api not in VALIDATORS:
            raise ValueError(f'unknown api {api!r}; choose from {", ".join(VALIDATORS)}')
        return api
    for suffix, name in _API_PATHS.items():
        if path.endswith(suffix):
            return name
    base = path.rstrip('/')
    hint = (f'; did you mean {base}/chat/completions? (an SDK\'s base_url ends in /v1; give the endpoint)'
            if base.endswith('/v1') else '')
    raise ValueError(f'cannot tell the API from the URL path {path!r}: expected a path ending in '
                     f'{", ".join(_API_PATHS)}, or --api {"|".join(VALIDATORS)} for a server mounted elsewhere{hint}')


def _request_body(api: str, model: str, prompt: str, system: str | None, max_tokens: int, temperature: float,
                  stop: list[str] | None, extra: dict | None) -> dict:
    if not isinstance(model, str) or not model:
        raise ValueError('model must be a non-empty string')
    if not isinstance(prompt, str) or not (system is None or isinstance(system, str)):
        raise ValueError('prompt and system must be strings')
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= 32768:
        raise ValueError(f'max_tokens must be an integer from 1 to 32768, got {max_tokens!r}')
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise ValueError('stop must be a list of non-empty strings')
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f'extra must be a JSON object, got {type(extra).__name__}')
    for key in extra or {}:
        if key in _RESERVED_KEYS[api]:
            flag = _RESERVED_KEYS[api][key]
            raise ValueError(f'extra may not set {key!r}' + (f'; use {flag}' if flag else ''))
    if api == 'chat':
        messages = ([{'role': 'system', 'content': system}] if system is not None else []) \
            + [{'role': 'user', 'content': prompt}]
        body = {'model': model, 'messages': messages, 'stream': True, 'stream_options': {'include_usage': True},
                'max_tokens': max_tokens, 'temperature': temperature, 'n': 1}
    elif api == 'completions':
        if system is not None:
            raise ValueError('the completions API has no system message; put it in the prompt')
        body = {'model': model, 'prompt': prompt, 'stream': True, 'stream_options': {'include_usage': True},
                'max_tokens': max_tokens, 'temperature': temperature, 'n': 1}
    elif api == 'responses':  # no n, no stream_options (the usage comes with the terminal event)
        body = {'model': model, 'input': prompt, 'stream': True, 'max_output_tokens': max_tokens,
                'temperature': temperature}
        if system is not None:
            body['instructions'] = system
    else:  # messages: the Anthropic shape, system apart from the messages, stop strings as stop_sequences
        body = {'model': model, 'messages': [{'role': 'user', 'content': prompt}], 'max_tokens': max_tokens,
                'temperature': temperature, 'stream': True}
        if system is not None:
            body['system'] = system
    if stop:
        body['stop_sequences' if api == 'messages' else 'stop'] = stop
    return {**body, **(extra or {})}


_SCHEMA_REFUSALS = {'invalid': 'not a valid schema', 'remote': 'a schema that needs another document',
                   'unsupported': 'a schema that cannot be checked faithfully'}  # SchemaError.kind, in a sentence


def _answer_spec(api: str, tools: list | None, tool_choice: str | None, json_schema: object) -> AnswerSpec:
    """What the answer is asked to be, checked: tools in the chat-completions shape, each with a name
    and optional parameters (a schema), a tool choice, and a JSON schema. ValueError for anything
    that cannot be sent or checked."""
    if tools is None:
        if tool_choice is not None:
            raise ValueError('tool_choice needs tools')
        declared: tuple = ()
    else:
        if api == 'completions':
            raise ValueError('the completions API has no tools; use chat completions or the Responses API')
        if not isinstance(tools, list) or not tools:
            raise ValueError('tools must be a non-empty JSON array of tools')
        declared = tuple(_declared_tool(number, tool) for number, tool in enumerate(tools))
        tool_choice = 'auto' if tool_choice is None else tool_choice
    schema = None
    if json_schema is not None:
        if not isinstance(json_schema, (dict, bool)):
            raise ValueError(f'json_schema must be a JSON object or a boolean (a schema), not {_seen(json_schema)}')
        try:
            schema = JsonSchema(json_schema)
        except SchemaError as exc:
            raise ValueError(f'json_schema is {_SCHEMA_REFUSALS[exc.kind]}: {exc}') from None
    return AnswerSpec(declared, tool_choice, schema)


def _declared_tool(number: int, tool: object) -> tuple[str, JsonSchema | None]:
    function = tool.get('function') if isinstance(tool, dict) else None
    name = function.get('name') if isinstance(function, dict) else None
    if not isinstance(tool, dict) or tool.get('type') != 'function' or not isinstance(name, str) or not name:
        raise ValueError(f'tools[{number}] is not {{"type": "function", "function": {{"name": ..., '
                         f'"parameters": ...}}}}: {_seen(tool)}')
    if 'parameters' not in function:
        return name, None
    try:
        return name, JsonSchema(function['parameters'])
    except SchemaError as exc:
        raise ValueError(f'tools[{number}] ({name}) has parameters that are {_SCHEMA_REFUSALS[exc.kind]}: '
                         f'{exc}') from None


def _answer_fields(api: str, tools: list | None, spec: AnswerSpec, json_schema: dict | None) -> dict:
    """The request keys that ask for tool calls or a JSON answer, in the API's own shape."""
    fields: dict = {}
    if tools is not None:
        choice = spec.tool_choice
        if api == 'messages':  # Anthropic's names: input_schema, and any for required
            fields['tools'] = [{key: value for key, value in (('name', tool['function']['name']),
                                                               ('description', tool['function'].get('description')),
                                                               ('input_schema', tool['function'].get('parameters')))
                                if value is not None} for tool in tools]
            fields['tool_choice'] = ({'type': {'required': 'any'}.get(choice, choice)} if choice in _TOOL_CHOICES
                                     else {'type': 'tool', 'name': choice})
        elif api == 'responses':  # the Responses API takes the function's keys flattened into the tool
            fields['tools'] = [{'type': 'function', **tool['function']} for tool in tools]
            fields['tool_choice'] = choice if choice in _TOOL_CHOICES else {'type': 'function', 'name': choice}
        else:
            fields['tools'] = tools
            fields['tool_choice'] = choice if choice in _TOOL_CHOICES else {'type': 'function',
                                                                           'function': {'name': choice}}
    if json_schema is not None:
        if api == 'messages':
            fields['output_config'] = {'format': {'type': 'json_schema', 'schema': json_schema}}
        elif api == 'responses':
            fields['text'] = {'format': {'type': 'json_schema', 'name': 'answer', 'schema': json_schema}}
        else:
            fields['response_format'] = {'type': 'json_schema', 'json_schema': {'name': 'answer',
                                                                                'schema': json_schema}}
    return fields


_IGNORE_UNEXPECTED_EOF = getattr(ssl, 'OP_IGNORE_UNEXPECTED_EOF', 0)  # OpenSSL 3 only


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    """The default context, with an end of the connection without close_notify reported, never taken for
    one with it (OpenSSL's OP_IGNORE_UNEXPECTED_EOF, which some Pythons and configurations set)."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f'cannot load --ca-file {ca_file!r}: {exc.strerror or exc}') from None
    context.options &= ~_IGNORE_UNEXPECTED_EOF
    return context


def prepare(url: str, model: str, prompt: str, *, max_tokens: int = 128, idle: float = 10.0,
            deadline: float = 60.0, ca_file: str | None = None, token: str | None = None,
            system: str | None = None, temperature: float = 0.0, stop: list[str] | None = None,
            extra: dict | None = None, api: str | None = None, expect_finish: str = 'stop',
            source: str = 'endpoint', tools: list | None = None, tool_choice: str | None = None,
            json_schema: dict | None = None, trust_env: bool = True, cross_check: bool = False,
            dialect: str | None = None, headers: dict | list | None = None) -> PreparedRequest:
    """Check the arguments and build the request; raise ValueError before any connection.

    The API (chat, completions or responses) follows from the URL path unless ``api`` names it.
    ``tools`` (in the chat-completions shape) and ``tool_choice`` (auto, required, none or a
    tool's name; auto by default) ask for tool calls; ``json_schema`` asks for a JSON answer.
    ``trust_env`` honours HTTPS_PROXY and NO_PROXY (see proxy_from_environment()).
    ``dialect`` names the server's known departures from its vendor's protocol (strict, llama.cpp, tgi, litellm:
    docs/dialects.md); without it they are detected from the response.
    ``cross_check`` builds the unstreamed twin too (``twin``), and asks both for token ids where the
    API returns them; it needs temperature 0 or a ``seed`` in ``extra``.
    ``headers`` (a mapping or (name, value) pairs) are sent on every request; the record keeps their
    names only (see _headers).
    """
    parts, port = _check_url(url)
    api = _api_of(parts.path, api)
    _dialect_named(dialect)
    if expect_finish not in _FINISHES:
        raise ValueError(f'expect_finish must be one of {", ".join(_FINISHES)}, got {expect_finish!r}')
    idle = _check_number('idle', idle, 0, False)
    deadline = _check_number('deadline', deadline, 0, False)
    temperature = _check_number('temperature', temperature, 0, True)
    if cross_check and temperature != 0 and not _seeded(extra):
        raise ValueError(f'cross_check needs a deterministic request: temperature {temperature:g} without a "seed" '
                         'in extra would sample the two answers apart')
    body = _request_body(api, model, prompt, system, max_tokens, temperature, stop, extra)
    spec = _answer_spec(api, tools, tool_choice, json_schema)
    body.update(_answer_fields(api, tools, spec, json_schema))
    if cross_check and api in _TOKEN_ID_APIS:
        body['return_token_ids'] = True
    added = _checked_headers(headers or ())
    sent = {'Content-Type': 'application/json', 'Accept': 'text/event-stream',
            'Accept-Encoding': 'identity',  # no compression: a proxy must pass the events as they are
            'User-Agent': f'stream-client/{__version__}'}
    if api == 'messages':
        sent['anthropic-version'] = _ANTHROPIC_VERSION
    headers = _with_headers(sent, added)
    if token:
        if not token.isprintable() or not token.isascii() or ' ' in token:
            raise ValueError('MODEL_API_KEY holds characters that cannot go into an HTTP header')
        # vLLM's --api-key checks only this header, on /v1/messages too (not x-api-key): sent once, here
        headers['Authorization'] = 'Bearer ' + token
    context = _ssl_context(ca_file) if parts.scheme == 'https' or ca_file else None
    settings = {'max_tokens': max_tokens, 'temperature': temperature, 'stop': stop,
                'system': system is not None, 'extra_keys': sorted(extra or {}),
                'prompt_sha256': hashlib.sha256(prompt.encode()).hexdigest(), 'expect_finish': expect_finish,
                'tools': [name for name, _ in spec.tools], 'tool_choice': spec.tool_choice,
                'json_schema_sha256': None if json_schema is None else hashlib.sha256(
                    json.dumps(json_schema, sort_keys=True, separators=(',', ':')).encode()).hexdigest(),
                'cross_check': cross_check, 'dialect': dialect, 'headers': [name for name, _ in added]}
    data = json.dumps(body, ensure_ascii=False).encode()
    request = PreparedRequest(url=url, scheme=parts.scheme, host=parts.hostname, port=port, path=parts.path or '/',
                              api=api, model=model, body=data, headers=headers,
                              wire=_render_request(parts.scheme, parts.hostname, port, parts.path or '/', headers,
                                                  data),
                              idle=idle, deadline=deadline, settings=settings, max_tokens=max_tokens,
                              expect_finish=expect_finish, source=source, ssl_context=context, token=token or '',
                              spec=spec, proxy=_proxy_from_environment(parts.scheme, parts.hostname, os.environ)
                              if trust_env else None, dialect=dialect, header_secrets=_header_secrets(added))
    return dataclasses.replace(request, twin=_unstreamed_twin(request, body)) if cross_check else request


def _unstreamed_twin(request: PreparedRequest, body: dict) -> PreparedRequest:
    """The same request with ``stream: false`` and without what only a streamed request may carry."""
    twin_body = {key: False if key == 'stream' else value for key, value in body.items()
                 if key not in _STREAMED_ONLY_KEYS}
    data = _json_text(twin_body).encode()  # a session's history may hold a surrogate pair's halves as escapes
    headers = {**request.headers, 'Accept': 'application/json'}
    return dataclasses.replace(request, body=data, headers=headers,
                               wire=_render_request(request.scheme, request.host, request.port, request.path,
                                                   headers, data))


def _twin_with_budget(twin: PreparedRequest, max_tokens: int) -> PreparedRequest:
    """The unstreamed twin with another ``max_tokens`` (chat and completions, the APIs with token ids):
    one token more than the stream used, to show whether the model ended by itself (_budget_proof_wanted)."""
    body = json.loads(twin.body)
    body['max_tokens'] = max_tokens
    data = json.dumps(body, ensure_ascii=False).encode()
    return dataclasses.replace(twin, body=data, wire=_render_request(twin.scheme, twin.host, twin.port, twin.path,
                                                                     twin.headers, data))


def _models_request(request: PreparedRequest) -> PreparedRequest:
    """GET /v1/models beside the request's API path (a prefix kept: /proxy/v1/chat/completions asks
    /proxy/v1/models; at the origin's /v1/models for a server mounted elsewhere), with the same key,
    proxy, TLS and time bounds."""
    suffix = next((suffix for suffix in _API_PATHS if request.path.endswith(suffix)), None)
    path = (request.path[:-len(suffix)] if suffix else '') + '/v1/models'
    headers = {name: value for name, value in request.headers.items() if name in ('User-Agent', 'Authorization')}
    headers['Accept'] = 'application/json'
    origin = f'{request.scheme}://{request.address}'
    return dataclasses.replace(request, url=origin + path, path=path, body=b'', headers=headers, twin=None,
                               wire=_render_request(request.scheme, request.host, request.port, path, headers, None,
                                                    'GET'))


class _Recorder:
    """Stands in for a socket: keeps what http.client sends."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def sendall(self, data: bytes) -> None:
        self.sent += data


_CONTENT_LENGTH = re.compile(rb'\r\nContent-Length: \d+\r\n')


def _with_body(request: PreparedRequest, body: bytes, wire: bytes, settings: dict) -> PreparedRequest:
    """The checked request with another body, its bytes and its record's settings (a session's turn):
    what dataclasses.replace gives, without checking the fields that did not change again (it calls
    __init__ and __post_init__ with every field, which a session pays on every run)."""
    turn = object.__new__(PreparedRequest)
    turn.__dict__.update(request.__dict__, body=body, wire=wire, settings=settings)
    return turn


def _wire_head(wire: bytes) -> tuple[bytes, bytes]:
    """The head of a rendered POST (_render_request) split around its Content-Length's value (the one
    header of it: the client owns it), for _wire_with_body."""
    head, separator, _ = wire.partition(b'\r\n\r\n')
    parts = _CONTENT_LENGTH.split(head + b'\r\n')
    if not separator or len(parts) != 2:
        raise ValueError('the rendered request has no Content-Length to replace')
    return parts[0] + b'\r\nContent-Length: ', b'\r\n' + parts[1] + b'\r\n'


def _wire_with_body(head: tuple[bytes, bytes], body: bytes) -> bytes:
    """The bytes of the rendered POST whose head _wire_head split, with another body: byte for byte what
    _render_request gives for that body, without formatting the head again (a session's turns send a new
    body each)."""
    return b'%s%d%s%s' % (head[0], len(body), head[1], body)


def _render_request(scheme: str, host: str, port: int, path: str, headers: dict, body: bytes | None,
                    method: str = 'POST') -> bytes:
    """The bytes of a request (a POST unless ``method`` says), formatted (and its header names and values
    checked) by http.client. Done once per prepared request; every run sends these bytes on its own
    connection."""
    connection_class = http.client.HTTPSConnection if scheme == 'https' else http.client.HTTPConnection
    conn = connection_class(host, port)
    conn.sock = _Recorder()  # http.client writes to a connection it is given, as it is
    try:
        conn.request(method, path, body=body, headers=headers)
    except ValueError as exc:  # http.client refuses a header value or path it cannot send
        raise ValueError(f'cannot send this request: {exc}') from None
    return bytes(conn.sock.sent)
