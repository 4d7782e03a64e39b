package schemas

import (
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"
)

// zstdCodec is parquet-go's zstd codec with its encoder kept for the life
// of the process. parquet-go keeps encoders in a sync.Pool, which every
// garbage collection empties, and a new encoder allocates and clears a
// history of over 1 MB before its first page: in the rollout stage, where
// the heap is small and collections frequent, that was nine tenths of the
// cost of writing rows. The frames are the same (default level, no
// checksum, empty input as a frame), and reading uses parquet-go's codec.
type zstdCodec struct {
	pqzstd.Codec
}

func (c *zstdCodec) Encode(dst, src []byte) ([]byte, error) {
	return sharedZstd().EncodeAll(src, dst[:0]), nil
}

// sharedZstd is the process's zstd encoder. EncodeAll may be called
// concurrently; it runs at most this many compressions at once and keeps
// that many encoder states (a few MB each at most).
var sharedZstd = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderConcurrency(min(runtime.GOMAXPROCS(0), 8)),
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithZeroFrames(true),
		zstd.WithEncoderCRC(false),
	)
	if err != nil {
		panic("schemas: zstd encoder: " + err.Error()) // the options are constants
	}
	return e
})

var parquetZstd = &zstdCodec{}
