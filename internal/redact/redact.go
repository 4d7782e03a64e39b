// Package redact is whale's one policy for keeping secrets out of logs,
// errors, reports and job scripts: URL shows a URL without its
// credentials, Check says why a URL cannot be stored as it is, Error takes
// the URL out of net/http's errors, and Text scrubs free text such as an
// SDK's error message.
//
// The policy works on the raw string, never trusting a lenient parse:
//   - user info becomes REDACTED (also the "user:pass@" of an opaque URL
//     such as s3:user:pass@bucket);
//   - the fragment is dropped;
//   - a query value is kept only when its key is a known configuration
//     parameter (the gocloud.dev bucket URL parameters and the like), so
//     that a token under any other name (api_key, X-Amz-Signature, sig,
//     access_token …) never shows; a parameter with no value keeps its
//     name only if that is a configuration parameter;
//   - a kept value that is itself a URL (endpoint=http://…) goes through
//     the same policy, and one that is %-encoded twice is hidden;
//   - a query that does not parse strictly (a bad %-escape, a ';'
//     separator, a control character) is replaced whole by
//     REDACTED=REDACTED;
//   - a URL that does not parse keeps its scheme and host when they can be
//     told apart safely (scheme://host/REDACTED?REDACTED=REDACTED) and is
//     otherwise replaced whole by Unparseable.
//
// A URL with nothing to hide comes back exactly as it was, so that callers
// may compare; Check(raw) == nil exactly when URL(raw) == raw.
package redact

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Unparseable is what URL returns for a string that does not parse and
// whose scheme and host cannot be told apart: any part of it may be a
// secret.
const Unparseable = "<unparseable URL>"

// Mark replaces what URL and Text hide.
const Mark = "REDACTED"

// safeParams are query parameters that configure a connection and hold no
// secret: those of gocloud.dev's s3blob, gcsblob, azureblob and fileblob
// URLs (paths to key files, never keys), and of vLLM-style endpoints.
var safeParams = []string{
	"accelerate", "access_id", "anonymous", "awssdk", "base_url", "cdn", "create_dir", "dir_file_mode",
	"disable_https", "domain", "dualstack", "endpoint", "fips", "grpc", "hostname_immutable", "kmskeyid",
	"localemu", "metadata", "no_tmp_dir", "prefix", "private_key_path", "profile", "protocol",
	"rate_limiter_capacity", "region", "request_checksum_calculation", "response_checksum_validation",
	"s3forcepathstyle", "secret_key_path", "ssetype", "storage_account", "universe_domain",
	"use_path_style", "zonal",
}

// Safe reports whether the query parameter key is a configuration
// parameter, whose value URL shows (case does not matter).
func Safe(key string) bool { return slices.Contains(safeParams, strings.ToLower(key)) }

// URL returns raw fit for a log line, an error, a report or an artifact
// (see the package doc). It is idempotent.
func URL(raw string) string {
	return scrub(raw, nil)
}

// Check returns nil when raw may be stored or shown as it is (URL(raw) ==
// raw), else an error that says what URL would hide, without the hidden
// text itself. Whatever carries a URL to another process in a file (a
// Slurm job script) checks it first.
func Check(raw string) error {
	var why []string
	if got := scrub(raw, &why); got == raw {
		return nil
	} else if len(why) == 0 {
		why = append(why, "it would be shown as "+got)
	}
	return errors.New(strings.Join(why, "; "))
}

// CheckText is Check for every scheme://… in free text, such as a
// command line: nil when Text would leave each as it is, else an error
// for the first one that shows it redacted.
func CheckText(s string) error {
	for _, u := range urlInText.FindAllString(s, -1) {
		u = strings.TrimRight(u, urlEnd)
		if err := Check(u); err != nil {
			return fmt.Errorf("URL %s: %w", URL(u), err)
		}
	}
	return nil
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// paramName is a query key shown with a REDACTED value; another key is
// hidden as well.
var paramName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// escaped matches a %-escape.
var escaped = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)

// scrub is URL; it adds to why (when not nil) a line for each thing it
// hides.
func scrub(raw string, why *[]string) string {
	note := func(format string, args ...any) {
		if why != nil {
			*why = append(*why, fmt.Sprintf(format, args...))
		}
	}
	// A password holding an unescaped '#', '?' or '/' ends the authority
	// early: net/url then reads part of it as a host, port or path, and
	// the rest as a fragment, query or path. user:…@ after "://" that
	// does not parse as user info is hidden whole.
	if _, rest, ok := strings.Cut(raw, "://"); ok {
		// (A key=value before the '@' is a query parameter's value, which
		// the query's own rules redact.)
		if at := strings.IndexByte(rest, '@'); at >= 0 && strings.ContainsRune(rest[:at], ':') && !strings.ContainsRune(rest[:at], '=') {
			if u, err := url.Parse(raw); err == nil && u.User == nil {
				note("it has what looks like user info (user:…@) that does not parse as such")
				return Unparseable
			}
		}
	}
	// Split as net/url does: the fragment at the first '#', the query at
	// the first '?' before it.
	s, _, hasFrag := strings.Cut(raw, "#")
	if hasFrag {
		note("it has a fragment (#…)")
	}
	base, query, hasQuery := strings.Cut(s, "?")
	u, err := url.Parse(s)
	if err != nil {
		bu, berr := url.Parse(base)
		if berr != nil {
			note("it does not parse as a URL")
			return salvage(base, hasQuery)
		}
		note("its query does not parse (a control character?)")
		return withQuery(cleanBase(base, bu, note), Mark+"="+Mark)
	}
	shown := cleanBase(base, u, note)
	if shown == Unparseable {
		return shown
	}
	if !hasQuery || query == "" {
		if hasQuery {
			shown += "?"
		}
		return shown
	}
	if _, err := url.ParseQuery(query); err != nil {
		note("its query does not parse strictly (a ';' separator or a bad %%-escape)")
		return shown + "?" + Mark + "=" + Mark
	}
	return shown + "?" + cleanQuery(query, note)
}

// withQuery is base?query, or Unparseable when base is.
func withQuery(base, query string) string {
	if base == Unparseable {
		return base
	}
	return base + "?" + query
}

// cleanBase is base (a URL without query and fragment, u as parsed) with
// its user info replaced by Mark; base itself when it has none.
func cleanBase(base string, u *url.URL, note func(string, ...any)) string {
	switch {
	case u.User != nil && u.User.String() != Mark:
		note("it has user info (user:password@)")
		// base is [scheme:]//[userinfo@]host[/path], and net/url takes the
		// userinfo up to the last '@' of the authority.
		rest := base[len(u.Scheme):]
		if u.Scheme != "" {
			rest = rest[1:] // ':'
		}
		head := base[:len(base)-len(rest)]
		if !strings.HasPrefix(rest, "//") {
			return Unparseable
		}
		authority, path, hasPath := strings.Cut(rest[2:], "/")
		at := strings.LastIndex(authority, "@")
		if at < 0 {
			return Unparseable
		}
		out := head + "//" + Mark + authority[at:]
		if hasPath {
			out += "/" + path
		}
		// Whatever net/url makes of it, it must be the same host with the
		// user info gone.
		if v, err := url.Parse(out); err != nil || v.User == nil || v.User.String() != Mark || v.Host != u.Host {
			return Unparseable
		}
		return out
	case u.Opaque != "" && strings.Contains(u.Opaque, "@"):
		// s3:user:pass@bucket: the opaque part may hold user info.
		at := strings.LastIndex(u.Opaque, "@")
		if u.Opaque[:at] == Mark {
			return base
		}
		note("it has user info (user:password@)")
		return base[:len(base)-len(u.Opaque)] + Mark + u.Opaque[at:]
	}
	return base
}

// salvage shows what it safely can of base, which does not parse, the
// query (if any) being dropped: scheme://host, with REDACTED for user
// info and path, or Unparseable.
func salvage(base string, hasQuery bool) string {
	scheme, rest, ok := strings.Cut(base, "://")
	if !ok || !schemeRE.MatchString(scheme) {
		return Unparseable
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	host, user := authority, false
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		host, user = authority[at+1:], true
	}
	if v, err := url.Parse(scheme + "://" + host); err != nil || v.Host != host || v.User != nil || v.Path != "" || v.RawQuery != "" {
		return Unparseable
	}
	out := scheme + "://"
	if user {
		out += Mark + "@"
	}
	out += host
	if hasPath {
		out += "/"
		if path != "" {
			out += Mark
		}
	}
	if hasQuery {
		out += "?" + Mark + "=" + Mark
	}
	return out
}

