package spec

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/whalerun/whale/internal/redact"
)

// Secrets in an experiment file.
//
// run.json is the spec as written, frozen into the bucket for every reader
// of the run (reports, job scripts, DuckDB). A secret in it is a secret
// published, so validation refuses a spec that holds one, naming the field
// and never the value. It scans every string of the normalized spec, the
// spec that is frozen:
//
//   - URL fields (URLFields: endpoints, tools, datasets) go through
//     redact.Check: user info, and query parameters other than known
//     configuration ones, are refused;
//   - a free-form map's key that names a credential (api_key, apiKey,
//     token, secret, password, passwd, credential, private_key,
//     access_key, auth, bearer …, matched word by word, in any case, at
//     any depth: model.extra, finetune.env, …) is refused when it holds
//     text, as are the names of redact.SecretEnv (finetune.env:
//     HF_TOKEN, AWS_SECRET_ACCESS_KEY), a variable of finetune.env
//     called *_KEY, and a key called just "key" whose value is one word
//     of 8 characters or more ({key: AIza…});
//   - any string holding the value (8 characters or more) of one of
//     whale's environment variables whose name is a credential's
//     (HF_TOKEN, OPENAI_API_KEY, OPENROUTER_KEY, AWS_SESSION_TOKEN …) is
//     refused, commands included; a variable that names a file
//     (GOOGLE_APPLICATION_CREDENTIALS, KUBECONFIG, *_FILE, *_PATH,
//     *_DIR) or whose value is an absolute path holds no secret to look
//     for;
//   - in any other string (commands, prologues, extras, model.checkpoint)
//     a URL with user info or with a credential-named query parameter is
//     refused, and outside the description (prose, where such forms are
//     examples) so are the next two:
//   - a credential-named shell assignment (*_KEY= included) or flag given
//     a literal value that looks like a token (HF_TOKEN=hf_…, --api-key
//     sk-…, --token eyJ….….…, a JWT);
//   - an HTTP credential header with a literal value
//     ("Authorization: Bearer sk-…", "Proxy-Authorization: Basic …",
//     "X-Api-Key: …"), a bare "bearer <token>" (16 token characters or
//     more), and a JSON credential field ({"api_key": "…"}, "token",
//     "secret", "password").
//
// A value that refers to a variable ($VAR, ${VAR}) is no literal: the
// shell, or the trainer, reads the secret from the environment.
//
// Each refusal says what to use instead: the *_env fields that name a
// variable (model.api_key_env, harness.llm.api_key_env,
// tools.retriever_api_key_env), or the
// environment that commands inherit from whale.

// URLFields are the fields (list indexes left out) whose value is a URL
// that whale opens, or may be one: checked with redact.Check when they
// look like a URL. model.checkpoint, which may be a URL too, is handed to
// the trainer as it is and checked as free text.
var URLFields = []string{
	"model.endpoints", "harness.llm.endpoints",
	"tools.retriever", "tools.sandbox",
	"data.train", "data.search", "data.test",
}

// minSecretLen is the shortest value of an environment variable looked
// for in the spec: shorter ones would match by chance.
const minSecretLen = 8

// checkSecrets refuses every field of e that holds a secret (see above),
// one error per field, and none for a field already refused.
func (e *Experiment) checkSecrets(c *checker) {
	s := &secretScan{c: c, env: envSecrets(os.Environ())}
	s.walk(reflect.ValueOf(e).Elem(), "")
}

// envSecret is a variable of whale's environment that holds a credential.
type envSecret struct{ name, value, escaped string }

// envSecrets returns the variables of env (KEY=value lines) whose names
// are credentials' and whose values are long enough to look for, by name.
func envSecrets(env []string) []envSecret {
	var out []envSecret
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || len(value) < minSecretLen || !secretVar(name) || fileVar(name) || filepath.IsAbs(value) {
			// A variable that names a file holds its path, not the
			// secret in it: a prologue may export the same path.
			continue
		}
		out = append(out, envSecret{name: name, value: value, escaped: url.QueryEscape(value)})
	}
	slices.SortFunc(out, func(a, b envSecret) int { return strings.Compare(a.name, b.name) })
	return out
}

// secretVar reports whether an environment variable called name holds a
// credential: one of redact.SecretEnv, a credential's name by
// credentialName, or a name ending in _KEY (OPENROUTER_KEY, the
// convention of API keys). It is narrower than redact.SecretName, which
// scrubs logs and errs on the side of secrecy (every AWS_* variable): a
// spec refused because it holds AWS_REGION's "us-east-1" would be
// refused for nothing.
func secretVar(name string) bool {
	return slices.Contains(redact.SecretEnv, strings.ToUpper(name)) || credentialName(name) || keyVar(name)
}

