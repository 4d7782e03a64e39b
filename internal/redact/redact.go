// Package redact is whale's one policy for keeping secrets out of logs,
// errors and artifacts: URL shows a URL without its credentials, Error
// takes the URL out of net/http's errors, and Text scrubs free text such
// as an SDK's error message.
//
// The policy is the strictest of the six it replaces: user info becomes
// REDACTED; a query value is kept only when its key is a known
// configuration parameter (the gocloud.dev bucket URL parameters and the
// like), so that a token under any other name (api_key, X-Amz-Signature,
// sig, access_token …) never shows; a kept value that is itself a URL
// loses its user info; the fragment is dropped.
package redact

import (
	"errors"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Unparseable is what URL returns for a string that does not parse: any
// part of it may be a secret.
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

// URL returns raw fit for a log line, an error or an artifact (see the
// package doc). It is idempotent.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return Unparseable
	}
	if u.User != nil {
		u.User = url.User(Mark)
	}
	u.Fragment, u.RawFragment = "", ""
	if u.RawQuery == "" {
		return u.String()
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		u.RawQuery = Mark + "=" + Mark // as URL would render it again
		return u.String()
	}
	changed := false
	for k, vs := range q {
		for i, v := range vs {
			if !slices.Contains(safeParams, strings.ToLower(k)) {
				changed = changed || v != Mark
				vs[i] = Mark
				continue
			}
			if vu, err := url.Parse(v); err == nil && vu.User != nil && vu.User.String() != Mark {
				vu.User = url.User(Mark)
				vs[i] = vu.String()
				changed = true
			}
		}
	}
	if changed {
		// Re-encoded only when something went: a URL with nothing to hide
		// comes back as it was, so that callers may compare.
		u.RawQuery = q.Encode()
	}
	return u.String()
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
// SecretEnv variables (four characters or more) and secret-looking query
// parameters.
func Text(s string) string {
	for _, env := range SecretEnv {
		if v := getenv(env); len(v) >= 4 {
			s = strings.ReplaceAll(s, v, Mark)
		}
	}
	return secretInText.ReplaceAllString(s, "${1}"+Mark)
}
