"""Which flag each workload honours: the one table, and the check that refuses the rest.

A flag given to a workload that does nothing with it would leave the command to exit 0 as if it had
been honoured (a gate that never ran, a shard that sends the whole trace). ``_FLAG_TABLE`` says, for
every flag of a load and each workload (one run, a load of prompts, --sessions, --trace), whether the
workload honours it; ``_check_workload_flags()`` refuses the others in one line naming both, before
any request is sent and any file created. docs/cli.md#flags-and-workloads shows the same table (a test
keeps them equal). The flags of ``_EVERY_WORKLOAD`` go with every workload; --exporter, --compare and
--summary check their own flags (``_EXPORTER_FLAGS``, ``_READING_FLAGS``).
"""
from ._limits import UsageError

# The workloads, as the table's columns name them.
_WORKLOADS = ('one run', 'load', '--sessions', '--trace')
_YES, _LOAD = 'yes', 'load'
# A refusal for good: the workload gives that itself, or the flag is another workload's. Keyed by the
# short word the table uses; the doc shows each as "no".
_WHY = {
    'load': 'it is for a load',
    'one': 'it keeps the raw bytes of one run',
    'turns': 'each session brings its own turns',
    'tools': 'each session brings its own tools',
    'for-trace': 'it is for --trace',
    'for-sessions': 'it is for --sessions',
    'prompts': 'the trace gives the prompts and their lengths',
    'schedule': 'the trace\'s timestamps are its schedule (--trace-speed scales them)',
    'draws': 'a trace draws nothing: each pass replays the same lines at the same times',
}
# flag: (one run, load, --sessions, --trace). yes: honoured; load: the flag makes the command a load (see
# that column); any other word: refused for the reason _WHY gives. Every workload runs on one engine
# (_engine), so what wraps one wraps them all: a refusal here is for good.
_FLAG_TABLE = {
    '--prompt': ('yes', 'yes', 'turns', 'prompts'),
    '--prompt-file': ('yes', 'yes', 'turns', 'prompts'),
    '--tools': ('yes', 'yes', 'tools', 'yes'),
    '--tool-choice': ('yes', 'yes', 'yes', 'yes'),
    '--json-schema': ('yes', 'yes', 'tools', 'yes'),
    '--cross-check': ('yes', 'yes', 'yes', 'yes'),
    '--dialect': ('yes', 'yes', 'yes', 'yes'),
    '--header': ('yes', 'yes', 'yes', 'yes'),
    '--runs': ('load', 'yes', 'yes', 'yes'),
    '--concurrency': ('load', 'yes', 'yes', 'yes'),
    '--rate': ('load', 'yes', 'yes', 'schedule'),
    '--processes': ('load', 'yes', 'yes', 'yes'),
    '--duration': ('load', 'yes', 'yes', 'schedule'),
    '--arrivals': ('load', 'yes', 'yes', 'schedule'),
    '--seed': ('yes', 'yes', 'yes', 'yes'),
    '--keep-alive': ('load', 'yes', 'yes', 'yes'),
    '--prompts': ('load', 'yes', 'turns', 'prompts'),
    '--trace-speed': ('for-trace', 'for-trace', 'for-trace', 'yes'),
    '--block-size': ('for-trace', 'for-trace', 'for-trace', 'yes'),
    '--input-tokens': ('yes', 'yes', 'turns', 'prompts'),
    '--output-tokens': ('yes', 'yes', 'yes', 'prompts'),
    '--shared-prefix-tokens': ('yes', 'yes', 'turns', 'prompts'),
    '--repeat': ('load', 'yes', 'yes', 'yes'),
    '--repeat-seeds': ('load', 'yes', 'yes', 'draws'),
    '--warmup': ('load', 'yes', 'yes', 'yes'),
    '--shard': ('load', 'yes', 'yes', 'yes'),
    '--start-at': ('load', 'yes', 'yes', 'yes'),
    '--server-metrics': ('load', 'yes', 'yes', 'yes'),
    '--metrics-interval': ('load', 'yes', 'yes', 'yes'),
    '--metrics-port': ('load', 'yes', 'yes', 'yes'),
    '--metrics-host': ('load', 'yes', 'yes', 'yes'),
    '--otlp-json': ('load', 'yes', 'yes', 'yes'),
    '--otlp-endpoint': ('load', 'yes', 'yes', 'yes'),
    '--rates': ('load', 'yes', 'yes', 'schedule'),
    '--concurrencies': ('load', 'yes', 'yes', 'schedule'),
    '--find-capacity': ('load', 'yes', 'yes', 'schedule'),
    '--slo': ('load', 'yes', 'yes', 'yes'),
    '--slo-target': ('load', 'yes', 'yes', 'yes'),
    '--fail-if': ('load', 'yes', 'yes', 'yes'),
    '--capture': ('yes', 'one', 'one', 'one'),
    '--report': ('load', 'yes', 'yes', 'yes'),
    '--csv': ('load', 'yes', 'yes', 'yes'),
    '--cache-salt': ('load', 'yes', 'yes', 'yes'),
    '--session-slo': ('for-sessions', 'for-sessions', 'yes', 'for-sessions'),
}
# The flags that make the command a load rather than one run (--runs of 2 or more); each is "load" in
# the one run's column, and honoured by a load. The other "load" cells of that column are refused: the
# flag is for a load, and nothing here makes one.
_LOAD_MAKERS = ('--runs', '--concurrency', '--rate', '--duration', '--prompts', '--rates', '--concurrencies',
                '--find-capacity')
