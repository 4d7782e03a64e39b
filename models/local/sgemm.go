package local

import "sync"

// The float32 matrix multiply behind gemm on CPUs with AVX2 and FMA:
// B is packed into 16-column panels, A into 6-row slivers, and an
// assembly micro-kernel keeps the 6×16 block of C in registers. gonum's
// Sgemm (SSE, no FMA) reaches about 10 GFLOP/s per core here; see the
// package benchmarks for this one.
const (
	kernM = 6
	kernN = 16
)

type packBuf struct {
	a, b []float32
	tile [kernM * kernN]float32
}

var packPool = sync.Pool{New: func() any { return new(packBuf) }}

var zeros [kernN]float32

// sgemm computes C = alpha·op(A)·op(B) + beta·C like blas Sgemm.
func sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmBias(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil)
}

// sgemmBias is sgemm that, when beta is 0 and bias is not nil, also adds
// bias to every row of C, so a linear layer writes its output once.
func sgemmBias(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, bias []float32) {
	if beta != 0 && beta != 1 {
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] *= beta
			}
		}
	}
	if k == 0 || alpha == 0 {
		if beta == 0 {
			for i := 0; i < m; i++ {
				row := c[i*ldc : i*ldc+n]
				if bias != nil {
					copy(row, bias[:n])
				} else {
					clear(row)
				}
			}
		}
		return
	}
	buf := packPool.Get().(*packBuf)
	defer packPool.Put(buf)
	buf.b = packB(tB, n, k, b, ldb, buf.b)
	sgemmPanels(tA, m, n, k, alpha, a, lda, buf.b, beta, c, ldc, bias, buf)
}

// packB lays B (k×n, or n×k when tB) out as the kernel reads it: panels of
// 16 columns, each k rows of 16, the last panel zero-padded. It reuses dst.
func packB(tB bool, n, k int, b []float32, ldb int, dst []float32) []float32 {
	panels := (n + kernN - 1) / kernN
	dst = grow(dst, panels*k*kernN)
	bp := dst
	for jp := 0; jp < panels; jp++ {
		j0 := jp * kernN
		w := min(kernN, n-j0)
		dst := bp[jp*k*kernN : (jp+1)*k*kernN]
		if !tB {
			for p := 0; p < k; p++ {
				d := dst[p*kernN : (p+1)*kernN]
				copy(d, b[p*ldb+j0:p*ldb+j0+w])
				clear(d[w:])
			}
		} else {
			if w < kernN {
				clear(dst)
			}
			for jj := 0; jj < w; jj++ {
				col := b[(j0+jj)*ldb : (j0+jj)*ldb+k]
				for p, v := range col {
					dst[p*kernN+jj] = v
				}
			}
		}
	}
	return bp
}

// linearPacked is linear (Y = X·W + b) with W packed by packB beforehand:
// the decoder multiplies a few rows by every weight at each step, and
// packing the weights anew each time cost 7 s of 82 s of CPU in whale demo
// --quick.
func linearPacked(n, in, out int, x, wp, b, y []float32) {
	buf := packPool.Get().(*packBuf)
	defer packPool.Put(buf)
	sgemmPanels(false, n, out, in, 1, x, in, wp, 0, y, out, b, buf)
}

// sgemmPanels is sgemmBias after B is packed into bp; k > 0 and beta has
// been applied to C (only whether it is 0 matters here).
func sgemmPanels(tA bool, m, n, k int, alpha float32, a []float32, lda int, bp []float32, beta float32, c []float32, ldc int, bias []float32, buf *packBuf) {
	panels := (n + kernN - 1) / kernN
	buf.a = grow(buf.a, k*kernM)
	ap := buf.a
	for i0 := 0; i0 < m; i0 += kernM {
		h := min(kernM, m-i0)
		if h < kernM {
			clear(ap)
		}
		if !tA {
			for r := 0; r < h; r++ {
				row := a[(i0+r)*lda : (i0+r)*lda+k]
				for p, v := range row {
					ap[p*kernM+r] = v
				}
			}
		} else {
			for p := 0; p < k; p++ {
				copy(ap[p*kernM:p*kernM+h], a[p*lda+i0:p*lda+i0+h])
			}
		}
		for jp := 0; jp < panels; jp++ {
			j0 := jp * kernN
			w := min(kernN, n-j0)
			cij := c[i0*ldc+j0:]
			if h == kernM && w == kernN {
				switch {
				case beta != 0:
					sgemmKernel6x16(k, &ap[0], &bp[jp*k*kernN], &cij[0], ldc, alpha, &cij[0], ldc)
				case bias != nil:
					sgemmKernel6x16(k, &ap[0], &bp[jp*k*kernN], &cij[0], ldc, alpha, &bias[j0], 0)
				default:
					sgemmKernel6x16(k, &ap[0], &bp[jp*k*kernN], &cij[0], ldc, alpha, &zeros[0], 0)
				}
				continue
			}
			t := buf.tile[:]
			sgemmKernel6x16(k, &ap[0], &bp[jp*k*kernN], &t[0], kernN, alpha, &zeros[0], 0)
			for r := 0; r < h; r++ {
				dst, src := cij[r*ldc:r*ldc+w], t[r*kernN:r*kernN+w]
				switch {
				case beta != 0:
					axpyRow(dst, src)
				case bias != nil:
					for j, v := range src {
						dst[j] = v + bias[j0+j]
					}
				default:
					copy(dst, src)
				}
			}
		}
	}
}
