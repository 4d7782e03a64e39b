package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secretSpec is a valid experiment with a field for each place a secret
// has been seen; each case of TestSecretsRefused replaces one.
const secretSpec = `name: s1
domain: searchqa
data:
  train: %TRAIN%
  search: datasets/b
  test: datasets/c
model:
  name: m
  checkpoint: %CKPT%
  endpoints:
    - %ENDPOINT%
  api_key_env: VLLM_API_KEY
  extra: %EXTRA%
harness:
  proposer: %PROPOSER%
  agent:
    command: %AGENT%
  llm:
    name: p
    endpoints:
      - %LLM%
finetune:
  command: %FT%
  reload: command
  reload_command: %RELOAD%
  env: %ENV%
tools:
  retriever: %RETRIEVER%
slurm:
  default:
    prologue:
      - %PROLOGUE%
budget:
  weight_steps: 10
`

var secretDefaults = map[string]string{
	"%TRAIN%":     "datasets/a",
	"%CKPT%":      "Qwen/Qwen3-8B",
	"%ENDPOINT%":  "http://127.0.0.1:8000/v1",
	"%EXTRA%":     "{chat_template_kwargs: {enable_thinking: false}}",
	"%PROPOSER%":  "agent",
	"%AGENT%":     `'claude -p "$(cat SKILL.md)" --permission-mode acceptEdits'`,
	"%LLM%":       "http://127.0.0.1:8001/v1",
	"%FT%":        "python jobs/trainer/train.py",
	"%RELOAD%":    "jobs/slurm/reload-vllm.sh",
	"%ENV%":       "{}",
	"%RETRIEVER%": "http://127.0.0.1:8002",
	"%PROLOGUE%":  "module load cuda",
}

func secretSpecWith(set map[string]string) string {
	src := secretSpec
	for k, def := range secretDefaults {
		v, ok := set[k]
		if !ok {
			v = def
		}
		src = strings.ReplaceAll(src, k, v)
	}
	return src
}

