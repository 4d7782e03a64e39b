package local

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// float is the element type of a network. The model runs in float32; the
// float64 instantiation exists so that gradient checks are not drowned in
// rounding noise.
type float interface{ float32 | float64 }

var impl gonum.Implementation

func tr(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// gemm computes C = alpha·op(A)·op(B) + beta·C on row-major slices with
// leading dimensions: float32 through the package's kernel where the CPU
// has one, otherwise gonum's Sgemm; float64 through gonum's Dgemm.
func gemm[T float](tA, tB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	switch av := any(a).(type) {
	case []float32:
		if hasKernel {
			sgemm(tA, tB, m, n, k, float32(alpha), av, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
			return
		}
		impl.Sgemm(tr(tA), tr(tB), m, n, k, float32(alpha), av, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		impl.Dgemm(tr(tA), tr(tB), m, n, k, float64(alpha), av, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// linear computes Y[n×out] = X[n×in]·W[in×out] + b (b may be nil).
func linear[T float](n, in, out int, x, w, b, y []T) {
	if xf, ok := any(x).([]float32); ok && hasKernel {
		sgemmBias(false, false, n, out, in, 1, xf, in, any(w).([]float32), out, 0, any(y).([]float32), out, any(b).([]float32))
		return
	}
	if b != nil {
		for i := 0; i < n; i++ {
			copy(y[i*out:(i+1)*out], b)
		}
		gemm(false, false, n, out, in, 1, x, in, w, out, 1, y, out)
		return
	}
	gemm(false, false, n, out, in, 1, x, in, w, out, 0, y, out)
}

// linearBack accumulates dW += Xᵀ·dY and db += colsum(dY), and, when dx is
// not nil, sets dX = dY·Wᵀ (or adds it when addDX).
func linearBack[T float](n, in, out int, x, w, dy, dw, db, dx []T, addDX bool) {
	gemm(true, false, in, out, n, 1, x, in, dy, out, 1, dw, out)
	if db != nil {
		for i := 0; i < n; i++ {
			row := dy[i*out : (i+1)*out]
			for j, v := range row {
				db[j] += v
			}
		}
	}
	if dx != nil {
		var beta T
		if addDX {
			beta = 1
		}
		gemm(false, true, n, in, out, 1, dy, out, w, out, beta, dx, in)
	}
}

// rmsNorm sets y = x·r·g per row with r = 1/sqrt(mean(x²)+eps), keeping r.
func rmsNorm[T float](n, d int, x, g, y, rinv []T) {
	for i := 0; i < n; i++ {
		row := x[i*d : (i+1)*d]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		r := T(1 / sqrtf(ss/float64(d)+normEps))
		rinv[i] = r
		out := y[i*d : (i+1)*d]
		for j, v := range row {
			out[j] = v * r * g[j]
		}
	}
}

// rmsNormBack adds the gradient with respect to x to dx and accumulates dg.
func rmsNormBack[T float](n, d int, x, g, rinv, dy, dx, dg []T) {
	for i := 0; i < n; i++ {
		row := x[i*d : (i+1)*d]
		dyr := dy[i*d : (i+1)*d]
		dxr := dx[i*d : (i+1)*d]
		r := rinv[i]
		var dot T
		for j, v := range row {
			gy := dyr[j] * g[j]
			dot += gy * v
			dg[j] += dyr[j] * v * r
		}
		c := r * r * r * dot / T(d)
		for j, v := range row {
			dxr[j] += r*dyr[j]*g[j] - c*v
		}
	}
}

func axpyRow[T float](dst, src []T) {
	for i, v := range src {
		dst[i] += v
	}
}