// keyVar reports whether name ends in the word key after another word:
// OPENROUTER_KEY, MY_SERVICE_KEYS.
func keyVar(name string) bool {
	w := nameWords(name)
	return len(w) >= 2 && (w[len(w)-1] == "key" || w[len(w)-1] == "keys")
}

// fileVars are variables whose names sound like credentials' but that
// name a file (or a directory) holding them.
var fileVars = []string{"GOOGLE_APPLICATION_CREDENTIALS", "KUBECONFIG", "DOCKER_CONFIG", "NETRC", "CLOUDSDK_CONFIG", "BOTO_CONFIG"}

// fileVar reports whether a variable called name names a file rather
// than holding a secret: one of fileVars, or a name whose last word says
// so (…_FILE, …_PATH, …_DIR).
func fileVar(name string) bool {
	if slices.Contains(fileVars, strings.ToUpper(name)) {
		return true
	}
	w := nameWords(name)
	return slices.Contains([]string{"file", "files", "path", "paths", "dir", "dirs", "directory"}, w[len(w)-1])
}

type secretScan struct {
	c   *checker
	env []envSecret
}

// walk visits v, at path, by the yaml names of struct fields, the keys of
// maps and the indexes of lists.
func (s *secretScan) walk(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			s.walk(v.Field(i), joinPath(path, name))
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int {
			return strings.Compare(fmt.Sprint(a.Interface()), fmt.Sprint(b.Interface()))
		})
		for _, k := range keys {
			key := fmt.Sprint(k.Interface())
			p := joinPath(path, key)
			val := v.MapIndex(k)
			named := credentialName(key) || slices.Contains(redact.SecretEnv, strings.ToUpper(key))
			if path == "finetune.env" {
				named = secretVar(key) && !fileVar(key) // variables: OPENROUTER_KEY too
			}
			if named && holdsText(val) {
				s.refuse(p, "is named like a credential and holds a value, which would be frozen into run.json")
				continue
			}
			if strings.EqualFold(key, "key") && wordValue(val) {
				// {key: AIza…}: an API key by its usual name (as in
				// ?key=…), not a word of a request.
				s.refuse(p, "is called key and holds what looks like one, which would be frozen into run.json")
				continue
			}
			s.walk(val, p)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			s.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Interface, reflect.Pointer:
		if !v.IsNil() {
			s.walk(v.Elem(), path)
		}
	case reflect.String:
		s.text(path, v.String())
	}
}

// text checks one string at path.
func (s *secretScan) text(path, str string) {
	if str == "" {
		return
	}
	for _, env := range s.env {
		if strings.Contains(str, env.value) || strings.Contains(str, env.escaped) {
			s.refuseVar(path, env.name, "holds the value of the environment variable %s, a credential, which would be frozen into run.json", env.name)
			return
		}
	}
	if isURLField(path) && looksURL(str) {
		if err := redact.Check(str); err != nil {
			s.refuse(path, "the URL %s would be frozen into run.json with what looks like a credential (%v)", redact.URL(str), err)
		}
		return
	}
	for _, u := range urlInText.FindAllString(str, -1) {
		u = strings.TrimRight(u, ".,;:)]}")
		if why := urlCredential(u); why != "" {
			s.refuse(path, "the URL %s carries %s, which would be frozen into run.json", redact.URL(u), why)
			return
		}
	}
	if path == "description" {
		return // prose, not shell: "HF_TOKEN=…" there is an example
	}
	if name := literalCredential(str); name != "" {
		s.refuseVar(path, name, "gives %s a literal value, a credential that would be frozen into run.json", name)
		return
	}
	if what := textCredential(str); what != "" {
		s.refuse(path, "holds %s with a literal value, a credential that would be frozen into run.json", what)
	}
}

// textCredentials are credentials in free text that no variable's name
// gives away: HTTP headers written into a command (curl -H
// "Authorization: Bearer …"), a bare bearer token, a JSON body's
// credential field. The first group of each is the value.
var textCredentials = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`(?i)\b(?:proxy-)?authorization:\s*(?:bearer|basic|token)\s+(\S{8,})`), "an Authorization header"},
	{regexp.MustCompile(`(?i)\bx-api-key:\s*(\S{8,})`), "an X-Api-Key header"},
	{regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)`), "a bearer token"},
	// "api_key":"…", and \"api_key\": \"…\" inside a shell's double quotes.
	{regexp.MustCompile(`(?i)\\?"(?:x-)?(?:api[_-]?key|(?:access|auth|refresh|session|id|hf|bearer)[_-]?token|token|(?:client[_-]?)?secret|secret[_-]?key|password|passwd)\\?"\s*:\s*\\?"([^"$\\]{8,})`), "a JSON credential field"},
}

// textCredential says what credential str holds by textCredentials, ""
// when none: a value that refers to a variable ($VAR, ${VAR}, $(cmd)),
// or a path (a token's file), is none.
func textCredential(str string) string {
	for _, tc := range textCredentials {
		for _, m := range tc.re.FindAllStringSubmatch(str, -1) {
			v := strings.TrimRight(strings.Trim(m[1], `"'\`), `"'\,;)]}`)
			if len(v) >= minSecretLen && !strings.ContainsAny(v, "$`") && !filepath.IsAbs(v) && !strings.HasPrefix(v, "~/") {
				return tc.what
			}
		}
	}
	return ""
}

