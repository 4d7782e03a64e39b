package propose

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// AgentBaseEnv are the variables of whale's environment that every agent
// gets, when they are set: the search path, the locale, the time zone and
// the terminal type. Nothing else of whale's environment reaches the
// agent but the variables Config.AgentEnv names; whale adds HOME and
// TMPDIR (the run's scratch folders) and the WHALE_* variables of the
// workspace (see runAgent).
var AgentBaseEnv = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM"}

// agentDefaultPath is the agent's PATH when whale has none.
const agentDefaultPath = "/usr/local/bin:/usr/bin:/bin"

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// bucketCredentials are the names (prefixes end in '_') of the variables
// through which whale's storage drivers find the bucket's credentials.
var bucketCredentials = []string{"AWS_", "AZURE_", "GOOGLE_APPLICATION_CREDENTIALS"}

// CheckAgentEnv says why the variable called name may not be passed to
// the agent (Config.AgentEnv, harness.agent.env in the experiment file);
// nil when it may. The error does not repeat a name that is not one: it
// may be the secret itself, written where its name belongs.
//
// Refused: what is not a variable name; the bucket's credentials
// (AWS_*, AZURE_*, GOOGLE_APPLICATION_CREDENTIALS), since the agent must
// not reach the bucket, where it could rewrite what the evaluation reads;
// whale's own variables (WHALE_*: WHALE_ROOT names the bucket, and whale
// sets the workspace's WHALE_* itself); HOME and TMPDIR, which whale
// points at the run's scratch folders.
func CheckAgentEnv(name string) error {
	if !envNameRE.MatchString(name) {
		return errors.New("must name an environment variable (letters, digits and '_', not starting with a digit), not hold its value")
	}
	n := strings.ToUpper(name)
	for _, p := range bucketCredentials {
		if strings.HasPrefix(n, p) {
			return fmt.Errorf("%s is refused: the agent must not reach whale's bucket, so it never gets its credentials (AWS_*, AZURE_*, GOOGLE_APPLICATION_CREDENTIALS)", name)
		}
	}
	switch {
	case strings.HasPrefix(n, "WHALE_"):
		return fmt.Errorf("%s is refused: whale's own settings stay out of the agent (WHALE_ROOT names the bucket); whale sets the workspace's WHALE_* variables itself", name)
	case n == "HOME" || n == "TMPDIR":
		return fmt.Errorf("%s is set by whale: the agent's own scratch folder, new for each run", name)
	}
	return nil
}

// agentEnv is the agent's whole environment: AgentBaseEnv and the
// variables names lists, from lookup (os.LookupEnv), then HOME and
// TMPDIR, then whale's own (NAME=value). Each name comes once, the later
// setting winning; missing lists the names that lookup does not know.
func agentEnv(lookup func(string) (string, bool), names []string, home, tmp string, whale ...string) (env, missing []string) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, k := range AgentBaseEnv {
		if v, ok := lookup(k); ok {
			set(k, v)
		}
	}
	if _, ok := vars["PATH"]; !ok {
		set("PATH", agentDefaultPath)
	}
	for _, k := range names {
		if CheckAgentEnv(k) != nil {
			continue // Config.Validate has said so
		}
		if v, ok := lookup(k); ok {
			set(k, v)
		} else {
			missing = append(missing, k)
		}
	}
	set("HOME", home)
	set("TMPDIR", tmp)
	for _, kv := range whale {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, missing
}

// removeScratch removes the run's scratch folder, the agent's workspace
// and home: folders the agent left without write permission (a Go module
// cache is read-only) are made writable first. It never follows a link
// out of dir.
func removeScratch(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	_ = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = r.Chmod(filepath.FromSlash(p), 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// AgentEnvEnv names, in whale's environment, more variables to pass to the
// agent (comma-separated), for this process only: not frozen into the
// run, so a run initialized before harness.agent.env existed, or one whose
// agent needs another variable on this machine, can pass its key.
const AgentEnvEnv = "WHALE_AGENT_ENV"

// runtimeAgentEnv is AgentEnvEnv's list; names CheckAgentEnv refuses are
// dropped with a warning.
func runtimeAgentEnv(log *slog.Logger) []string {
	var out []string
	for name := range strings.SplitSeq(os.Getenv(AgentEnvEnv), ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if err := CheckAgentEnv(name); err != nil {
			log.Warn(AgentEnvEnv+" names a variable the agent may not get; left out", "err", err.Error())
			continue
		}
		out = append(out, name)
	}
	return out
}
