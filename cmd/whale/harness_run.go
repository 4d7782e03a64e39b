package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// harnessRunOptions is one `whale harness run`.
type harnessRunOptions struct {
	File   string // a harness file, or "h0" for the domain's baseline
	Domain string
	TaskID string // "" means the first task of the domain
	Tasks  string // a dataset name under --root, or a local file
	Root   string

	Endpoints   []string
	Model       string
	APIKeyEnv   string
	Temperature *float64
	MaxTokens   int64 // 0: the harness's MAX_TOKENS
	Seed        int64

	Retriever string // searchqa: a Search-R1 retrieval server
	// RetrieverAPIKeyEnv names the variable holding the token of a
	// Retriever that wants one (whale index serve's WHALE_SERVE_TOKEN).
	RetrieverAPIKeyEnv string
	Index              string // searchqa: an index in the bucket
	CacheDir           string // where --index is unpacked
	Sandbox            string // math: a SandboxFusion server; "" runs python3 here

	JSON bool
}

func harnessRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "play one episode of a task with a harness and a model, and print it turn by turn",
		ArgsUsage: "FILE|h0",
		Description: `Loads FILE (or the domain's baseline harness with h0) under the contract
of --domain, finds task --task in --tasks and plays one episode against the
model behind --endpoint. Prints every message with its role, the tool calls
and what the environment answered, then the reward, how the episode ended
and the tokens used; --json prints the rollout row instead.

--tasks is a dataset name in the bucket (datasets/<name>, see whale data
import) or a local file: a tasks table (.parquet), JSONL, a Lichess CSV or
verl Parquet. Without --task the first task of the domain is played.

Tools: searchqa searches through --retriever (a Search-R1 retrieval server)
or --index (an index built with whale index build, downloaded from the
bucket); without either, each search fails with "no retriever configured".
A retrieval server that wants a token (whale index serve with
WHALE_SERVE_TOKEN set) gets the one in the variable
--retriever-api-key-env names, as "Authorization: Bearer TOKEN";
--api-key-env is the model's key, never sent to the retriever.
math runs code on --sandbox (a SandboxFusion server) or, by default, with
python3 on this machine (isolated: no network, no environment).

A bad harness, task or flag is exit code 2; an episode that ends with an
error (the model unreachable, a hook failing) is printed, then exit code 1
(2 when the harness's own code failed).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "domain", Usage: "`DOMAIN` of the harness and task: " + strings.Join(registry.Names(), ", ")},
			&cli.StringFlag{Name: "task", Usage: "task `ID` to play; default: the first task of the domain"},
			&cli.StringFlag{Name: "tasks", Usage: "dataset `NAME` in the bucket, or a local tasks FILE (.parquet, .jsonl, .csv)"},
			rootFlag(),
			&cli.StringSliceFlag{Name: "endpoint", Usage: "OpenAI-compatible base `URL` of the model (http://host:8000/v1); repeat for several"},
			&cli.StringFlag{Name: "model", Usage: "model `NAME` sent with each request"},
			&cli.StringFlag{Name: "api-key-env", Usage: "environment `VARIABLE` that holds the API key (the key itself is never a flag)"},
			&cli.Float64Flag{Name: "temperature", Usage: "sampling temperature; default: the server's"},
			&cli.Int64Flag{Name: "max-tokens", Usage: "completion tokens per call; default: the harness's MAX_TOKENS"},
			&cli.Int64Flag{Name: "seed", Usage: "episode seed (each call sends it plus the turn number)"},
			&cli.StringFlag{Name: "retriever", Usage: "searchqa: Search-R1 retrieval server `URL` (POST /retrieve)"},
			&cli.StringFlag{Name: "retriever-api-key-env", Usage: "searchqa: environment `VARIABLE` that holds the --retriever server's token (whale index serve's WHALE_SERVE_TOKEN)"},
			&cli.StringFlag{Name: "index", Usage: "searchqa: `NAME` of an index in the bucket (indexes/NAME, see whale index build)"},
			&cli.StringFlag{Name: "cache", Usage: "local cache `DIR` for --index (default: the user cache dir)"},
			&cli.StringFlag{Name: "sandbox", Usage: "math: SandboxFusion `URL` for code runs; default: python3 on this machine"},
			&cli.BoolFlag{Name: "json", Usage: "print the rollout row as JSON"},
		},
		Action: action(func(c *cli.Context, args []string) error {
			if len(args) != 1 {
				return usagef("harness run takes one harness file (or h0), got %d arguments", len(args))
			}
			o := harnessRunOptions{
				File: args[0], Domain: c.String("domain"), TaskID: c.String("task"), Tasks: c.String("tasks"), Root: c.String("root"),
				Endpoints: c.StringSlice("endpoint"), Model: c.String("model"), APIKeyEnv: c.String("api-key-env"),
				MaxTokens: c.Int64("max-tokens"), Seed: c.Int64("seed"),
				Retriever: c.String("retriever"), RetrieverAPIKeyEnv: c.String("retriever-api-key-env"), Index: c.String("index"), CacheDir: c.String("cache"), Sandbox: c.String("sandbox"),
				JSON: c.Bool("json"),
			}
			if c.IsSet("temperature") {
				t := c.Float64("temperature")
				o.Temperature = &t
			}
			return runHarnessRun(c.Context, o, c.App.Writer)
		}),
	}
}

func runHarnessRun(ctx context.Context, o harnessRunOptions, out io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	dom, err := registry.Lookup(o.Domain, registry.Resources{})
	if err != nil {
		return usageError{err}
	}
	h, err := loadRunHarness(o.File, dom)
	if err != nil {
		return err
	}
	task, err := findTask(ctx, o)
	if err != nil {
		return err
	}
	// A task the domain cannot play (a chess puzzle whose line is illegal)
	// is bad input: say so before reaching any server.
	if _, err := dom.NewEnv(ctx, task, h); err != nil {
		return usageError{fmt.Errorf("task %s: %w", task.ID, err)}
	}
	res, closeRes, err := o.resources(ctx, h)
	if err != nil {
		return err
	}
	defer closeRes()
	if dom, err = registry.Lookup(o.Domain, res); err != nil {
		return usageError{err}
	}
	cfg := models.Config{Endpoints: o.Endpoints, Model: o.Model, APIKeyEnv: o.APIKeyEnv}
	if o.APIKeyEnv != "" && os.Getenv(o.APIKeyEnv) == "" {
		return usagef("--api-key-env %s: the variable is not set", o.APIKeyEnv)
	}
	m, err := models.New(cfg)
	if err != nil {
		return usageError{fmt.Errorf("model: %w", err)}
	}
	ecfg := episode.Config{Seed: o.Seed}
	ecfg.Sampling.Temperature = o.Temperature
	if o.MaxTokens > 0 {
		ecfg.Sampling.MaxTokens = models.Ptr(o.MaxTokens)
	}

	r := episode.Run(ctx, dom, h, m, task, ecfg)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if o.JSON {
		row := r.Row(schemas.Rollout{HarnessID: h.ID(), TaskID: task.ID, Seed: o.Seed})
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(row); err != nil {
			return err
		}
	} else {
		printEpisode(out, o, h, task, r)
	}
	if r.FinishReason == episode.FinishError {
		if strings.HasPrefix(r.Error, "hook ") {
			return usagef("episode failed in the harness: %s", r.Error)
		}
		return fmt.Errorf("episode failed: %s", r.Error)
	}
	return nil
}

func (o harnessRunOptions) check() error {
	switch {
	case o.Domain == "":
		return usagef("harness run needs --domain (%s)", strings.Join(registry.Names(), ", "))
	case o.Tasks == "":
		return usagef("harness run needs --tasks: a dataset name in --root or a local tasks file")
	case len(o.Endpoints) == 0:
		return usagef("harness run needs --endpoint: the model's OpenAI-compatible base URL")
	case o.Model == "":
		return usagef("harness run needs --model: the model name the server serves")
	case o.Retriever != "" && o.Index != "":
		return usagef("--retriever and --index both name a retriever: pass one")
	case o.RetrieverAPIKeyEnv != "" && o.Retriever == "":
		return usagef("--retriever-api-key-env names the token of a --retriever server; pass --retriever URL")
	case (o.Retriever != "" || o.Index != "") && o.Domain != "searchqa":
		return usagef("--retriever and --index are for the searchqa domain, not %s", o.Domain)
	case o.Sandbox != "" && o.Domain != "math":
		return usagef("--sandbox is for the math domain, not %s", o.Domain)
	}
	return nil
}

// loadRunHarness loads file, or the domain's h0, under its contract.
func loadRunHarness(file string, dom episode.Domain) (*harness.Harness, error) {
	name, src := file, []byte(nil)
	if file == "h0" {
		name, src = dom.Name()+"/h0.star", dom.Baseline()
	} else {
		var err error
		if src, err = os.ReadFile(file); err != nil {
			return nil, usageError{fmt.Errorf("harness: %w", err)}
		}
	}
	h, err := harness.Load(name, src, harness.Options{Contract: dom.Contract()})
	if err != nil {
		var le *harness.LoadError
		if errors.As(err, &le) {
			probs := make([]string, len(le.Problems))
			for i, p := range le.Problems {
				probs[i] = p.String()
			}
			return nil, usageError{fmt.Errorf("harness does not load for domain %s: %s", dom.Name(), strings.Join(probs, "; "))}
		}
		return nil, fmt.Errorf("load harness %s: %w", name, err)
	}
	return h, nil
}

// errTaskFound stops a task scan at the task wanted.
var errTaskFound = errors.New("task found")

// findTask scans the tasks of o.Tasks for o.TaskID (or the first task of
// the domain), stopping at the first match.
func findTask(ctx context.Context, o harnessRunOptions) (schemas.Task, error) {
	var found schemas.Task
	var seen, other int
	match := func(t schemas.Task) error {
		seen++
		if o.TaskID != "" && t.ID != o.TaskID {
			return nil
		}
		if t.Domain != "" && t.Domain != o.Domain {
			if o.TaskID == "" {
				other++
				return nil
			}
			return usagef("task %s is of domain %s, not %s", t.ID, t.Domain, o.Domain)
		}
		found = t
		return errTaskFound
	}
	var err error
	if isLocalTasks(o.Tasks) {
		err = scanLocalTasks(ctx, o.Tasks, o.Domain, match)
	} else {
		err = scanDatasetTasks(ctx, o, match)
	}
	var ue usageError
	switch {
	case errors.Is(err, errTaskFound):
		return found, nil
	case errors.As(err, &ue):
		return found, ue
	case err != nil:
		return found, err
	case o.TaskID != "":
		return found, usagef("no task %q among the %d tasks of %s", o.TaskID, seen, o.Tasks)
	}
	return found, usagef("no task of domain %s among the %d tasks of %s (%d of other domains)", o.Domain, seen, o.Tasks, other)
}

// isLocalTasks tells a file from a dataset name: dataset names have no
// dots or slashes.
func isLocalTasks(s string) bool {
	if _, err := os.Stat(s); err == nil {
		return true
	}
	return strings.ContainsAny(s, "./"+string(filepath.Separator))
}

func scanLocalTasks(ctx context.Context, path, domain string, fn func(schemas.Task) error) error {
	if _, err := os.Stat(path); err != nil {
		return usageError{fmt.Errorf("--tasks: %w", err)}
	}
	if strings.HasSuffix(strings.ToLower(path), ".parquet") {
		// A whale tasks table (what whale data import writes); otherwise
		// the importers read it (verl/Search-R1 Parquet).
		f, err := os.Open(path)
		if err != nil {
			return usageError{fmt.Errorf("--tasks: %w", err)}
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if schemas.Validate(f, st.Size(), schemas.Tasks) == nil {
			err := schemas.ReadRows(ctx, f, st.Size(), fn)
			if err != nil && !isScanStop(err) {
				return usageError{fmt.Errorf("read tasks %s: %w", path, err)}
			}
			return err
		}
	}
	err := importers.ImportFile(ctx, path, importers.FormatUnknown, importers.Options{Domain: domain}, fn)
	if err != nil && !isScanStop(err) {
		return usageError{fmt.Errorf("read tasks: %w", err)}
	}
	return err
}

// isScanStop reports an error that the scan callback returned on purpose.
func isScanStop(err error) bool {
	var ue usageError
	return errors.Is(err, errTaskFound) || errors.As(err, &ue)
}

func scanDatasetTasks(ctx context.Context, o harnessRunOptions, fn func(schemas.Task) error) error {
	if err := storage.CheckDataset(o.Tasks); err != nil {
		return usageError{fmt.Errorf("--tasks: %w (or give a local file)", err)}
	}
	store, err := openRoot(ctx, o.Root)
	if err != nil {
		return err
	}
	defer store.Close()
	m, err := storage.ReadDataset(ctx, store, o.Tasks)
	if errors.Is(err, storage.ErrNotFound) {
		return usagef("no committed dataset %q in %s (whale data import brings one)", o.Tasks, store.URL())
	}
	if err != nil {
		return err
	}
	for _, f := range m.Table("tasks") {
		ra, err := m.OpenFile(ctx, store, f)
		if err != nil {
			return err
		}
		err = schemas.ReadRows(ctx, ra, ra.Size(), fn)
		if err != nil {
			if isScanStop(err) {
				return err
			}
			return fmt.Errorf("read %s: %w", m.FileKey(f), err)
		}
	}
	return nil
}

// resources builds the outside tools the domain's environments call, and
// a function that releases them.
func (o harnessRunOptions) resources(ctx context.Context, h *harness.Harness) (registry.Resources, func(), error) {
	var res registry.Resources
	noop := func() {}
	dom, err := registry.Get(o.Domain)
	if err != nil {
		return res, noop, usageError{err}
	}
	switch {
	case dom.Needs(registry.ToolRetriever):
		switch {
		case o.Retriever != "":
			if o.RetrieverAPIKeyEnv != "" && os.Getenv(o.RetrieverAPIKeyEnv) == "" {
				return res, noop, usagef("--retriever-api-key-env %s: the variable is not set", o.RetrieverAPIKeyEnv)
			}
			c, err := searchqa.NewClient(o.Retriever, searchqa.ClientOptions{APIKeyEnv: o.RetrieverAPIKeyEnv})
			if err != nil {
				return res, noop, usageError{fmt.Errorf("--retriever: %w", err)}
			}
			res.Retriever = c
		case o.Index != "":
			ix, err := openBucketIndex(ctx, o)
			if err != nil {
				return res, noop, err
			}
			res.Retriever = ix
			return res, func() { ix.Close() }, nil
		default:
			slog.Warn("harness run: no --retriever or --index; every search will fail with \"no retriever configured\"")
		}
	case dom.Needs(registry.ToolSandbox):
		// A harness may switch the code tool off (math's CODE_TOOL).
		if _, ok := h.Contract().Const("CODE_TOOL"); ok && !h.Bool("CODE_TOOL") {
			return res, noop, nil
		}
		if o.Sandbox != "" {
			s, err := mathdomain.NewSandboxFusion(mathdomain.SandboxFusionOptions{URL: o.Sandbox})
			if err != nil {
				return res, noop, usageError{fmt.Errorf("--sandbox: %w", err)}
			}
			res.CodeRunner = s
			return res, noop, nil
		}
		lp, err := mathdomain.NewLocalPython(ctx, mathdomain.LocalPythonOptions{})
		if err != nil {
			return res, noop, fmt.Errorf("the harness runs code (CODE_TOOL) and python3 cannot run here: %w; pass --sandbox URL", err)
		}
		res.CodeRunner = lp
	}
	return res, noop, nil
}

func openBucketIndex(ctx context.Context, o harnessRunOptions) (*searchqa.Index, error) {
	if err := searchqa.Indexes.Check(o.Index); err != nil {
		return nil, usageError{fmt.Errorf("--index: %w", err)}
	}
	return openStoredIndex(ctx, o.Root, o.Index, o.CacheDir)
}

// printEpisode writes the episode for people: the messages in order, each
// reply followed by what the environment did with it, then the verdict.
func printEpisode(out io.Writer, o harnessRunOptions, h *harness.Harness, task schemas.Task, r episode.Result) {
	fmt.Fprintf(out, "harness  %s (%s)\n", h.Filename(), h.ID())
	fmt.Fprintf(out, "task     %s (%s)\n", task.ID, o.Domain)
	fmt.Fprintf(out, "model    %s\n", o.Model)

	// Trace events by the turn they follow; only what the environment and
	// the tools did is shown here (--json has every hook call too).
	byTurn := map[int32][]schemas.TraceEvent{}
	modelEvents := map[int32]string{}
	var errs []schemas.TraceEvent
	for _, ev := range r.Trace {
		switch ev.Kind {
		case episode.KindTool, episode.KindEnv:
			byTurn[ev.Turn] = append(byTurn[ev.Turn], ev)
		case episode.KindModel:
			modelEvents[ev.Turn] = ev.Action
		case episode.KindError:
			errs = append(errs, ev)
		}
	}
	var turn int32
	for _, msg := range r.Messages {
		if msg.Role == "assistant" {
			turn++
			fmt.Fprintf(out, "\n──── turn %d  %s\n", turn, modelEvents[turn])
		}
		printMessage(out, msg)
		if msg.Role == "assistant" {
			for _, ev := range byTurn[turn] {
				fmt.Fprintf(out, "» %s %s → %s\n", ev.Kind, ev.Action, ev.Feedback)
			}
		}
	}
	for _, ev := range errs {
		fmt.Fprintf(out, "\n✗ error in %s: %s\n", ev.Action, ev.Feedback)
	}
	fmt.Fprintf(out, "\nreward   %g (correct: %v)\n", r.Reward, r.Correct)
	fmt.Fprintf(out, "answer   %q\n", r.Answer)
	fmt.Fprintf(out, "finish   %s", r.FinishReason)
	if r.Error != "" {
		fmt.Fprintf(out, ": %s", r.Error)
	}
	fmt.Fprintf(out, "\nturns    %d\n", r.Turns)
	fmt.Fprintf(out, "tokens   %d prompt, %d completion\n", r.PromptTokens, r.CompletionTokens)
	fmt.Fprintf(out, "latency  %s\n", r.Latency.Round(1e6))
	if r.ModelID != "" {
		fmt.Fprintf(out, "model id %s\n", r.ModelID)
	}
}

func printMessage(out io.Writer, msg schemas.Message) {
	head := "[" + msg.Role
	if msg.Name != "" {
		head += " " + msg.Name
	}
	if msg.ToolCallID != "" {
		head += " id=" + msg.ToolCallID
	}
	fmt.Fprintf(out, "%s]\n%s\n", head, strings.TrimRight(msg.Content, "\n"))
	for _, tc := range msg.ToolCalls {
		fmt.Fprintf(out, "  → tool call %s(%s) id=%s\n", tc.Name, tc.Arguments, tc.ID)
	}
}
