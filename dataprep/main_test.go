package dataprep

import (
	"testing"

	"github.com/whalerun/whale/internal/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }
