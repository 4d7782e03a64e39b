package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A spec holding a secret is refused at init (exit code 2), naming the
// field and never the secret, and no run.json is written.
func TestInitRefusesSecrets(t *testing.T) {
	const secret = "sk-Secret0123456789abcdef"
	t.Setenv("ANTHROPIC_API_KEY", secret)
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	for _, tc := range []struct {
		name, old, new, field string
	}{
		{"endpoint api_key", "- http://gpu-node-01:8000/v1", "- http://gpu-node-01:8000/v1?api_key=" + secret, "model.endpoints[0]"},
		{"model.extra.api_key", "      enable_thinking: false", "      enable_thinking: false\n    api_key: " + secret, "model.extra.api_key"},
		{"nested extra", "      enable_thinking: false", "      enable_thinking: false\n      auth_token: " + secret, "model.extra.chat_template_kwargs.auth_token"},
		{"finetune.env", "  env:\n", "  env:\n    HF_TOKEN: " + secret + "\n", "finetune.env.HF_TOKEN"},
		{"a variable's value in the agent command", "--permission-mode acceptEdits", "--permission-mode acceptEdits --key-from " + secret, "harness.agent.command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := experimentVariant(t, "secret.yaml", tc.old, tc.new)
			r := whale(t, "init", "--root", root, p)
			r.mustCode(t, exitUsage, "secret.yaml:", "field "+tc.field)
			for _, out := range []string{r.err.Error(), r.stdout, r.stderr} {
				if strings.Contains(out, secret) {
					t.Errorf("the secret is in the output:\n%s", out)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "bucket", "runs")); !os.IsNotExist(err) {
				t.Errorf("runs/ exists (%v): something was written", err)
			}
		})
	}
}