// The secrets that were seen frozen into run.json, and their relatives:
// each is refused, naming the field and what to use instead, and the
// message never holds the secret.
func TestSecretsRefused(t *testing.T) {
	const (
		hfToken  = "hf_AbCdEfGhIjKlMnOpQrStUv"
		awsKey   = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
		agentKey = "sk-ant-api03-0123456789abcdef"
		literal  = "hf_LiteralTokenWritten0123"
		bearer   = "sk-proj-LiteralBearer0123456789"
		jwt      = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ3aGFsZSJ9.c2lnbmF0dXJlMDEyMzQ1"
		// routerKey is in whale's environment under a *_KEY name.
		routerKey = "or-0123456789abcdefXYZ"
	)
	t.Setenv("OPENROUTER_KEY", routerKey)
	t.Setenv("HF_TOKEN", hfToken)
	t.Setenv("ANTHROPIC_API_KEY", agentKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", awsKey)
	for _, tc := range []struct {
		name   string
		set    map[string]string
		secret string
		path   string // the field the error names
		wants  []string
	}{
		{"endpoint query api_key", map[string]string{"%ENDPOINT%": "http://127.0.0.1:8000/v1?api_key=" + literal}, literal,
			"model.endpoints[0]", []string{`query parameter "api_key"`, "model.api_key_env"}},
		{"endpoint user info", map[string]string{"%ENDPOINT%": "https://user:" + literal + "@vllm.example.com/v1"}, literal,
			"model.endpoints[0]", []string{"credentials", "api_key_env"}},
		{"llm proposer endpoint", map[string]string{"%PROPOSER%": "llm", "%LLM%": "https://api.example.com/v1?key=" + literal}, literal,
			"harness.llm.endpoints[0]", []string{"harness.llm.api_key_env"}},
		{"retriever user info", map[string]string{"%RETRIEVER%": "http://u:" + literal + "@127.0.0.1:8002"}, literal,
			"tools.retriever", []string{"must not carry credentials"}},
		{"retriever token", map[string]string{"%RETRIEVER%": "http://127.0.0.1:8002/?token=" + literal}, literal,
			"tools.retriever", []string{`"token"`, "tools.retriever_api_key_env"}},
		{"dataset URL", map[string]string{"%TRAIN%": "s3://bucket/datasets/a?region=us-east-1&secret_access_key=" + literal}, literal,
			"data.train", []string{"secret_access_key", "from the environment"}},
		{"checkpoint URL with a token", map[string]string{"%CKPT%": "'https://hub.example.com/org/m?access_token=" + literal + "'"}, literal,
			"model.checkpoint", []string{`"access_token"`, "which the trainer inherits"}},
		{"model.extra.api_key", map[string]string{"%EXTRA%": "{api_key: " + literal + "}"}, literal,
			"model.extra.api_key", []string{"named like a credential", "model.api_key_env"}},
		{"model.extra camelCase", map[string]string{"%EXTRA%": "{apiKey: " + literal + "}"}, literal,
			"model.extra.apiKey", []string{"named like a credential"}},
		{"nested extra", map[string]string{"%EXTRA%": "{chat_template_kwargs: {enable_thinking: false, vendor: {Authorization: 'Bearer " + literal + "'}}}"}, literal,
			"model.extra.chat_template_kwargs.vendor.Authorization", []string{"model.api_key_env"}},
		{"nested list in extra", map[string]string{"%EXTRA%": "{guards: [{x_access_token: " + literal + "}]}"}, literal,
			"model.extra.guards[0].x_access_token", []string{"named like a credential"}},
		{"finetune.env HF_TOKEN", map[string]string{"%ENV%": "{HF_TOKEN: " + literal + "}"}, literal,
			"finetune.env.HF_TOKEN", []string{"inherits whale's environment", "leave it out of finetune.env"}},
		{"finetune.env AWS_SECRET_ACCESS_KEY", map[string]string{"%ENV%": "{AWS_SECRET_ACCESS_KEY: " + literal + "}"}, literal,
			"finetune.env.AWS_SECRET_ACCESS_KEY", []string{"inherits whale's environment"}},
		{"env value in finetune.env", map[string]string{"%ENV%": "{MY_SETTING: " + hfToken + "}"}, hfToken,
			"finetune.env.MY_SETTING", []string{"value of the environment variable HF_TOKEN"}},
		{"env value in agent command", map[string]string{"%AGENT%": "'ANTHROPIC_API_KEY=" + agentKey + " claude -p go'"}, agentKey,
			"harness.agent.command", []string{"ANTHROPIC_API_KEY", "$ANTHROPIC_API_KEY", "harness.agent.env"}},
		{"env value in finetune.command", map[string]string{"%FT%": "'python train.py --hub " + hfToken + "'"}, hfToken,
			"finetune.command", []string{"value of the environment variable HF_TOKEN", "$HF_TOKEN"}},
		{"env value with a slash", map[string]string{"%RELOAD%": "'aws s3 cp x y --secret " + awsKey + "'"}, awsKey,
			"finetune.reload_command", []string{"AWS_SECRET_ACCESS_KEY"}},
		{"literal assignment in command", map[string]string{"%FT%": "'HF_TOKEN=" + literal + " python train.py'"}, literal,
			"finetune.command", []string{"gives HF_TOKEN a literal value", "$HF_TOKEN"}},
		{"literal flag in command", map[string]string{"%FT%": "'python train.py --hf-token " + literal + "'"}, literal,
			"finetune.command", []string{"--hf-token"}},
		{"URL with user info in command", map[string]string{"%RELOAD%": "'git clone https://x:" + literal + "@github.com/a/b'"}, literal,
			"finetune.reload_command", []string{"user info"}},
		{"slurm prologue export", map[string]string{"%PROLOGUE%": "'export WANDB_API_KEY=" + literal + "'"}, literal,
			"slurm.default.prologue[0]", []string{"WANDB_API_KEY", "submits them"}},
		// Forms a review found accepted.
		{"curl Authorization header", map[string]string{"%FT%": `'curl -H "Authorization: Bearer ` + bearer + `" http://127.0.0.1:9/x && python train.py'`}, bearer,
			"finetune.command", []string{"an Authorization header", "$NAME in the command"}},
		{"x-api-key header", map[string]string{"%RELOAD%": `'curl --header "x-api-key: ` + bearer + `" -X POST http://127.0.0.1:8000/reload'`}, bearer,
			"finetune.reload_command", []string{"an X-Api-Key header"}},
		{"proxy basic auth", map[string]string{"%RELOAD%": `'curl -H "Proxy-Authorization: Basic dXNlcjpwYXNzd29yZDE=" http://x/reload'`}, "dXNlcjpwYXNzd29yZDE=",
			"finetune.reload_command", []string{"an Authorization header"}},
		{"JWT flag in agent command", map[string]string{"%AGENT%": "'my-agent --token " + jwt + " --yes'"}, jwt,
			"harness.agent.command", []string{"gives --token a literal value", "harness.agent.env"}},
		{"JWT assignment in prologue", map[string]string{"%PROLOGUE%": "'HF_TOKEN=" + jwt + " huggingface-cli whoami'"}, jwt,
			"slurm.default.prologue[0]", []string{"gives HF_TOKEN a literal value"}},
		{"*_KEY export in prologue", map[string]string{"%PROLOGUE%": "'export OPENROUTER_KEY=sk-or-v1-0123456789abcdef'"}, "sk-or-v1-0123456789abcdef",
			"slurm.default.prologue[0]", []string{"gives OPENROUTER_KEY a literal value", "$OPENROUTER_KEY"}},
		{"JSON api_key in command", map[string]string{"%FT%": `'curl -d ''{"api_key":"` + bearer + `"}'' http://127.0.0.1:9/x'`}, bearer,
			"finetune.command", []string{"a JSON credential field"}},
		{"escaped JSON token in command", map[string]string{"%RELOAD%": `'curl -d "{\"token\": \"` + bearer + `\"}" http://x'`}, bearer,
			"finetune.reload_command", []string{"a JSON credential field"}},
		{"bare bearer in command", map[string]string{"%FT%": `'python train.py --auth "bearer ` + bearer + `"'`}, bearer,
			"finetune.command", []string{"a bearer token"}},
		{"extra_headers string", map[string]string{"%EXTRA%": "{extra_headers: 'Authorization: Bearer " + bearer + "'}"}, bearer,
			"model.extra.extra_headers", []string{"an Authorization header", "model.api_key_env"}},
		{"header strings in a list", map[string]string{"%EXTRA%": "{extra_headers: ['Content-Type: application/json', 'X-Api-Key: " + bearer + "']}"}, bearer,
			"model.extra.extra_headers[1]", []string{"an X-Api-Key header"}},
		{"extra key", map[string]string{"%EXTRA%": "{key: AIzaSyA0123456789abcdefg}"}, "AIzaSyA0123456789abcdefg",
			"model.extra.key", []string{"is called key", "model.api_key_env"}},
		{"finetune.env *_KEY", map[string]string{"%ENV%": "{OPENROUTER_KEY: " + literal + "}"}, literal,
			"finetune.env.OPENROUTER_KEY", []string{"named like a credential"}},
		{"*_KEY value from the environment", map[string]string{"%FT%": "'python train.py --service " + routerKey + "'"}, routerKey,
			"finetune.command", []string{"value of the environment variable OPENROUTER_KEY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := secretSpecWith(tc.set)
			_, err := Parse("experiment.yaml", []byte(src))
			if err == nil {
				t.Fatalf("accepted a spec with a secret at %s", tc.path)
			}
			var l ErrorList
			if !errors.As(err, &l) {
				t.Fatalf("error %T is not an ErrorList: %v", err, err)
			}
			found := false
			for _, e := range l {
				if e.Path == tc.path {
					found = true
					if e.Line == 0 {
						t.Errorf("%s: no line", e)
					}
				}
			}
			if !found {
				t.Errorf("no error names %s:\n%s", tc.path, l.Detailed())
			}
			for _, w := range append([]string{tc.path}, tc.wants...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%s", w, err)
				}
			}
			for _, out := range []string{err.Error(), l.Detailed()} {
				if strings.Contains(out, tc.secret) {
					t.Errorf("the secret is in the message:\n%s", out)
				}
			}
		})
	}
}

// The check runs on what is frozen: an Experiment built in Go, or edited
// after parsing, is refused by Freeze too.
func TestFreezeRefusesSecret(t *testing.T) {
	e := mustParse(t, minimal)
	e.Model.Extra["chat_template_kwargs"] = map[string]any{"auth": map[string]any{"password": "p4ssw0rd-secret"}}
	_, err := Freeze(e, "test", time.Unix(0, 0))
	if err == nil || !strings.Contains(err.Error(), "model.extra.chat_template_kwargs.auth") || strings.Contains(err.Error(), "p4ssw0rd") {
		t.Fatalf("Freeze: %v", err)
	}
}

// Names that only look like credentials' at a glance, variable names, and
// URLs and commands without credentials pass.
func TestSecretsNotFalselyRefused(t *testing.T) {
	t.Setenv("HF_TOKEN", "hf_AbCdEfGhIjKlMnOpQrStUv")
	t.Setenv("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock")
	t.Setenv("TOKEN_SHORT", "abc")
	src := secretSpecWith(map[string]string{
		"%EXTRA%": "{skip_special_tokens: false, max_tokens_per_doc: 3, allowed_token_ids: [1, 2], tokenizer_mode: auto, " +
			"chat_template_kwargs: {enable_thinking: false, author: someone}, api_key_env: VLLM_API_KEY}",
		"%ENV%":      "{TOKENIZERS_PARALLELISM: 'false', HF_HOME: /data/hf, HF_TOKEN_PATH: /data/hf/token, GOOGLE_APPLICATION_CREDENTIALS_FILE: /k.json}",
		"%FT%":       "'python train.py --max-tokens 8192 --use-auth-token train.jsonl --hub-token $HF_TOKEN --hf-token=\"${HF_TOKEN}\"'",
		"%RELOAD%":   "'curl -X POST http://127.0.0.1:8000/v1/load_lora_adapter?lora_name=step3'",
		"%TRAIN%":    "'s3://bucket/datasets/a?endpoint=http://127.0.0.1:7070&use_path_style=true&region=us-east-1'",
		"%PROLOGUE%": "'export HF_TOKEN=$HF_TOKEN; source /opt/venv/bin/activate'",
		"%CKPT%":     "'https://hub.example.com/org/m?revision=main'",
	})
	if _, err := Parse("experiment.yaml", []byte(src)); err != nil {
		var l ErrorList
		errors.As(err, &l)
		t.Fatalf("clean spec refused:\n%s", l.Detailed())
	}
}

