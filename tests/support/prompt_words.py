"""A larger vocabulary for the scripted models the agent-CLI tests run (tests/support/scripted_model.py).

Claude Code and Codex send system prompts and tool lists of 40-90k characters. The tiny vocabulary
(tinymodel.py) has few words, so they were 30-67k tokens, about one per 1.3-2.5 characters, and
their prefill (quadratic in attention: most of those tests' time) cost seconds per turn. These are
the words and the runs of punctuation that carry most of the characters of those prompts (the
pinned CLIs' own, at the time of writing: common English words, their JSON schemas' keys): each is
a piece of the vocabulary with and without a space before it, so the same prompts are about
2.7 times fewer tokens. Nothing in a test depends on which words they are, only that prompts are
shorter; the ids of the tiny vocabulary's own tokens do not change.
"""

from __future__ import annotations

__all__ = ["PROMPT_WORDS"]

_WORDS = """
about absolute access accidentally accomplish account accurately achieved across action actions
active actual actually add adding additional advance advanced Adversarially After after again Agent
agent agents all allow allowed already also alternative Always always amending an analysis Analyze
and another answer answers Anthropic anthropic any anything app appear appears applicable apply
applying approach approval are args arguments array arrives as ask asked asking asks assistant at
attempt attribution audio audit authoring authorized automatically autonomous availability Available
available Avoid avoid back backfill background backticks based Bash bash be because been Before
before behavior being below benefit best better between block blocked blockers blocking body boolean
both bounded branch breaks broken browser budget bug bugs build building built bullet but by cache
call calling calls can cannot capabilities capable capped carefully cat change changed changes
characters chars chart check checked checking checklist checkout checks choose clarification Claude
claude clear closed cloud Code code codebase Codex coding collapsed command commands comment
commentary comments commit commits committed communicate Communication complete Completed completed
completes completing completion complex computer concise concrete condition config configure
configured confirm confirmation confirmed connected connector Consecutive consecutive consider const
contain contained contains content contents context continuations Control control conversation
conversational conversations coordinator correct correctness could count Create create credentials
critical current cursor dashboard data date decide dedicated default Defaults deferred defined
definition definitions delegate delegated delegating delegation deleting dependencies dependent
depends deploy describe description descriptions destructive detail details deterministically
developer diff different dimension direct directly directories directory disambiguate disjoint
Display diverged Do do documentation does doesn doing Don don done draft duplicate dynamic Each each
easier echo Edit edit edited editing efficiency effort efforts either else emojis empty ending ends
enhancement enough Ensure ensure enum environment error escalated etc even every everyday exact
exactly example Examples examples exec execute execution exist existing exists experience explaining
explanations explicit explicitly export external fabricate facing failed fails failure fallback
false feature feedback field file files filesystem filter final find finding findings finished
finishes fire firing first fix fixes flag flags follow followed following For for force foreground
fork forks form format formatting fresh from frontmatter full function functions further future
generation genuinely get git Github give given goal gpt guess guidance guideline guidelines hand
handle handling happen happened hard harness has have having header headers help here high history
hook hooks how https id If if Ignored ignored image images immediate immediately implement
implementation important in include included includes including independent independently
information inherit inherits initiative inline input inside inspection instance Instead instead
instruction Instructions instructions integer integration interaction interactive intermediate
interpolation interrupt interval into investigate investigation Investigations investigations
invocation invoke invoked is isolation issue issues It it items its itself json judgment just
justification Keep keep keeping key keyword keywords know knowledge label large larger later launch
launching leading least leave Legacy level like likely limit limits line lines list listed listing
literal load loading local locally login long longer loop low machine main make making markdown
marketplace match matched matches materially max Maximum maximum may md meaningful means meantime
medium memories memory mention mentions merely message messages meta migration milliseconds minimum
minutes miss mode model modifications modify modifying Monitor more most ms much multi multiple must
name named names nassistant necessary need needed Never never new next no non noop not nothing
notification notified notifies notify now number numbers object objective of often old Omit omitted
on once one ongoing Only only open operations opinion opportunities option Optional optional options
or orchestrates orchestration org Other other otherwise out outcome Output output outside over
overlapping override overrides overwrite own pages parallel parameter parameterized parameters
parent part particular Pass pass pasted patch path paths pattern patterns paused per perform
permission permissions phase phases pick pipeline place placeholder placeholders plain plan plugin
policy poll polling posted preamble precedence predict Prefer prefer preferred prefix present
presented Previous previous previously prior priority proactive proactively process professional
profile progress project prompt prompts properties provide provided provides pull purpose push query
question questions quickly range rather rationale re Read read readiness Reading reading reads
reason Reasoning reasoning rebase receive recent recommendation refactoring reference references
reflects related relative relevant remaining remains reminder Remote remote remove removed
repeatedly repeats replace replacements repo Report report reporting repository Request request
requested requests require Required required requirements requires research reset resources respond
response responses result results resume resumed resumes return returned Returns returns reuse
Review review reviewer right role rollout root row rules Run run running runs runtime safe same
sandbox sandboxing save saves scenario schedule scheduling schema scope scoped screenshot script
search second section security see select self send sending sensitive sentence sentences sentinel
sequentially Service session sessions Set set settings Shell shell ship short should show shown
sidecar signal similar simple simplification since single size skill skills skip slash sleep so
something sooner spaces spawn spawned spawning specific specifically specified specify staged
staging start started starting starts state status stays step steps still stop stopped stopping
streak strict string structure Structured structured style sub subagent subagents submodel subtask
subtasks such suggest summarizing summary surfaced surrounding survived system take takes target
targets task tasks telemetry tell temporary terminal test testing tests text than that The the their
them then there These these they things think thinking This this thoroughness those thread three
ticks tiers time timeout title To to token tokens too tool Tools tools tracked tracks true turn
turns type typed types ultra Ultracode unauthorized uncertain unclear uncommitted under underlying
understand understanding unified unique unless unnecessary unrelated unscoped unstaged until
untracked up update updates urgent usage Use use usefully User user uses using usually valid values
variables variant verbatim verdict verification verified verify very via view visible visual
visualizations vulnerabilities wait waiting wake wakeup wakeups want was wasted well what When when
where whether which whichever while whole whose why will window wired With with within without words
work worked Workflow workflow Workflows workflows working workspace worktree worth would Write write
writes Writing writing written wrong xhigh yielding You you your yourself
""".split()

