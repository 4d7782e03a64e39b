package schemas

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	pqzstd "github.com/parquet-go/parquet-go/compress/zstd"
)

// TestZstdCodecRoundTrip checks that pages compressed by the shared
// encoder decode with parquet-go's own codec (what every reader uses),
// also when many goroutines compress at once.
func TestZstdCodecRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 3<<20)
	for i := range noise {
		noise[i] = byte(rnd.IntN(256))
	}
	cases := []struct {
		name string
		src  []byte
	}{
		{"empty", nil},
		{"one byte", []byte("x")},
		{"text", []byte(strings.Repeat("the model said <answer>42</answer>. ", 5000))},
		{"incompressible 3 MB", noise},
	}
	var dec pqzstd.Codec
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for _, tc := range cases {
				enc, err := parquetZstd.Encode(make([]byte, 0, 16), tc.src)
				if err != nil {
					t.Errorf("%s: encode: %v", tc.name, err)
					return
				}
				got, err := dec.Decode(nil, enc)
				if err != nil {
					t.Errorf("goroutine %d, %s: decode: %v", g, tc.name, err)
					return
				}
				if !bytes.Equal(got, tc.src) {
					t.Errorf("goroutine %d, %s: round trip changed %d bytes into %d", g, tc.name, len(tc.src), len(got))
				}
			}
		})
	}
	wg.Wait()
	if parquetZstd.String() != "ZSTD" {
		t.Errorf("codec name %q", parquetZstd.String())
	}
}