// cleanQuery redacts a query that url.ParseQuery accepts: it keeps each
// pair as it was written, except for what it hides.
func cleanQuery(query string, note func(string, ...any)) string {
	pairs := strings.Split(query, "&")
	for i, pair := range pairs {
		if pair == "" || pair == Mark {
			continue
		}
		rk, rv, hasValue := strings.Cut(pair, "=")
		// ParseQuery took them: they unescape.
		k, _ := url.QueryUnescape(rk)
		v, _ := url.QueryUnescape(rv)
		switch {
		case Safe(k) && hasValue && escaped.MatchString(v):
			// Encoded twice: what it says once decoded again is unknown.
			note("its %s parameter is %%-encoded twice", strings.ToLower(k))
			pairs[i] = rk + "=" + Mark
		case Safe(k):
			if !hasValue || !(strings.Contains(v, "://") || strings.ContainsAny(v, "@?#")) {
				continue
			}
			// A value that may be a URL, such as endpoint=http://u:p@h/?x=y,
			// follows the same policy.
			var inner []string
			if w := scrub(v, &inner); w != v {
				pairs[i] = rk + "=" + url.QueryEscape(w)
				if escaped.MatchString(w) {
					// Shown, it would read as encoded twice: hide it whole.
					pairs[i] = rk + "=" + Mark
				}
				for _, line := range inner {
					note("its %s parameter: %s", strings.ToLower(k), line)
				}
			}
		case hasValue && v == Mark && paramName.MatchString(k):
		case hasValue && paramName.MatchString(k):
			note("query parameter %q is not a configuration parameter", k)
			pairs[i] = rk + "=" + Mark
		default:
			note("it has a query parameter that is not a configuration parameter")
			pairs[i] = Mark
			if hasValue {
				pairs[i] += "=" + Mark
			}
		}
	}
	return strings.Join(pairs, "&")
}

// Error returns err with the URL that net/http puts in its errors
// (*url.Error) shown through URL; other errors are returned as they are.
func Error(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return &url.Error{Op: ue.Op, URL: URL(ue.URL), Err: ue.Err}
}

// urlInText matches a URL inside free text: a scheme, "://", and what
// follows up to a space or a quote.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'<>`]+")

// urlEnd is punctuation that, at the end of a URL in text, ends the
// sentence rather than the URL.
const urlEnd = ".,;:)]}"

// secretInText matches secret-looking query parameters inside free text,
// such as a request URL quoted by a driver error.
var secretInText = regexp.MustCompile(`(?i)((?:x-amz-|x-goog-)?(?:signature|credential|security-token|sig|token|secret|password|sas|api_key|apikey|key)=)[^&\s"']+`)

// SecretEnv are the environment variables whose values are credentials:
// Text removes their values wherever they appear.
var SecretEnv = []string{
	"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
	"AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET",
	"OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
}

// getenv is os.Getenv; tests replace it.
var getenv = os.Getenv

// Text removes credential-looking material from free text: the values of
// SecretEnv variables (four characters or more), what URL hides of each
// scheme://… it holds, and secret-looking query parameters anywhere else.
func Text(s string) string {
	for _, env := range SecretEnv {
		if v := getenv(env); len(v) >= 4 {
			s = strings.ReplaceAll(s, v, Mark)
		}
	}
	s = onLinesWith(s, "://", func(l string) string {
		return urlInText.ReplaceAllStringFunc(l, func(u string) string {
			trimmed := strings.TrimRight(u, urlEnd)
			return URL(trimmed) + u[len(trimmed):]
		})
	})
	return onLinesWith(s, "=", func(l string) string { return secretInText.ReplaceAllString(l, "${1}"+Mark) })
}

// onLinesWith applies f to each line of s that holds marker, and keeps
// the others. The regular expressions of Text scan at about 1 MB/s and
// a coding agent's log of many MiB goes through here: each matches only
// within a line (no match holds a newline) and only where its marker
// ("://", '=') is, so the lines without it can be skipped.
func onLinesWith(s, marker string, f func(string) string) string {
	if !strings.Contains(s, marker) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for line := range strings.Lines(s) {
		if strings.Contains(line, marker) {
			line = f(line)
		}
		b.WriteString(line)
	}
	return b.String()
}
