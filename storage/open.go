package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob" // gs://
	"gocloud.dev/blob/memblob"   // mem://
	"gocloud.dev/blob/s3blob"    // s3://

	"github.com/whalerun/whale/internal/redact"
)

// Opening a Store by URL: file://, mem:// and s3:// (with its query
// parameters), the root's prefix and directory checks.

// Options tune a Store. The zero value is fine.
type Options struct {
	Retry   *RetryPolicy // nil means DefaultRetry
	TempDir string       // where part files spool before upload; "" means os.TempDir
	// ListPageSize is how many entries one list request asks for; 0 means
	// 1000, the most S3 returns. Smaller pages are for tests of pagination.
	ListPageSize int
	// MustExist makes Open fail, with an error that wraps ErrNotFound,
	// when a file:// root (its directory, and its prefix folder if it has
	// one) does not exist, instead of creating it: a mistyped path then
	// says so rather than reading as an empty root. Commands that only
	// read or add to a root set it; those that create one (init, data
	// import) leave it unset.
	MustExist bool
}

// Open opens the root at rawURL. A "prefix" query parameter, or the path of
// a bucket URL, scopes every key under it; it is a relative slash-separated
// path (no empty, . or .. segment), else the error wraps ErrInvalidKey.
// file:// roots are created when missing, unless Options.MustExist.
//
// mem:// opens a new, empty in-memory bucket on every call; mem://<name>
// opens the bucket of that name, shared by every Open in this process
// (tests that open one root from several places use it).
//
// On s3:// the AWS SDK retries each request up to 3 times itself (so that
// one part of a multipart upload is retried alone), with the backoff of the
// Store's RetryPolicy; the Store's retries come on top.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	red := redact.URL(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("open root %s: want a URL such as file:///data/whale or s3://bucket/prefix?endpoint=...", red)
	}
	s := &Store{url: red, scheme: u.Scheme, retry: DefaultRetry, tempDir: opts.TempDir, pageSize: opts.ListPageSize}
	if opts.Retry != nil {
		s.retry = *opts.Retry
	}
	if s.pageSize <= 0 {
		s.pageSize = 1000
	}
	q := u.Query()
	prefix := strings.Trim(q.Get("prefix"), "/")
	q.Del("prefix")
	if u.Scheme != "file" {
		// For object stores the URL path is a key prefix too.
		if p := strings.Trim(u.Path, "/"); p != "" {
			prefix = strings.Trim(p+"/"+prefix, "/")
		}
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("open root %s: %w", red, err)
	}
	var b *blob.Bucket
	switch u.Scheme {
	case "file":
		dir := u.Path
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("open root %s: file URLs take an absolute path (file:///abs/path), not host %q", red, u.Host)
		}
		if dir == "" || !path.IsAbs(dir) {
			return nil, fmt.Errorf("open root %s: file URLs need an absolute path (file:///abs/path)", red)
		}
		if len(q) > 0 {
			return nil, fmt.Errorf("open root %s: file URLs take no query parameters but prefix", red)
		}
		if opts.MustExist {
			if err := checkDir(red, dir, path.Join(dir, prefix)); err != nil {
				return nil, err
			}
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, &Error{Op: "open", URL: red, Kind: kindOf(err), Err: err}
		}
		// Sidecar attribute files would double the file count for nothing:
		// manifests carry what we need.
		b, err = fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
		s.dir = dir
	default:
		// For object stores the URL path is a key prefix (taken above),
		// not part of the bucket name.
		u.Path, u.RawPath = "", ""
		u.RawQuery = q.Encode()
		switch {
		case u.Scheme == "mem" && u.Host != "":
			if len(q) > 0 {
				return nil, fmt.Errorf("open root %s: named mem:// buckets take no query parameters but prefix", red)
			}
			b = namedMem(u.Host, prefix)
			prefix = ""
		case u.Scheme == "s3":
			b, err = openS3(ctx, u, s.retry)
		default:
			b, err = blob.OpenBucket(ctx, u.String())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open root %s: %s", red, scrub(err))
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
		if s.dir != "" {
			s.dir = path.Join(s.dir, prefix)
		}
	}
	s.bucket = b
	return s, nil
}

// checkPrefix accepts "" or a relative slash-separated key prefix whose
// segments are names: a prefix of ../../etc would point a file:// root
// outside its directory, and would mean different keys on object stores.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	why := ""
	switch {
	case !utf8.ValidString(prefix):
		why = "is not valid UTF-8"
	case strings.Contains(prefix, "\\"):
		why = "has a backslash"
	default:
		for p := range strings.SplitSeq(prefix, "/") {
			switch {
			case p == "":
				why = "has an empty segment (//)"
			case p == "." || p == "..":
				why = "has a " + p + " segment"
			case p == localTmp || fileTempName.MatchString(p) || strings.HasSuffix(p, ".attrs"):
				why = "uses the reserved name " + strconv.Quote(p)
			}
			if why != "" {
				break
			}
		}
	}
	if why != "" {
		return fmt.Errorf("%w: prefix %q %s; a prefix is a relative slash-separated path such as team/whale", ErrInvalidKey, prefix, why)
	}
	return nil
}