// wordValue reports whether v is a string of one word, minSecretLen
// characters or more, that refers to no variable: what a key looks like.
func wordValue(v reflect.Value) bool {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.String {
		return false
	}
	str := v.String()
	return len(str) >= minSecretLen && !strings.ContainsAny(str, "$` \t\n")
}

// refuse reports path as holding a secret, with what to do instead;
// nothing when path is refused already.
func (s *secretScan) refuse(path, format string, args ...any) {
	s.refuseVar(path, "", format, args...)
}

// refuseVar is refuse for a secret whose variable is called name ("" when
// unknown), which the advice then names.
func (s *secretScan) refuseVar(path, name, format string, args ...any) {
	if slices.ContainsFunc(s.c.errs, func(e *Error) bool { return e.Path == path }) {
		return
	}
	s.c.addSensitive(path, "%s; %s", fmt.Sprintf(format, args...), secretAdvice(path, name))
}

// secretAdvice says what to write instead of a secret at path; name is
// the variable that holds it, "" when unknown.
func secretAdvice(path, name string) string {
	ref := "$NAME"
	if name != "" {
		ref = "$" + name
	}
	under := func(prefix string) bool {
		return path == prefix || strings.HasPrefix(path, prefix+".") || strings.HasPrefix(path, prefix+"[")
	}
	switch {
	case under("model.checkpoint"):
		return "credentials for the hub or the bucket come from the environment (HF_TOKEN, AWS_*), which the trainer inherits from whale"
	case under("model"):
		return "keep the key in an environment variable and name the variable in model.api_key_env (whale sends the key as the bearer token)"
	case under("harness.llm"):
		return "keep the key in an environment variable and name the variable in harness.llm.api_key_env (whale sends the key as the bearer token)"
	case under("finetune.env"):
		return "leave it out of finetune.env: the trainer command inherits whale's environment, so export the variable where whale runs"
	case under("finetune"):
		return fmt.Sprintf("the command inherits whale's environment: export the variable where whale runs and write %s in the command", ref)
	case under("harness.agent"):
		return fmt.Sprintf("write %s in the command, not the value, and name the variable in harness.agent.env: the agent gets the variables listed there", ref)
	case under("slurm"):
		return fmt.Sprintf("jobs inherit the environment of the shell that submits them: export the variable there and write %s", ref)
	case under("tools.retriever"):
		return "keep the token in an environment variable and name the variable in tools.retriever_api_key_env (whale sends it as the bearer token, as whale index serve --token-env expects)"
	case under("tools"):
		return "the spec has no key setting for this tool: serve it without a credential in its URL (on a private network, or behind a local proxy that adds it)"
	case under("data"):
		return "bucket credentials come from the environment (AWS_ACCESS_KEY_ID, …, as for --root), never from the URL"
	}
	return "keep secrets in environment variables: a spec may only name them"
}

func isURLField(path string) bool {
	// model.endpoints[2] → model.endpoints
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	return slices.Contains(URLFields, path)
}

var schemePrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// looksURL tells a URL (scheme://…, or scheme:user@… opaque) from a
// name or a path, which redact.Check would misread ("a#b" as a fragment).
func looksURL(s string) bool {
	return strings.Contains(s, "://") || schemePrefix.MatchString(s) && strings.Contains(s, "@")
}

// urlInText matches a URL inside free text, as redact.Text finds them.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'<>`]+")

// signatureParams are query parameters of signed URLs (S3, GCS, Azure
// SAS) and API keys, whatever their names say.
var signatureParams = []string{
	"key", "sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token",
	"x-goog-signature", "x-goog-credential",
}

// urlCredential says what credential the URL u carries in free text
// (user info, a credential-named query parameter), "" when none. Free
// text is not held to redact.Check's stricter rule: a command may well
// call http://host/reload?lora_name=x.
func urlCredential(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		// What does not parse cannot be told safe.
		if redact.Check(u) != nil {
			return "what does not parse as a URL"
		}
		return ""
	}
	if pu.User != nil && pu.User.String() != redact.Mark {
		return "user info (user:password@)"
	}
	q, err := url.ParseQuery(pu.RawQuery)
	if err != nil {
		return ""
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if redact.Safe(k) {
			continue
		}
		if credentialName(k) || slices.Contains(signatureParams, strings.ToLower(k)) {
			return fmt.Sprintf("the query parameter %q", k)
		}
	}
	return ""
}

