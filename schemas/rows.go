package schemas

// Row types of every artifact table. The parquet tags fix the column names
// that DuckDB, pyarrow and polars users see; change them only together with
// the table's schema version.

// Task is one row of the tasks table: a question of some domain and split.
type Task struct {
	ID       string   `parquet:"id" json:"id"`
	Domain   string   `parquet:"domain" json:"domain"`
	Split    string   `parquet:"split" json:"split"`
	Question string   `parquet:"question" json:"question"`
	Answers  []string `parquet:"answers,list" json:"answers"`
	// Meta is a JSON object with domain-specific fields (a puzzle's FEN and
	// rating, a data source's extra_info); JSON text keeps the column type
	// stable across domains.
	Meta string `parquet:"meta" json:"meta"`
}

// ToolCall is one native tool call made by the model in an assistant message.
type ToolCall struct {
	ID        string `parquet:"id" json:"id"`
	Name      string `parquet:"name" json:"name"`
	Arguments string `parquet:"arguments" json:"arguments"`
}

// Message is one chat message as the model saw or wrote it.
type Message struct {
	Role       string     `parquet:"role" json:"role"`
	Content    string     `parquet:"content" json:"content"`
	Name       string     `parquet:"name" json:"name,omitempty"`
	ToolCallID string     `parquet:"tool_call_id" json:"tool_call_id,omitempty"`
	ToolCalls  []ToolCall `parquet:"tool_calls,list" json:"tool_calls,omitempty"`
	// Reasoning is the thinking the server returned apart from the content
	// of an assistant message (vLLM's reasoning_content), empty when there
	// was none. Added in schema version 2; files written before read it as
	// "".
	Reasoning string `parquet:"reasoning" json:"reasoning,omitempty"`
	// TokenIDs are the exact tokens the server generated for an assistant
	// message, and PromptTokenIDs the tokens its call's prompt added after
	// the previous call's prompt and completion (the whole prompt for the
	// first call), when the server returned ids and the episode's prompts
	// extended each other; empty otherwise. A trainer that has them for
	// every assistant message trains on exactly these tokens. Added in
	// schema version 2.
	TokenIDs       []int32 `parquet:"token_ids,list" json:"token_ids,omitempty"`
	PromptTokenIDs []int32 `parquet:"prompt_token_ids,list" json:"prompt_token_ids,omitempty"`
}

// TraceEvent is one step of an episode's execution trace: a hook call, a
// model call, a tool call or an error, with what the harness fed back.
type TraceEvent struct {
	Turn     int32  `parquet:"turn" json:"turn"`
	Kind     string `parquet:"kind" json:"kind"`
	Action   string `parquet:"action" json:"action"`
	Feedback string `parquet:"feedback" json:"feedback"`
}

// Rollout is one episode: a harness driving a model on a task.
type Rollout struct {
	Run              string       `parquet:"run" json:"run"`
	Position         string       `parquet:"position" json:"position"`
	ModelID          string       `parquet:"model_id" json:"model_id"`
	HarnessID        string       `parquet:"harness_id" json:"harness_id"`
	TaskID           string       `parquet:"task_id" json:"task_id"`
	Sample           int32        `parquet:"sample" json:"sample"`
	Seed             int64        `parquet:"seed" json:"seed"`
	Reward           float64      `parquet:"reward" json:"reward"`
	Correct          bool         `parquet:"correct" json:"correct"`
	Answer           string       `parquet:"answer" json:"answer"`
	FinishReason     string       `parquet:"finish_reason" json:"finish_reason"`
	Error            string       `parquet:"error" json:"error"`
	Turns            int32        `parquet:"turns" json:"turns"`
	PromptTokens     int64        `parquet:"prompt_tokens" json:"prompt_tokens"`
	CompletionTokens int64        `parquet:"completion_tokens" json:"completion_tokens"`
	LatencyMS        int64        `parquet:"latency_ms" json:"latency_ms"`
	Messages         []Message    `parquet:"messages,list" json:"messages"`
	Trace            []TraceEvent `parquet:"trace,list" json:"trace"`
	// Tools are the native tools the model was offered on every call, as
	// the OpenAI tools array in JSON; "" when none (or in files of schema
	// version 1).
	Tools string `parquet:"tools" json:"tools,omitempty"`
	// Where the episode ran, so that readers outside whale group rows
	// without parsing positions. Added in schema version 3: files written
	// before read them as zero values here, and as NULL in DuckDB with
	// union_by_name.
	//
	// Schedule is the run's schedule ("whale", "fst", "weights-only",
	// "harness-only", "stagewise"). Round is the alternation round of the
	// position (r003-… is 3); 0 for the initial pair's test r000-t.
	// Section says what the position is: "weight" (a weight step's
	// training rollouts), "harness" (a harness iteration's search-set
	// evaluation) or "test" (a test after a phase, or of the initial
	// pair). Stage is the stage that wrote the row ("rollout",
	// "evaluate"). A writer that was not told the schedule and round (a
	// stage run outside a planned run) writes Schedule "" and Round -1.
	Schedule string `parquet:"schedule" json:"schedule,omitempty"`
	Round    int32  `parquet:"round" json:"round,omitempty"`
	Section  string `parquet:"section" json:"section,omitempty"`
	Stage    string `parquet:"stage" json:"stage,omitempty"`
}

// SFTExample is one training example made from an accepted episode.
type SFTExample struct {
	ExampleID string    `parquet:"example_id" json:"example_id"`
	EpisodeID string    `parquet:"episode_id" json:"episode_id"`
	TaskID    string    `parquet:"task_id" json:"task_id"`
	Messages  []Message `parquet:"messages,list" json:"messages"`
	// TrainMask has one entry per message: true where the message was
	// written by the model and carries loss.
	TrainMask []bool `parquet:"train_mask,list" json:"train_mask"`
	// Tools are the episode's Rollout.Tools: a chat template renders them
	// into the context, so training must see them as the model did.
	Tools string `parquet:"tools" json:"tools,omitempty"`
}

// Eval is the score of one (candidate, task) pair over k samples.
type Eval struct {
	HarnessID  string  `parquet:"harness_id" json:"harness_id"`
	ModelID    string  `parquet:"model_id" json:"model_id"`
	TaskID     string  `parquet:"task_id" json:"task_id"`
	K          int32   `parquet:"k" json:"k"`
	MeanReward float64 `parquet:"mean_reward" json:"mean_reward"`
	PassAtK    float64 `parquet:"pass_at_k" json:"pass_at_k"`
	MeanTurns  float64 `parquet:"mean_turns" json:"mean_turns"`
	MeanTokens float64 `parquet:"mean_tokens" json:"mean_tokens"`
}

// Candidate is one harness candidate proposed during a harness phase.
type Candidate struct {
	HarnessID  string `parquet:"harness_id" json:"harness_id"`
	ParentID   string `parquet:"parent_id" json:"parent_id"`
	Name       string `parquet:"name" json:"name"`
	Hypothesis string `parquet:"hypothesis" json:"hypothesis"`
	Axis       string `parquet:"axis" json:"axis"`
	Proposer   string `parquet:"proposer" json:"proposer"`
	Source     string `parquet:"source" json:"source"`
}