// checkDir checks that a file:// root's directory, and the folder of its
// prefix (sub, which is dir when there is none), exist.
func checkDir(red, dir, sub string) error {
	for _, d := range []string{dir, sub} {
		fi, err := os.Stat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			what := "directory"
			if d != dir {
				what = "prefix folder"
			}
			return &Error{Op: "open", URL: red, Kind: ErrNotFound,
				Err: fmt.Errorf("no such %s %s: the root does not exist", what, d)}
		case err != nil:
			return &Error{Op: "open", URL: red, Kind: kindOf(err), Err: err}
		case !fi.IsDir():
			return &Error{Op: "open", URL: red, Err: fmt.Errorf("%s is not a directory", d)}
		}
	}
	return nil
}

var (
	memMu    sync.Mutex
	memNamed = map[string]*blob.Bucket{}
)

// namedMem returns a view of the process-wide in-memory bucket name under
// prefix. Each Store gets its own *blob.Bucket wrapper so that closing one
// Store does not close the bucket for the others (memblob's driver Close
// does nothing).
func namedMem(name, prefix string) *blob.Bucket {
	memMu.Lock()
	defer memMu.Unlock()
	base, ok := memNamed[name]
	if !ok {
		base = memblob.OpenBucket(nil)
		memNamed[name] = base
	}
	if prefix != "" {
		prefix += "/"
	}
	// PrefixedBucket marks base as closed but keeps using its driver, so
	// base serves as the source of any number of views.
	return blob.PrefixedBucket(base, prefix)
}

// openS3 opens an s3:// URL as s3blob's URL opener does, except that the
// SDK's retryer backs off as the Store's RetryPolicy says (its own waits
// start at 1 s for throttling) and has no client-side retry quota, which
// would otherwise turn a burst of 503s into non-retryable errors.
func openS3(ctx context.Context, u *url.URL, p RetryPolicy) (*blob.Bucket, error) {
	q := u.Query()
	var bopts s3blob.Options
	var copts []func(*s3.Options)
	boolParam := func(name string) (v, ok bool, err error) {
		raw := q.Get(name)
		if raw == "" {
			return false, false, nil
		}
		q.Del(name)
		v, err = strconv.ParseBool(raw)
		if err != nil {
			return false, false, fmt.Errorf("invalid value for %q: %w", name, err)
		}
		return v, true, nil
	}
	for _, name := range []string{"use_path_style", "s3ForcePathStyle"} {
		v, ok, err := boolParam(name)
		if err != nil {
			return nil, err
		}
		if ok {
			copts = append(copts, func(o *s3.Options) { o.UsePathStyle = v })
		}
	}
	if v, ok, err := boolParam("disable_https"); err != nil {
		return nil, err
	} else if ok {
		copts = append(copts, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = v })
	}
	if v, ok, err := boolParam("accelerate"); err != nil {
		return nil, err
	} else if ok {
		copts = append(copts, func(o *s3.Options) { o.UseAccelerate = v })
	}
	if v := q.Get("ssetype"); v != "" {
		q.Del("ssetype")
		found := false
		for _, t := range s3types.ServerSideEncryptionAes256.Values() {
			if strings.EqualFold(string(t), v) {
				bopts.EncryptionType, found = t, true
			}
		}
		if !found {
			return nil, fmt.Errorf("%q is not a valid value for \"ssetype\"", v)
		}
	}
	if v := q.Get("kmskeyid"); v != "" {
		q.Del("kmskeyid")
		bopts.KMSEncryptionID = v
	}
	limiter := retry.RateLimiter(ratelimit.None)
	if v := q.Get("rate_limiter_capacity"); v != "" {
		q.Del("rate_limiter_capacity")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("invalid value for \"rate_limiter_capacity\": %w", err)
		}
		limiter = ratelimit.NewTokenRateLimit(uint(n))
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, err
	}
	// The SDK prints notes such as "Response has no supported checksum" on
	// stderr; they are debug detail, not something a user should see.
	cfg.Logger = logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		slog.Debug("s3: "+fmt.Sprintf(format, v...), "class", string(c))
	})
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 3
			o.RateLimiter = limiter
			o.Backoff = retry.BackoffDelayerFunc(func(attempt int, _ error) (time.Duration, error) {
				return p.policy().Backoff(attempt - 1), nil
			})
		})
	}
	client := s3.NewFromConfig(cfg, copts...)
	// The transfer manager does not take the checksum setting from the
	// client; s3blob's opener passes it the same way.
	bopts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	return s3blob.OpenBucket(ctx, client, u.Host, &bopts)
}
