package storage_test

import (
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
	"github.com/whalerun/whale/storage/storagetest"
)

// fastRetry keeps the retries of tests short; the retries themselves are
// tested in retry_test.go.
var fastRetry = storage.RetryPolicy{Attempts: 5, Base: time.Millisecond, Max: 20 * time.Millisecond, AttemptTimeout: 30 * time.Second}

func TestConformanceMem(t *testing.T) {
	root := "mem://conformance-" + storagetest.RandomHex(4)
	storagetest.Run(t, func(t *testing.T) *storage.Store {
		return storagetest.OpenUnder(t, root, &storage.Options{Retry: &fastRetry})
	})
}

func TestConformanceFile(t *testing.T) {
	root := "file://" + t.TempDir()
	storagetest.Run(t, func(t *testing.T) *storage.Store {
		return storagetest.OpenUnder(t, root, &storage.Options{Retry: &fastRetry})
	})
}

// TestConformanceS3 runs the suite against a real S3 server (versitygw),
// with small list pages so that pagination is crossed with few keys.
func TestConformanceS3(t *testing.T) {
	root := s3test.NewBucketURL(t)
	cfg := storagetest.Config{ListKeys: 45}
	storagetest.RunConfig(t, cfg, func(t *testing.T) *storage.Store {
		return storagetest.OpenUnder(t, root, &storage.Options{Retry: &fastRetry, ListPageSize: 10})
	})
}
