package slurm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/whalerun/whale/internal/redact"
	jobslurm "github.com/whalerun/whale/jobs/slurm"
)

// Template names of jobs/slurm.
const (
	TemplateStage       = "stage.sbatch.tmpl"
	TemplateArray       = "array.sbatch.tmpl"
	TemplateCommit      = "commit.sbatch.tmpl"
	TemplateTrainer     = "trainer.sbatch.tmpl"
	TemplateVLLMRollout = "vllm-rollout.sbatch.tmpl"
)

// ShardPlaceholder in an argument of an array job's Command becomes the
// task's index ("$SLURM_ARRAY_TASK_ID") in the script, e.g.
// "--shard={shard}".
const ShardPlaceholder = "{shard}"

// Spec is one sbatch job. Zero fields are left to the site's defaults.
type Spec struct {
	// Name is the job name (--job-name): letters, digits, '.', '_', '-';
	// Jobs finds jobs by its prefix, so whale names them
	// whale-<run>-<position>-<stage>.
	Name string
	// Command is the argv the job runs; each argument is shell-quoted.
	Command []string
	// Chdir is the job's working directory (--chdir); relative Output and
	// Error paths resolve against it.
	Chdir string

	Partition string
	Account   string
	QOS       string
	// CPUsPerTask is --cpus-per-task.
	CPUsPerTask int
	// Mem is --mem: a number with an optional K, M, G or T suffix.
	Mem string
	// GPUs is the number of GPUs on the node (--gres=gpu[:GPUType]:N).
	GPUs    int
	GPUType string
	// Time is the wall-clock limit (--time), rounded up to a second.
	Time time.Duration

	// Output and Error are the log paths (--output, --error); Slurm's
	// patterns (%j, %A, %a, %x) work. No whitespace.
	Output string
	Error  string

	// Requeue lets Slurm requeue the job after a node failure
	// (--requeue, else --no-requeue). Whale's stages are idempotent, so
	// it is safe for them; logs are then appended, not truncated.
	Requeue bool

	// Shards makes the job an array of Shards tasks, --array=0-(Shards-1);
	// MaxParallel throttles how many run at once (%M, 0: no limit).
	Shards      int
	MaxParallel int

	// AfterOK are job ids this job waits for (--dependency=afterok:…); an
	// array's id waits for all of its tasks.
	AfterOK []string
	// KeepOnInvalidDep leaves the job pending (Reason
	// DependencyNeverSatisfied) when a dependency fails, instead of having
	// Slurm cancel it (--kill-on-invalid-dep=yes, the default here so that
	// nothing lingers in the queue after a failed stage).
	KeepOnInvalidDep bool

	// Env is exported by the script. Credentials must not be put here: the
	// script is stored by slurmctld and shown by `scontrol write
	// batch_script`. They reach the job through the submitting process's
	// environment (sbatch exports it by default).
	Env map[string]string
	// Prologue lines run before the command, verbatim (module load …,
	// source venv/bin/activate). They are shell code by intent.
	Prologue []string
	// Extra are further sbatch options, one per "#SBATCH" line, such as
	// "--constraint=a100" or "--exclusive".
	Extra []string

	// VLLM configures the server of TemplateVLLMRollout.
	VLLM *VLLM
}

// VLLM is the inference server a vllm-rollout job runs next to its shard.
type VLLM struct {
	// Model is what `vllm serve` loads: a hub name or a local path.
	Model string
	// Port is the base port; task i listens on Port + i%1000 (default 8000).
	Port int
	// Args are further `vllm serve` arguments, each shell-quoted.
	Args []string
	// Start bounds the wait for /health (default 15 minutes: large models
	// load slowly).
	Start time.Duration
}

// view is what the templates see: every string is already validated and
// quoted where the shell will read it.
type view struct {
	Name       string
	Directives []string
	Env        []string
	Prologue   []string
	Command    string
	Shards     int
	GPUs       int
	VLLM       *vllmView
}

type vllmView struct {
	Model        string
	Port         int
	Args         []string
	StartSeconds int
}

// Renderer renders sbatch scripts from a set of templates.
type Renderer struct {
	t *template.Template
}

// DefaultRenderer renders the templates of jobs/slurm embedded in the
// binary.
func DefaultRenderer() *Renderer {
	r, err := NewRenderer(jobslurm.Templates)
	if err != nil {
		// The embedded templates are parsed by the tests; this is a build
		// defect, not a runtime condition.
		panic(err)
	}
	return r
}

// NewRenderer parses every *.tmpl at the top of fsys, e.g. os.DirFS of a
// site's copy of jobs/slurm.
func NewRenderer(fsys fs.FS) (*Renderer, error) {
	t, err := template.New("whale").Option("missingkey=error").ParseFS(fsys, "*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse sbatch templates: %w", err)
	}
	return &Renderer{t: t}, nil
}

