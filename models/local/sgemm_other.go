//go:build !amd64

package local

const hasKernel = false

func sgemmKernel6x16(k int, a, b, c *float32, ldc int, alpha float32, init *float32, initStride int) {
	panic("local: no sgemm kernel on this architecture")
}

func dotRows(q, k *float32, n, hd int, out *float32) {
	panic("local: no attention kernel on this architecture")
}

func axpyRows(p, v *float32, n, hd int, out *float32) {
	panic("local: no attention kernel on this architecture")
}
