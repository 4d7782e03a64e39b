package spec

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// agentSpec is minimal with the agent proposer and the given
// harness.agent.env list (YAML flow text; "" for none).
func agentSpec(env string) string {
	agent := "  proposer: agent\n  agent:\n    command: my-agent --yes\n"
	if env != "" {
		agent += "    env: " + env + "\n"
	}
	return strings.Replace(minimal, "  proposer: mutate\n", agent, 1)
}

func TestAgentEnvNames(t *testing.T) {
	e := mustParse(t, agentSpec("[ANTHROPIC_API_KEY, https_proxy]"))
	if got := strings.Join(e.Harness.Agent.Env, ","); got != "ANTHROPIC_API_KEY,https_proxy" {
		t.Fatalf("harness.agent.env = %q", got)
	}
	tests := []struct {
		name, env, path, want string
		sensitive             bool
	}{
		{"a value, not a name", "[ok_NAME, 'sk-ant-api03-abcdefgh']", "harness.agent.env[1]", "must name an environment variable", true},
		{"bucket credential", "[AWS_SECRET_ACCESS_KEY]", "harness.agent.env[0]", "AWS_SECRET_ACCESS_KEY is refused: the agent must not reach whale's bucket", false},
		{"azure", "[X, AZURE_STORAGE_KEY]", "harness.agent.env[1]", "must not reach whale's bucket", false},
		{"gcs", "[GOOGLE_APPLICATION_CREDENTIALS]", "harness.agent.env[0]", "must not reach whale's bucket", false},
		{"whale's own", "[WHALE_ROOT]", "harness.agent.env[0]", "WHALE_ROOT names the bucket", false},
		{"home", "[HOME]", "harness.agent.env[0]", "set by whale", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("experiment.yaml", []byte(agentSpec(tt.env)))
			var l ErrorList
			if !errors.As(err, &l) {
				t.Fatalf("err = %v, want a refusal at %s", err, tt.path)
			}
			var found *Error
			for _, e := range l {
				if e.Path == tt.path {
					found = e
				}
			}
			if found == nil || !strings.Contains(found.Msg, tt.want) {
				t.Fatalf("want %q at %s:\n%s", tt.want, tt.path, l.Detailed())
			}
			if tt.sensitive && (strings.Contains(l.Detailed(), "abcdefgh") || found.Snippet != "") {
				t.Errorf("the error echoes what may be a secret:\n%s", l.Detailed())
			}
			if !tt.sensitive && found.Snippet == "" {
				t.Errorf("no snippet for a name:\n%s", l.Detailed())
			}
		})
	}
}

// harness.agent.env came after runs were frozen: an empty list leaves the
// digest as it was, an older run.json (no key) is the same experiment as
// the same file read today, and setting the list is a change.
func TestAgentEnvKeepsDigests(t *testing.T) {
	plain := mustParse(t, agentSpec(""))
	empty := mustParse(t, agentSpec("[]"))
	r, err := Freeze(plain, "v", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	c, err := CanonicalJSON(&r.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c), `"agent":{"command":"my-agent --yes"}`) {
		t.Fatalf("the frozen spec's harness.agent is not as before: %s", c)
	}
	e, err := Freeze(empty, "v", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if e.SpecDigest != r.SpecDigest {
		t.Errorf("env: [] changes the digest: %s, was %s", e.SpecDigest, r.SpecDigest)
	}
	// run.json as an older whale wrote it has no env key: what Encode
	// writes today for an empty list.
	data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	old, err := DecodeRun("run.json", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, same := range []*Experiment{plain, empty} {
		if err := CheckSame(old, same); err != nil {
			t.Errorf("CheckSame: %v", err)
		}
	}
	err = CheckSame(old, mustParse(t, agentSpec("[ANTHROPIC_API_KEY]")))
	var me *MismatchError
	if !errors.As(err, &me) || strings.Join(me.Paths, ",") != "harness.agent.env" {
		t.Errorf("CheckSame with env set = %v, want a mismatch in harness.agent.env", err)
	}
	set, err := Freeze(mustParse(t, agentSpec("[ANTHROPIC_API_KEY]")), "v", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	data, err = set.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRun("run.json", data)
	if err != nil || strings.Join(back.Spec.Harness.Agent.Env, ",") != "ANTHROPIC_API_KEY" {
		t.Fatalf("round trip: %v %v", back, err)
	}
}