// Render fills the template name (one of the Template* constants) with s.
func (r *Renderer) Render(name string, s Spec) (string, error) {
	if r.t.Lookup(name) == nil {
		return "", fmt.Errorf("sbatch template %q not found", name)
	}
	v, err := s.view(name)
	if err != nil {
		return "", fmt.Errorf("render %s for job %q: %w", name, s.Name, err)
	}
	var b bytes.Buffer
	if err := r.t.ExecuteTemplate(&b, name, v); err != nil {
		return "", fmt.Errorf("render %s for job %q: %w", name, s.Name, err)
	}
	return b.String(), nil
}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	wordRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._,+-]*$`)
	memRE     = regexp.MustCompile(`^[0-9]+[KMGT]?$`)
	envKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	jobIDRE   = regexp.MustCompile(`^[0-9]+(_[0-9]+)?$`)
	secretKey = regexp.MustCompile(`(?i)(SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|_KEY$|_KEY_ID$|^API_KEY$)`)
)

// credentialsHint ends the error for a URL that would put a secret into a
// script.
const credentialsHint = "a job script is stored by slurmctld and shown by scontrol: give credentials " +
	"through the environment of the submitting process (sbatch passes it on), and keep only configuration in URLs"

// errSpec marks a Spec that cannot be rendered.
var errSpec = errors.New("invalid job spec")

func specErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errSpec, fmt.Sprintf(format, a...))
}

// arrayTemplates need Shards ≥ 1 and singleTemplates need 0; a site's own
// template names are not checked.
var (
	arrayTemplates  = map[string]bool{TemplateArray: true, TemplateVLLMRollout: true}
	singleTemplates = map[string]bool{TemplateStage: true, TemplateCommit: true, TemplateTrainer: true}
)

func (s Spec) view(tmpl string) (*view, error) {
	if !nameRE.MatchString(s.Name) || len(s.Name) > 200 {
		return nil, specErr("name %q: want letters, digits, '.', '_' or '-' (at most 200)", s.Name)
	}
	if len(s.Command) == 0 {
		return nil, specErr("no command")
	}
	switch {
	case s.Shards < 0:
		return nil, specErr("shards %d < 0", s.Shards)
	case arrayTemplates[tmpl] && s.Shards == 0:
		return nil, specErr("template %s runs an array: set Shards ≥ 1", tmpl)
	case singleTemplates[tmpl] && s.Shards > 0:
		return nil, specErr("template %s runs one task, but Shards is %d: use %s", tmpl, s.Shards, TemplateArray)
	}
	if tmpl == TemplateTrainer && s.GPUs < 1 {
		return nil, specErr("template %s needs GPUs ≥ 1", tmpl)
	}
	if s.MaxParallel < 0 || (s.MaxParallel > 0 && s.Shards == 0) {
		return nil, specErr("max parallel %d needs an array (Shards ≥ 1)", s.MaxParallel)
	}
	var d []string
	add := func(format string, a ...any) { d = append(d, fmt.Sprintf(format, a...)) }
	add("--job-name=%s", s.Name)
	for _, f := range []struct{ flag, val string }{{"partition", s.Partition}, {"account", s.Account}, {"qos", s.QOS}} {
		if f.val == "" {
			continue
		}
		if !wordRE.MatchString(f.val) {
			return nil, specErr("%s %q: want letters, digits and . _ , + -", f.flag, f.val)
		}
		add("--%s=%s", f.flag, f.val)
	}
	if s.Time < 0 {
		return nil, specErr("time %s < 0", s.Time)
	}
	if s.Time > 0 {
		add("--time=%s", SlurmDuration(s.Time))
	}
	if s.CPUsPerTask < 0 {
		return nil, specErr("cpus per task %d < 0", s.CPUsPerTask)
	}
	if s.CPUsPerTask > 0 {
		add("--cpus-per-task=%d", s.CPUsPerTask)
	}
	if s.Mem != "" {
		if !memRE.MatchString(s.Mem) {
			return nil, specErr("mem %q: want a number with an optional K, M, G or T suffix", s.Mem)
		}
		add("--mem=%s", s.Mem)
	}
	if s.GPUs < 0 {
		return nil, specErr("gpus %d < 0", s.GPUs)
	}
	if s.GPUType != "" && (s.GPUs == 0 || !nameRE.MatchString(s.GPUType)) {
		return nil, specErr("gpu type %q: needs GPUs ≥ 1 and letters, digits, '.', '_' or '-'", s.GPUType)
	}
	if s.GPUs > 0 {
		if s.GPUType != "" {
			add("--gres=gpu:%s:%d", s.GPUType, s.GPUs)
		} else {
			add("--gres=gpu:%d", s.GPUs)
		}
	}
	if s.Shards > 0 {
		if s.MaxParallel > 0 {
			add("--array=0-%d%%%d", s.Shards-1, s.MaxParallel)
		} else {
			add("--array=0-%d", s.Shards-1)
		}
	}
	if len(s.AfterOK) > 0 {
		for _, id := range s.AfterOK {
			if !jobIDRE.MatchString(id) {
				return nil, specErr("dependency %q is not a job id", id)
			}
		}
		add("--dependency=afterok:%s", strings.Join(s.AfterOK, ":"))
		if !s.KeepOnInvalidDep {
			add("--kill-on-invalid-dep=yes")
		}
	}
	for _, f := range []struct{ flag, val string }{{"output", s.Output}, {"error", s.Error}, {"chdir", s.Chdir}} {
		if f.val == "" {
			continue
		}
		if strings.ContainsFunc(f.val, isSpaceOrControl) {
			return nil, specErr("%s path %q contains whitespace or control characters", f.flag, f.val)
		}
		add("--%s=%s", f.flag, f.val)
	}
	if s.Requeue {
		add("--requeue")
		add("--open-mode=append")
	} else {
		add("--no-requeue")
	}
	for _, x := range s.Extra {
		if !strings.HasPrefix(x, "-") || strings.ContainsFunc(x, isControl) {
			return nil, specErr("extra sbatch option %q: want one option such as --constraint=a100", x)
		}
		d = append(d, x)
	}

	v := &view{Name: s.Name, Directives: d, Shards: s.Shards, GPUs: s.GPUs}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if !envKeyRE.MatchString(k) {
			return nil, specErr("environment variable name %q", k)
		}
		if secretKey.MatchString(k) {
			return nil, specErr("environment variable %s looks like a credential: pass it in the environment of the submitting process, not in the script", k)
		}
		if err := redact.CheckText(s.Env[k]); err != nil {
			return nil, specErr("environment variable %s: %v; %s", k, err, credentialsHint)
		}
		v.Env = append(v.Env, k+"="+Quote(s.Env[k]))
	}
	for _, l := range s.Prologue {
		if strings.ContainsAny(l, "\n\r") {
			return nil, specErr("prologue line %q contains a newline: give one line per entry", l)
		}
		v.Prologue = append(v.Prologue, l)
	}
	cmd, err := commandLine(s.Command, s.Shards > 0)
	if err != nil {
		return nil, err
	}
	v.Command = cmd
	if tmpl == TemplateVLLMRollout {
		if s.VLLM == nil || s.VLLM.Model == "" {
			return nil, specErr("template %s needs VLLM.Model", tmpl)
		}
		vv := &vllmView{Model: Quote(s.VLLM.Model), Port: s.VLLM.Port, StartSeconds: int((s.VLLM.Start + time.Second - 1) / time.Second)}
		if vv.Port == 0 {
			vv.Port = 8000
		}
		if vv.Port < 1024 || vv.Port > 65535-1000 {
			return nil, specErr("vllm port %d: want 1024…%d", vv.Port, 65535-1000)
		}
		if vv.StartSeconds == 0 {
			vv.StartSeconds = 15 * 60
		}
		for i, a := range s.VLLM.Args {
			if err := redact.CheckText(a); err != nil {
				return nil, specErr("vllm argument %d: %v; %s", i, err, credentialsHint)
			}
			vv.Args = append(vv.Args, Quote(a))
		}
		v.VLLM = vv
	} else if s.VLLM != nil {
		return nil, specErr("VLLM is set but template %s starts no server", tmpl)
	}
	return v, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func isSpaceOrControl(r rune) bool { return isControl(r) || r == ' ' }

// commandLine quotes argv for the shell. In an array job, ShardPlaceholder
// inside an argument becomes "${SLURM_ARRAY_TASK_ID}".
func commandLine(argv []string, array bool) (string, error) {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, "\n\r\x00") {
			return "", specErr("command argument %d %q contains a newline or NUL", i, a)
		}
		if err := redact.CheckText(a); err != nil {
			return "", specErr("command argument %d: %v; %s", i, err, credentialsHint)
		}
		if !strings.Contains(a, ShardPlaceholder) {
			parts[i] = Quote(a)
			continue
		}
		if !array {
			return "", specErr("command argument %d %q uses %s outside an array job", i, a, ShardPlaceholder)
		}
		pieces := strings.Split(a, ShardPlaceholder)
		var b strings.Builder
		for j, p := range pieces {
			if j > 0 {
				b.WriteString(`"${SLURM_ARRAY_TASK_ID}"`)
			}
			if p != "" {
				b.WriteString(Quote(p))
			}
		}
		parts[i] = b.String()
	}
	return strings.Join(parts, " "), nil
}

// Quote returns s as one shell word: bare when it is made of safe
// characters, else in single quotes.
func Quote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SlurmDuration formats d as Slurm's [days-]hours:minutes:seconds, rounded
// up to a whole second.
func SlurmDuration(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	days, secs := secs/86400, secs%86400
	hms := fmt.Sprintf("%02d:%02d:%02d", secs/3600, secs%3600/60, secs%60)
	if days > 0 {
		return strconv.FormatInt(days, 10) + "-" + hms
	}
	return hms
}

// Directives returns the options of a script's "#SBATCH" lines, in order.
// Like sbatch, it reads them only up to the first line that is neither a
// comment nor blank.
func Directives(script string) []string {
	var d []string
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#!") {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			break
		}
		if opt, ok := strings.CutPrefix(line, "#SBATCH"); ok && (opt == "" || opt[0] == ' ' || opt[0] == '\t') {
			if opt = strings.TrimSpace(opt); opt != "" {
				d = append(d, opt)
			}
		}
	}
	return d
}
