"""The verdict: why a run is not ok, decided in one place, without I/O.

``judge()`` reads a ``ResponseReader`` and the transport's failure; the
transport's failures (timeouts, the deadline, a stale connection, a signal)
are built next to it, in ``_failures``.
"""
import dataclasses

from ._limits import StreamError
from ._answer import _answer_problem, _cross_check_failure, cross_check_record, _streamed_answer, _unstreamed_problem
from ._reader import ResponseReader, UnstreamedReader
from ._request import PreparedRequest


def compare_twin(reader: ResponseReader, twin: UnstreamedReader | None, request: PreparedRequest,
                 budget: int | None = None) -> dict:
    """The record's ``cross_check`` from the streamed response and its unstreamed twin, both read to their
    end (sans-IO); ``twin`` None when it was not sent, the streamed request having got no 200. ``budget``:
    the twin's max_tokens when it was raised by one (_budget_proof_wanted)."""
    streamed = _streamed_answer(reader.validator)
    if twin is None:
        return cross_check_record(streamed, None, None, 'not sent: the streamed request got no answer with status 200')
    status = twin.head.status if twin.head is not None else None
    try:
        answer = twin.answer(request.api)
    except StreamError as exc:
        return cross_check_record(streamed, status, None, str(exc), budget)
    return cross_check_record(streamed, status, answer, _unstreamed_problem(answer, request.expect_finish), budget)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether a run is ok, which layer failed first and the kind of failure, and which layers completed."""

    layer: str | None
    message: str | None
    transport_complete: bool | None
    event_complete: bool | None
    application_complete: bool
    kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.layer is None


def judge(reader: ResponseReader, failure: StreamError | None = None, cross_check: dict | None = None) -> Verdict:
    """Why this response is not a finished answer: the one place that decides, and that sets the
    completeness flags. Sans-IO: ``failure`` is the transport's fact, one the reader could not see
    (no connection, a timeout, a signal, a stale connection; see below); otherwise the reader's own
    error, if any, is the failure, and a reader fed no whole head or only part of an error body
    ended there. ``cross_check`` is the comparison with the unstreamed twin (cross_check_record()),
    judged after the answer itself: it can add a failure, never clear one, since the checks of the
    stream never see it.

    A failure that stopped the reading (no connection, a bad status, invalid
    JSON, a timeout...) wins: the layers after it were never seen, so their
    flags are null. A transport failure still says whether the events that
    arrived ended on a boundary. A response read to its end is judged in the
    order a response is built: the HTTP framing, then the event stream, then
    the answer itself.
    """
    failure = failure or reader.error or reader.early_end()
    outcome = _answer_problem(reader.validator, cross_check)
    application_complete = outcome is None and not (failure is not None and failure.server_error)
    if failure is not None:
        if failure.layer != 'transport':
            return Verdict(failure.layer, failure.message, None, None, application_complete, failure.kind)
        event_complete = reader.events.pending() is None if reader.body is not None else None
        return Verdict('transport', failure.message, False, event_complete, application_complete, failure.kind)
    transport, events = reader.body.eof_failure(reader.incomplete_close), reader.events.pending()
    first = transport or events or outcome or _cross_check_failure(cross_check)
    return Verdict(first and first.layer, first and first.message, transport is None, events is None,
                   application_complete, first and first.kind)
