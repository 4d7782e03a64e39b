// Package propose is the propose stage of a harness iteration: it reads the
// phase's archive and writes M new harness candidates, each changing exactly
// one mechanism (an axis, see Axes) of the parent harness, or, from the
// archive backend, combining edits that each helped.
//
// Contract:
//   - Inputs: "tasks" (its first two rows are the dry-run tasks) and zero or
//     more archive inputs "archive-0", "archive-1", … (or "archive"): committed
//     propose stages (candidates.parquet with sources) and evaluate stages
//     (evals.parquet, rollouts.parquet with traces, and the summary that
//     names what they scored) of the phase. Scores are the evals averaged per
//     harness over the whole archive, and the Pareto frontier (success ↑,
//     mean turns ↓) and the winner are recomputed over it: each evaluate
//     stage's own frontier.json ranks only its own candidates. Sampled
//     episodes (a seeded reservoir of failed and passed ones per harness)
//     are read only by the llm backend; the agent backend streams every
//     episode into its workspace. An evaluate stage of mode "test" as an
//     archive input is refused, and rollout rows of section "test" are
//     skipped: no proposer sees test-split data.
//   - The parent is Config.Parent: "h0" is Domain.Baseline(); an id is taken from
//     a candidates table of the archive, else from Stage.Sources (the bucket's
//     harnesses/<hex>/harness.star, see StoreSources), which also supplies the
//     sources of archived harnesses scored by id only (an incoming harness).
//   - Backends are chosen by Config.Backend from one table (backends.go; its
//     names in order are Backends()): each row is a backend's name, the check
//     of its own settings, its proposer label, whether it reads sampled
//     episodes or asks a chat model (UsesLLM), and how it proposes. They are
//     mutate (offline and deterministic: one constant or prompt fragment per
//     candidate, seeded by the stage's seed and Config.Iteration), archive
//     (offline and deterministic too, learning from the archive: below), llm (one
//     chat call with the contract, the frontier's code and scores and sampled
//     failures; reply format: name:/axis:/hypothesis: lines, then a fenced
//     python block; proposer "llm:<model>"), agent (a command run in a
//     workspace of plain files, harvested from new/<name>/; see
//     writeWorkspace). Adding a proposer is its file and one row.
//   - The archive backend reads what every earlier candidate of the archive
//     did, as Meta-Harness's proposer reads the full history rather than
//     scores alone. For each archived harness with a parent it diffs the
//     two as loaded: the contract constants whose values differ are its
//     edit (an atom is one constant set to one value; code that differs
//     besides constants makes the edit opaque: counted, never recombined);
//     its effect is the mean over the search tasks both were scored on of
//     its per-task reward minus its parent's, with a standard error, on
//     the current model (the model id of the newest evaluation's evals:
//     scores on other models are not compared). Every search-set rollout
//     that did not end correct is classified by its finish reason and
//     trace (classifyFailure): format (finish "format"), tool (finish
//     "illegal", or a "tool error" in the trace), turns (finish
//     "max_turns" or "stopped"), wrong (an answer graded wrong), error (a
//     model, hook or environment failure: counted, never targeted). An
//     atom helped when every single-edit record of it scored above its
//     parent; it hurt when one scored more than hurtSEs standard errors
//     below (a plain "lower" would ban edits for noise: the parent is the
//     best so far and likely drew high). It then proposes, alternating
//     slot by slot and starting with (a): (a) the parent with every helped
//     atom it lacks applied together (one value per constant, the larger
//     effect), then shorter best-first prefixes of that list, then each
//     helped atom alone; (b) mutate's single edits of the parent in the
//     seeded order, never an atom that hurt on this model, those no record
//     tried first, each group sorted by the rank of the failure class the
//     edit targets in the parent's failures (all of the archive's when the
//     parent has none): FORMAT_RETRIES, ILLEGAL_RETRIES, MAX_TURNS and
//     MAX_TOKENS only when raised (format; tool; turns; turns and format),
//     prompt fragments by their focus, tool and retrieval settings tool and
//     wrong, board settings wrong and tool, other constants by the words of
//     their name and doc, hook names in the doc left out (editTargets). A combination that hurt as a whole
//     is not proposed again; a harness already in the archive never is.
//     Its summary adds archive_model, archive_records, archive_helped,
//     archive_hurt, archive_failures (class → episodes), archive_dominant
//     and archive_new_edits. Combinations name their axis when all their
//     atoms share one, else "combined".
//   - The agent's workspace holds, for every harness of the archive,
//     candidates/<dir>/harness.star, scores.json and trajectories.jsonl:
//     every search-set episode it played, one JSON line each (the rollout
//     row without token ids), streamed from the archive's rollouts row by
//     row; a line over 1 MiB has its texts cut ("clipped"), and past
//     64 MiB in a file or 512 MiB in all a line keeps only its outcome
//     ("omitted" says why). Also frontier.json, evolution_log.md,
//     CONTRACT.md, SKILL.md, search_tasks.txt (the ids of the tasks
//     input, the search set). With Config.Prototype, ./try lets the agent
//     play a harness on chosen search-set tasks: the stage plays each
//     request the script writes into prototype/requests/ itself, with
//     Stage.Model and the domain's tools and the config's sampling, within
//     Prototype.Episodes episodes per stage, and writes the answer back
//     (agent_prototype.go says why this design). A task of the test split
//     or not in the tasks input is refused.
//   - The agent is untrusted. It runs in a scratch folder new for each run
//     (workspace/, and its HOME and TMPDIR; removed afterwards unless
//     KeepWorkspace) with an environment allow-list, never whale's own:
//     AgentBaseEnv (PATH, locale, TZ, TERM), the workspace's WHALE_*
//     variables and the names of Config.AgentEnv, of which CheckAgentEnv
//     refuses the bucket's credentials (AWS_*, AZURE_*,
//     GOOGLE_APPLICATION_CREDENTIALS) and whale's own (WHALE_ROOT). Where
//     bubblewrap works it runs in a sandbox (agentSandbox.args): its own
//     user, PID and IPC namespaces with a fresh /proc (no whale process, no
//     /proc/<pid>/environ), the machine read-only, the network shared (it
//     calls its model's API; loopback included), its scratch folder the
//     only place it writes; masked by empty tmpfs (or /dev/null for files):
//     the directory of a file:// root (Stage.RootDir, StoreDir), the
//     folders of Stage.Hide (whale's caches and work folders), whale's
//     home ($HOME and passwd's: ~/.aws, ~/.config/gcloud, ~/.azure, ~/.ssh
//     …), /root, whale's cache folder and config folder, its runtime folder
//     (agent sockets), what the credential variables name
//     (AWS_SHARED_CREDENTIALS_FILE, KUBECONFIG, …), /run/secrets; /tmp and
//     whale's TMPDIR become a private writable tmpfs. The agent's programs
//     must therefore live outside the home (/usr/local, /opt): PATH
//     entries the sandbox hides are logged. When whale is root, bwrap
//     runs as uid 65534 (nobody, no capabilities), the scratch folder is
//     chowned to it, and WorkDir must be searchable by every user (the
//     default, the system's temporary folder, is). Without bubblewrap (or
//     user namespaces) a file:// root is refused (ErrNoAgentSandbox: the
//     agent could read and rewrite the bucket, evaluation artifacts
//     included); so is any other root unless WHALE_AGENT_NO_SANDBOX=1
//     (NoSandboxEnv), which runs the agent as whale's user with a warning:
//     it can then read that user's files, but not whale's environment
//     (cmd/whale makes whale undumpable). WHALE_AGENT_ENV (AgentEnvEnv)
//     names more variables for this process only, for runs frozen without
//     harness.agent.env. The summary's agent_sandbox says which ("bwrap",
//     "none").
//     A sandbox bwrap fails to set up fails the stage. Of what
//     it writes, only regular files are read, each opened once without
//     following a link and checked as opened: at most 128 entries in new/
//     (more: none read), harness.star up to harness.MaxSourceBytes,
//     meta.json up to 64 KiB; a link, FIFO, device or oversized file is a
//     bad_proposal. Its output (both streams) is stored as agent.log
//     while it runs: the first 64 MiB, streamed, and when longer a line
//     saying what was cut and the last 256 KiB (held in memory); it is
//     scrubbed piece by piece, cut only where no secret value straddles.
//     agent.log and the agent's names, hypotheses and axes are stored
//     scrubbed of the values of whale's secret variables (redact.Secrets)
//     and of URL credentials; a source that holds such a value is refused
//     and not stored.
//   - Every proposal is validated, in order: it loads under the domain's
//     contract (problems with file:line:col); it is not a duplicate of the parent,
//     of an archived harness or of an earlier candidate of the batch (same bytes,
//     or the same syntax tree up to comments and layout); under PromptOnly it
//     differs from the parent only in the values of SYSTEM_PROMPT and USER_PROMPT
//     (trees compared with those top-level assignments removed: comments and
//     layout may change, any other code may not); and a dry run of each dry-run
//     task through episode.Run against a scripted model (DryRunReplies) ends
//     without a hook failing. The dry run exercises the hooks, not a model: it
//     makes no model calls. An episode the environment itself fails is not
//     held against the candidate (counted as dry_run_env_errors).
//   - Outputs: candidates.parquet (schemas.Candidate, valid candidates only,
//     harness_id = harness.SourceID(source), parent_id the parent's id),
//     rejected.json (a JSON array of Rejection: every proposal or empty slot that
//     did not become a candidate, with its kind and reason), agent.log for the
//     agent backend, and the summary: backend, parent, proposed (= valid +
//     rejected: each rejected.json entry is one proposal or one unfilled slot),
//     valid, rejected, rejected_by_reason (kind → count), dry_run_env_errors and
//     backend details (mutate_edits, archive_*, llm token counts, agent_status, agent_sandbox,
//     agent_log_bytes, prototype_episodes, prototype_requests).
//   - Zero valid candidates is still a committed result: the planner decides.
//     The stage fails (commits nothing) only when it cannot work at all: a bad
//     config, an unresolvable or invalid parent, an unreadable input, a model
//     call that failed after its retries, an agent command that cannot start
//     (its sandbox included), an agent refused for want of a sandbox.
package propose