// switchWords begin the names of boolean flags (--use-auth-token), whose
// next word is another argument, not a value.
var switchWords = []string{"use", "no", "with", "without", "enable", "disable", "skip", "trust", "require", "allow"}

var (
	shellNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	flagNameRE  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)
)

// literalCredential returns the name of the first credential-named shell
// assignment (NAME=value, export NAME=value) or flag (--name=value,
// --name value) in s given a literal value that looks like a token, ""
// when there is none.
func literalCredential(s string) string {
	words := strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(";&|()", r) })
	for i, w := range words {
		if flag, ok := strings.CutPrefix(w, "-"); ok {
			flag = strings.TrimPrefix(flag, "-")
			name, value, eq := strings.Cut(flag, "=")
			if !flagNameRE.MatchString(name) || !credentialName(name) {
				continue
			}
			if !eq {
				if i+1 == len(words) || slices.Contains(switchWords, nameWords(name)[0]) {
					continue
				}
				value = words[i+1]
			}
			if tokenLike(value) {
				return "--" + name
			}
			continue
		}
		if name, value, ok := strings.Cut(w, "="); ok && shellNameRE.MatchString(name) && secretVar(name) && !fileVar(name) && tokenLike(value) {
			return name
		}
	}
	return ""
}

// jwtRE matches a JSON Web Token: three base64url parts, the first a
// JSON object ("eyJ" is `{"`).
var jwtRE = regexp.MustCompile(`^eyJ[\w-]+\.[\w-]+\.[\w-]+$`)

// tokenLike reports whether a shell word, unquoted, may be a secret: long
// enough, no reference to a variable or command, not a path or a file
// name; or a JWT, dots and all.
func tokenLike(v string) bool {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	if jwtRE.MatchString(v) {
		return true
	}
	if len(v) < minSecretLen || strings.ContainsAny(v, "$`.\"' \t\n") {
		return false
	}
	return !strings.ContainsRune("-/~<{", rune(v[0]))
}

// credentialWords are the words of a name that make it a credential's;
// credentialPairs the first words that make "<word> key" one (api_key,
// AccessKey, private-key).
var (
	credentialWords = []string{
		"token", "secret", "secrets", "password", "passwords", "passwd", "passphrase",
		"credential", "credentials", "auth", "authorization", "bearer",
		"apikey", "apikeys", "accesskey", "privatekey", "secretkey",
		"authtoken", "accesstoken", "refreshtoken", "sessiontoken",
	}
	credentialPairs = []string{"api", "private", "access", "secret", "account", "storage", "signing", "encryption", "client"}
	// notCredential are last words that make a credential's name name
	// something else: where it is (api_key_env, HF_TOKEN_PATH), what
	// kind it is, or a number (max_auth_retries).
	notCredential = []string{
		"env", "var", "file", "path", "dir", "sock", "socket", "name", "names", "url", "uri", "endpoint",
		"type", "mode", "method", "scheme", "kind", "style",
		"limit", "limits", "count", "size", "budget", "len", "length", "ttl", "timeout", "retries",
	}
)

// credentialName reports whether name (a map key, a variable, a flag)
// names a credential: word by word, in any case, so that api_key, apiKey,
// X-Api-Key and HF_TOKEN are and max_tokens, tokenizer and
// skip_special_tokens are not.
func credentialName(name string) bool {
	words := nameWords(name)
	if len(words) == 0 || slices.Contains(notCredential, words[len(words)-1]) {
		return false
	}
	for i, w := range words {
		if slices.Contains(credentialWords, w) {
			return true
		}
		if i+1 < len(words) && slices.Contains(credentialPairs, w) && (words[i+1] == "key" || words[i+1] == "keys") {
			return true
		}
	}
	return false
}

// nameWords splits a name into lowercase words at anything but letters
// and digits and at camelCase boundaries: "X-Api-Key" and "xApiKey" →
// x, api, key; "APIKey" → api, key.
func nameWords(name string) []string {
	var words []string
	rs := []rune(name)
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			words = append(words, strings.ToLower(string(rs[start:end])))
		}
		start = -1
	}
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			continue
		}
		if start >= 0 && unicode.IsUpper(r) {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || unicode.IsUpper(prev) && nextLower {
				flush(i)
			}
		}
		if start < 0 {
			start = i
		}
	}
	flush(len(rs))
	if len(words) == 0 {
		return []string{""}
	}
	return words
}

// holdsText reports whether v holds a non-empty string at any depth.
func holdsText(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return v.Len() > 0
	case reflect.Interface, reflect.Pointer:
		return !v.IsNil() && holdsText(v.Elem())
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if holdsText(v.Index(i)) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if holdsText(it.Value()) {
				return true
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && holdsText(v.Field(i)) {
				return true
			}
		}
	}
	return false
}
