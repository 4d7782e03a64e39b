package local

import "golang.org/x/sys/cpu"

// hasKernel says the FMA micro-kernel can run here.
var hasKernel = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func sgemmKernel6x16(k int, a, b, c *float32, ldc int, alpha float32, init *float32, initStride int)

//go:noescape
func dotRows(q, k *float32, n, hd int, out *float32)

//go:noescape
func axpyRows(p, v *float32, n, hd int, out *float32)