// Credentials written as references to variables, variables that name
// files, and words that merely mention keys and tokens pass.
func TestSecretsFormsNotFalselyRefused(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "/home/u/gcp-key.json")
	t.Setenv("MY_SERVICE_SECRET", "/run/secrets/service-secret")
	t.Setenv("KUBECONFIG", "/home/u/.kube/config")
	t.Setenv("SERVICE_KEY_FILE", "service-key.pem")
	t.Setenv("OPENROUTER_KEY", "or-0123456789abcdefXYZ")
	for name, set := range map[string]map[string]string{
		"header from a variable":         {"%FT%": `'curl -H "Authorization: Bearer $OPENAI_API_KEY" http://x/y && python train.py'`},
		"header from ${VAR}":             {"%RELOAD%": `'curl -H "Authorization: Bearer ${VLLM_API_KEY}" -H "x-api-key: ${KEY}" http://x/reload'`},
		"header from a command":          {"%RELOAD%": `'curl -H "Authorization: Bearer $(cat /run/secrets/token)" http://x/reload'`},
		"header split quotes":            {"%RELOAD%": `'curl -H ''Authorization: Bearer ''"$TOKEN" http://x/reload'`},
		"JSON from a variable":           {"%FT%": `'curl -d "{\"api_key\": \"$OPENROUTER_KEY\"}" http://x'`},
		"JSON tokenizer fields":          {"%FT%": `'python train.py --special-tokens ''{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}'' --epochs 1'`},
		"auth type bearer":               {"%FT%": "'python train.py --auth-type bearer --token $HF_TOKEN'"},
		"export a key from a variable":   {"%PROLOGUE%": "'export OPENROUTER_KEY=$OPENROUTER_KEY'"},
		"credentials file exported":      {"%PROLOGUE%": "'export GOOGLE_APPLICATION_CREDENTIALS=/home/u/gcp-key.json'"},
		"credentials file, relative":     {"%PROLOGUE%": "'export GOOGLE_APPLICATION_CREDENTIALS=gcpserviceaccount'"},
		"kubeconfig":                     {"%PROLOGUE%": "'export KUBECONFIG=/home/u/.kube/config'"},
		"secret variable holding a path": {"%FT%": "'python train.py --secret-file /run/secrets/service-secret'"},
		"a key file":                     {"%FT%": "'python train.py --tls service-key.pem'"},
		"extra cache key and schema": {"%EXTRA%": "{prompt_cache_key: whale-experiment-1, key: short, " +
			"response_format: {type: json_schema, json_schema: {schema: {properties: {key: {type: string}}}}}}"},
		"extra key from a variable": {"%EXTRA%": "{key: $GOOGLE_API_KEY}"},
		"not a JWT":                 {"%FT%": "'python train.py --token-file tokens.json.gz'"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse("experiment.yaml", []byte(secretSpecWith(set))); err != nil {
				var l ErrorList
				errors.As(err, &l)
				t.Fatalf("clean spec refused:\n%s", l.Detailed())
			}
		})
	}
	// The description is prose: it may show the forms.
	src := secretSpecWith(nil) + "description: 'call it with -H \"Authorization: Bearer sk-your-key-here\"'\n"
	if _, err := Parse("experiment.yaml", []byte(src)); err != nil {
		t.Errorf("description refused: %v", err)
	}
}

