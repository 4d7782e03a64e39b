package local

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmMatchesGonum compares the packed kernel with gonum's Sgemm on
// every transpose combination and on shapes with ragged edges.
func TestSgemmMatchesGonum(t *testing.T) {
	if !hasKernel {
		t.Skip("no AVX2/FMA kernel on this CPU; gemm uses gonum, which is what this test compares against")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{1, 1, 1}, {6, 16, 8}, {7, 17, 3}, {13, 40, 33}, {64, 128, 96}, {5, 3, 0}} {
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				m, n, k := s[0], s[1], s[2]
				t.Run(fmt.Sprintf("%dx%dx%d-%v-%v", m, n, k, tA, tB), func(t *testing.T) {
					lda, ldb, ldc := k+3, n+1, n+2
					if tA {
						lda = m + 3
					}
					if tB {
						ldb = k + 1
					}
					a := make([]float32, max(m, k)*lda)
					b := make([]float32, max(n, k)*ldb)
					c := make([]float32, m*ldc)
					for _, v := range [][]float32{a, b, c} {
						for i := range v {
							v[i] = float32(rng.NormFloat64())
						}
					}
					bias := make([]float32, n)
					for i := range bias {
						bias[i] = float32(i) - 3
					}
					// beta 0.3 accumulates; beta 0 must ignore what C held,
					// with and without a bias row.
					for _, tc := range []struct {
						beta float32
						bias []float32
					}{{0.3, nil}, {0, nil}, {0, bias}} {
						want := append([]float32(nil), c...)
						if tc.bias != nil {
							for i := 0; i < m; i++ {
								copy(want[i*ldc:i*ldc+n], tc.bias)
							}
							impl.Sgemm(tr(tA), tr(tB), m, n, k, 0.7, a, lda, b, ldb, 1, want, ldc)
						} else {
							impl.Sgemm(tr(tA), tr(tB), m, n, k, 0.7, a, lda, b, ldb, tc.beta, want, ldc)
						}
						got := append([]float32(nil), c...)
						sgemmBias(tA, tB, m, n, k, 0.7, a, lda, b, ldb, tc.beta, got, ldc, tc.bias)
						for i := 0; i < m; i++ {
							for j := 0; j < ldc; j++ {
								g, w := got[i*ldc+j], want[i*ldc+j]
								if math.Abs(float64(g-w)) > 1e-4*(1+math.Abs(float64(w))) {
									t.Fatalf("beta %v bias %v: C[%d,%d] = %v, gonum %v", tc.beta, tc.bias != nil, i, j, g, w)
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestAttentionKernels compares the decode-time attention helpers with
// plain loops for every head width the assembly handles and a few it
// leaves to Go.
func TestAttentionKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, hd := range []int{8, 16, 24, 32, 40, 48, 56, 64, 12, 72} {
		for _, n := range []int{1, 2, 7, 33} {
			q := make([]float32, hd)
			k := make([]float32, n*hd)
			for _, v := range [][]float32{q, k} {
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
			}
			s := make([]float32, n)
			attnScores(q, k, s, hd, 0.5)
			for j := range s {
				var want float64
				for i := range q {
					want += float64(q[i]) * float64(k[j*hd+i])
				}
				want *= 0.5
				if math.Abs(float64(s[j])-want) > 1e-4*(1+math.Abs(want)) {
					t.Fatalf("hd %d n %d: score %d = %v, want %v", hd, n, j, s[j], want)
				}
			}
			out := make([]float32, hd+1)
			out[hd] = 42 // past the end: must stay
			attnMix(s, k, out, hd)
			for i := 0; i < hd; i++ {
				var want float64
				for j := range s {
					want += float64(s[j]) * float64(k[j*hd+i])
				}
				if math.Abs(float64(out[i])-want) > 1e-4*(1+math.Abs(want)) {
					t.Fatalf("hd %d n %d: out %d = %v, want %v", hd, n, i, out[i], want)
				}
			}
			if out[hd] != 42 {
				t.Fatalf("hd %d: attnMix wrote past hd", hd)
			}
		}
	}
}
