package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/whalerun/whale/internal/s3test"
)

// Credentials come from the environment and must never come back out:
// not on stdout, stderr or in an error, not in an artifact, whether the
// command succeeds or the server refuses them.
func TestCredentialsNeverShown(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	root := srv.URL(bucket)
	secrets := []string{srv.AccessKey, srv.SecretKey}
	check := func(t *testing.T, what string, r cliResult, extra ...string) {
		t.Helper()
		text := r.stdout + "\n" + r.stderr
		if r.err != nil {
			text += "\n" + r.err.Error()
		}
		for _, s := range append(secrets, extra...) {
			if strings.Contains(text, s) {
				t.Errorf("%s shows a credential (%.6s…):\n%s", what, s, text)
			}
		}
	}

	steps := [][]string{
		{"--log-level", "debug", "data", "import", "--root", root, "--name", "puzzles", puzzlesCSV},
		{"--log-level", "debug", "init", "--root", root, exampleExperiment},
		{"ls", "--root", root},
		{"status", "--root", root, "chess-whale"},
		{"show", "--root", root, "datasets/puzzles"},
		{"show", "--root", root, "--json", "datasets/puzzles"},
	}
	for _, args := range steps {
		r := whale(t, args...)
		r.mustCode(t, exitOK)
		check(t, strings.Join(args, " "), r)
	}

	// No artifact holds them either.
	client := srv.Client()
	p := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	n := 0
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			obj, err := client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(obj.Body)
			obj.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range secrets {
				if strings.Contains(string(body), s) {
					t.Errorf("object %s holds a credential", aws.ToString(o.Key))
				}
			}
			n++
		}
	}
	if n < 3 {
		t.Errorf("only %d objects checked", n)
	}

	// Refused credentials: the error says what failed, without them.
	// (versitygw answers an unknown key with a 404 of its own, not S3's
	// 403 InvalidAccessKeyId, so only the wrong secret reads as a
	// permission error.)
	for _, c := range []struct {
		name, key, secret, want string
	}{
		{"wrong secret", srv.AccessKey, "whale-wrong-secret-0123456789abcdef", "permission denied"},
		{"unknown key", "AKWHALEUNKNOWN000000", srv.SecretKey, "datasets/refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("AWS_ACCESS_KEY_ID", c.key)
			t.Setenv("AWS_SECRET_ACCESS_KEY", c.secret)
			r := whale(t, "--log-level", "debug", "data", "import", "--root", root, "--name", "refused", puzzlesOldCSV)
			if r.code != exitFailure || !strings.Contains(r.err.Error(), c.want) {
				t.Errorf("exit %d, err %v; want a failure (1) naming %q", r.code, r.err, c.want)
			}
			check(t, c.name, r, c.key, c.secret)
		})
	}
}