# The flags every workload honours (the request's settings, the fixture, where the evidence goes), and
# those of the commands that send no load (they check their own flags).
_EVERY_WORKLOAD = ('--url', '--api', '--model', '--system', '--max-tokens', '--temperature', '--stop', '--extra',
                   '--expect-finish', '--idle', '--deadline', '--ca-file', '--no-proxy', '--fixture',
                   '--fixture-profile', '--output', '--quiet')
_OTHER_COMMANDS = ('--sessions', '--trace', '--compare', '--format', '--summary', '--mixed-sources', '--exporter',
                   '--targets', '--help', '--version')
_SEE = '(docs/cli.md#flags-and-workloads)'


def _given(parser, args, argv: list[str]) -> dict[str, bool]:
    """Each flag of the table: whether it was given, on the command line (argv: its default value given
    is given too, as --arrivals poisson is) or with a value other than its default."""
    actions = {action.option_strings[-1]: action for action in parser._actions if action.option_strings}
    words = argv[:argv.index('--')] if '--' in argv else argv  # after '--' come values only
    named = {word.split('=', 1)[0] for word in words}
    return {flag: bool(named & set(actions[flag].option_strings))
            or getattr(args, actions[flag].dest) != actions[flag].default for flag in _FLAG_TABLE}


def _workload_of(parser, args, argv: list[str]) -> tuple[int, str | None]:
    """The workload the command line asks for, as its column in _FLAG_TABLE, and the flag that chose it
    (None for one run)."""
    if args.sessions is not None and args.trace is not None:
        raise UsageError('--sessions and --trace exclude each other')
    if args.sessions is not None:
        return 2, '--sessions'
    if args.trace is not None:
        return 3, '--trace'
    given = _given(parser, args, argv)
    for flag in _LOAD_MAKERS:
        if given[flag] and (flag != '--runs' or args.runs != 1):
            return 1, flag
    return 0, None


def _check_workload_flags(parser, args, argv: list[str]) -> None:
    """UsageError, one line, for the first flag given (on the command line argv, or with a value other than
    its default) that the workload does not honour, in the table's order."""
    column, chosen_by = _workload_of(parser, args, argv)
    given = _given(parser, args, argv)
    for flag, cells in _FLAG_TABLE.items():
        cell = cells[column]
        if not given[flag] or cell == _YES or (cell == _LOAD and flag in _LOAD_MAKERS):
            continue
        if cell == 'load':
            raise UsageError(f'{flag} is for a load, not a single run: give --runs 2 or more, or --rate with '
                             f'--duration {_SEE}')
        if cell.startswith('for-'):
            raise UsageError(f'{flag} is for --{cell[4:]}{", not " + chosen_by if chosen_by else ""} {_SEE}')
        raise UsageError(f'{flag} does not go with {chosen_by}: {_WHY[cell]} {_SEE}')
    open_loop = args.rate is not None or args.rates is not None or args.find_capacity is not None
    if given['--arrivals'] and not open_loop:
        raise UsageError(f'--arrivals spaces the starts of an open loop: give --rate (a closed loop starts each run '
                         f'when a slot frees) {_SEE}')
    if given['--seed'] and not (open_loop or args.input_tokens is not None or args.output_tokens is not None
                                or args.fixture == 'mixed'):
        raise UsageError(f'--seed seeds what a load draws (the arrivals of --rate, the lengths of --input-tokens and '
                         f'--output-tokens, --fixture mixed), and this command draws nothing {_SEE}')
