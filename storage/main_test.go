package storage_test

import (
	"testing"

	"github.com/whalerun/whale/internal/s3test"
)

// TestMain stops the versitygw server that the S3 tests of this package
// share (started on first use, so unit-test runs and the child processes
// of the lease race never start one).
func TestMain(m *testing.M) { s3test.Main(m) }
