package redact

import (
	"cmp"
	"slices"
	"strings"
)

// MinSecretLen is the shortest value a Scrubber removes: shorter values
// (a region, "true", a port) would blank out ordinary words.
const MinSecretLen = 8

// secretPrefixes are names whose variables configure cloud credentials,
// whatever the rest of the name.
var secretPrefixes = []string{"AWS_", "AZURE_", "GOOGLE_APPLICATION_CREDENTIALS"}

// secretParts are pieces of a name that mark a credential anywhere in it.
var secretParts = []string{"SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL", "APIKEY", "API_KEY", "ACCESS_KEY", "PRIVATE_KEY"}

// secretWords are words of a name (split at '_') that mark a credential.
var secretWords = []string{"KEY", "KEYS", "AUTH", "OAUTH", "PASS", "PAT", "SAS", "COOKIE", "SIGNATURE"}

// SecretName reports whether an environment variable called name holds a
// credential, by its name (case does not matter): the names of SecretEnv;
// AWS_*, AZURE_* and GOOGLE_APPLICATION_CREDENTIALS; any name containing
// SECRET, PASSWORD, PASSWD, TOKEN, CREDENTIAL, APIKEY, API_KEY,
// ACCESS_KEY or PRIVATE_KEY; and any name with one of the words KEY,
// KEYS, AUTH, OAUTH, PASS, PAT, SAS, COOKIE or SIGNATURE between its
// underscores (ANTHROPIC_API_KEY, HF_TOKEN, DB_PASSWORD, GH_PAT). It errs
// on the side of secrecy: a Scrubber removing a harmless value costs a
// REDACTED in a log.
func SecretName(name string) bool {
	n := strings.ToUpper(name)
	if slices.Contains(SecretEnv, n) {
		return true
	}
	for _, p := range secretPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, p := range secretParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	for w := range strings.SplitSeq(n, "_") {
		if slices.Contains(secretWords, w) {
			return true
		}
	}
	return false
}

// Scrubber removes the values of an environment's secret variables from
// text, and then what Text removes. The zero Scrubber (or nil) is Text.
type Scrubber struct {
	values []string // longest first, so that no value is cut by a shorter one inside it
}

// Secrets returns the Scrubber of env, variables in os.Environ's
// "NAME=value" form: it removes the value of every variable whose name
// SecretName accepts and whose value has MinSecretLen bytes or more.
// A value is removed wherever it appears, under any name. names are
// variables that hold credentials whatever SecretName says of them: the
// ones an experiment names for its keys (model.api_key_env: LLM_BEARER).
func Secrets(env []string, names ...string) *Scrubber {
	s := &Scrubber{}
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || len(value) < MinSecretLen || !(SecretName(name) || slices.Contains(names, name)) {
			continue
		}
		if !slices.Contains(s.values, value) {
			s.values = append(s.values, value)
		}
	}
	slices.SortFunc(s.values, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return s
}

// Text returns t with every secret value replaced by Mark, then passed
// through Text (URLs and secret-looking query parameters).
func (s *Scrubber) Text(t string) string {
	if s != nil {
		for _, v := range s.values {
			t = strings.ReplaceAll(t, v, Mark)
		}
	}
	return Text(t)
}

// Holds reports whether t contains one of the secret values. Whoever
// stores agent-written text that it cannot scrub without changing its
// meaning (a program's source) refuses it instead.
func (s *Scrubber) Holds(t string) bool {
	if s == nil {
		return false
	}
	for _, v := range s.values {
		if strings.Contains(t, v) {
			return true
		}
	}
	return false
}

// Longest is the length of the longest secret value (0 when none). A
// reader that keeps the tail of a stream drops that many bytes at the
// cut, so that no secret is left half there, too short to be found.
func (s *Scrubber) Longest() int {
	if s == nil || len(s.values) == 0 {
		return 0
	}
	return len(s.values[0])
}

// Index returns where the first secret value in t begins (the leftmost
// occurrence, the longest value there) and its length; -1 and 0 when t
// holds none. A writer that scrubs a stream piece by piece uses it to
// cut the stream where no value straddles the cut.
func (s *Scrubber) Index(t string) (start, n int) {
	start = -1
	if s == nil {
		return start, 0
	}
	for _, v := range s.values {
		if i := strings.Index(t, v); i >= 0 && (start < 0 || i < start) {
			start, n = i, len(v)
		}
	}
	return start, n
}