# Runs of punctuation (and the space after) as JSON schemas, Markdown and escaped JSON have them.
_PUNCTUATION = (
    '\n\n', '\n ', '\n$', '\n- ', '\n<', '" ', '"), ', '"). ', '",\n ', '", ', '","', '":', '": ',
    '":"', '":["', '":{"', '":{"$', '"], ', '"],"', '"]}, ', '"]},"', '"}, ', '"},"', '"}}, ', '"}},"',
    '# ', '## ', '### ', "' ", "', ", '("', '() ', '()/', '(--', '(.', '(\\"', '(`', ')\n', ')\n ',
    ')\n- ', ') ', ')", ', ')","', ')**: ', '), ', ').\n', ').\n- ', '). ', ').\\', '): ', '); ', ')\\',
    '* ', '**', '**\n\n- ', '** ', '**: ', '+ ', ', ', ',"', '- ', '--', '.\n', '.\n\n', '.\n\n# ',
    '.\n\n## ', '.\n\n**', '.\n ', '.\n- ', '.\n</', '. ', '." ', '.", ', '.","', '."}, ', '."},"',
    '."}}, ', '."}},"', '.), ', '.** ', '., ', '.</', '.\\', '.\\" ', '.”\n- ', '/ ', ':\n\n- ', ':\n ',
    ':\n- ', ': ', ':${', ':** ', '://', ':// ', '://<', ':\\', '; ', '</', "<<'", '= ', '=> ', '>\n',
    '>\n ', '>\n<', '>\n</', '> ', '>/', '>>` ', '>@<', '>\\', '>` ', '?\\"\\', '["', '\\"', '\\" ',
    '\\"). ', '\\", ', '\\",\\', '\\": ', '\\"\\', '] ', '` ', '`) ', '`, ', '`-', '`. ', '`/', '`: ',
    '`; ', '`<<', '`@', '{ ', '{"', '{"$', '})\\', '}, ', '},"', '}` ', '}`, ', '}}, ', '}},{"', '— ',
    '” ', '→ ',
)

#: For tiny_vocab(words=...) / write_scripted_gguf(words=...).
PROMPT_WORDS: tuple[str, ...] = tuple(v for w in _WORDS for v in (w, " " + w)) + _PUNCTUATION
