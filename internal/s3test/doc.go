// Package s3test runs a real S3-compatible server, versitygw, for tests,
// and a fault-injecting proxy to put in front of it.
//
// The binary is found through $WHALE_VERSITYGW, then <module root>/.tools/
// versitygw, then PATH (`make tools` builds it). Tests that need a server
// are skipped in -short mode (`make test-short`: unit tests only); outside
// it a missing binary fails them, because CI always builds it.
//
// Shared starts one server per test binary on first use and NewBucketURL
// gives each test a fresh bucket on it; a package that uses Shared calls
// Main from its TestMain so that the server stops when the tests end. The
// server's credentials are put into the process environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), which is where
// gocloud's s3blob and any child process look for them.
package s3test