func TestTokenLike(t *testing.T) {
	for v, want := range map[string]bool{
		"hf_AbCdEfGhIjKlMnOp": true, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln": true, `"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"`: true,
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0": false, "model.safetensors": false, "/run/secrets/x": false, "$HF_TOKEN": false,
		"${HF_TOKEN}": false, "short": false,
	} {
		if got := tokenLike(v); got != want {
			t.Errorf("tokenLike(%q) = %v, want %v", v, got, want)
		}
	}
}

// The shipped examples init with credentials in the environment.
func TestExamplesHaveNoSecrets(t *testing.T) {
	t.Setenv("HF_TOKEN", "hf_AbCdEfGhIjKlMnOpQrStUv")
	t.Setenv("OPENAI_API_KEY", "sk-proj-0123456789abcdef")
	t.Setenv("VLLM_API_KEY", "token-abc123456")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "/home/u/gcp-key.json")
	t.Setenv("OPENROUTER_KEY", "or-0123456789abcdefXYZ")
	files, err := filepath.Glob("../../jobs/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Parse(f, data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := Freeze(e, "test", time.Unix(0, 0)); err != nil {
			t.Errorf("%s: Freeze: %v", f, err)
		}
	}
}

func TestCredentialName(t *testing.T) {
	for name, want := range map[string]bool{
		"api_key": true, "apikey": true, "apiKey": true, "APIKey": true, "X-Api-Key": true, "token": true,
		"HF_TOKEN": true, "access_token": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_ACCESS_KEY_ID": true,
		"password": true, "db_passwd": true, "private_key": true, "Authorization": true, "auth": true,
		"bearer": true, "client_secret": true, "credentials": true, "AZURE_STORAGE_KEY": true,
		"max_tokens": false, "skip_special_tokens": false, "tokenizer": false, "allowed_token_ids": true,
		"api_key_env": false, "HF_TOKEN_PATH": false, "author": false, "key": false, "monkey": false,
		"SSH_AUTH_SOCK": false, "max_auth_retries": false, "enable_thinking": false,
	} {
		if got := credentialName(name); got != want {
			t.Errorf("credentialName(%q) = %v, want %v", name, got, want)
		}
	}
}
