#include "textflag.h"

// func sgemmKernel6x16(k int, a, b, c *float32, ldc int, alpha float32, init *float32, initStride int)
//
// c[r*ldc+j] = init[r*initStride+j] + alpha * sum_p a[p*6+r] * b[p*16+j]
// for r < 6, j < 16: a is a packed 6-row sliver, b a packed 16-column
// panel. init is c itself (accumulate), a bias row (stride 0) or zeros.
// Needs AVX2 and FMA3.
TEXT ·sgemmKernel6x16(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	MOVQ init+48(FP), R12
	MOVQ initStride+56(FP), R13
	SHLQ $2, R13
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JZ    store

loop:
	VMOVUPS      (DI), Y12
	VMOVUPS      32(DI), Y13
	VBROADCASTSS (SI), Y14
	VFMADD231PS  Y12, Y14, Y0
	VFMADD231PS  Y13, Y14, Y1
	VBROADCASTSS 4(SI), Y15
	VFMADD231PS  Y12, Y15, Y2
	VFMADD231PS  Y13, Y15, Y3
	VBROADCASTSS 8(SI), Y14
	VFMADD231PS  Y12, Y14, Y4
	VFMADD231PS  Y13, Y14, Y5
	VBROADCASTSS 12(SI), Y15
	VFMADD231PS  Y12, Y15, Y6
	VFMADD231PS  Y13, Y15, Y7
	VBROADCASTSS 16(SI), Y14
	VFMADD231PS  Y12, Y14, Y8
	VFMADD231PS  Y13, Y14, Y9
	VBROADCASTSS 20(SI), Y15
	VFMADD231PS  Y12, Y15, Y10
	VFMADD231PS  Y13, Y15, Y11
	ADDQ         $24, SI
	ADDQ         $64, DI
	DECQ         CX
	JNZ          loop

store:
	VBROADCASTSS alpha+40(FP), Y15
	VMOVUPS      (R12), Y12
	VMOVUPS      32(R12), Y13
	VFMADD231PS  Y0, Y15, Y12
	VFMADD231PS  Y1, Y15, Y13
	VMOVUPS      Y12, (DX)
	VMOVUPS      Y13, 32(DX)
	ADDQ         R8, DX
	ADDQ         R13, R12
	VMOVUPS      (R12), Y12
	VMOVUPS      32(R12), Y13
	VFMADD231PS  Y2, Y15, Y12
	VFMADD231PS  Y3, Y15, Y13
	VMOVUPS      Y12, (DX)
	VMOVUPS      Y13, 32(DX)
	ADDQ         R8, DX
	ADDQ         R13, R12
	VMOVUPS      (R12), Y12
	VMOVUPS      32(R12), Y13
	VFMADD231PS  Y4, Y15, Y12
	VFMADD231PS  Y5, Y15, Y13
	VMOVUPS      Y12, (DX)
	VMOVUPS      Y13, 32(DX)
	ADDQ         R8, DX
	ADDQ         R13, R12
	VMOVUPS      (R12), Y12
	VMOVUPS      32(R12), Y13
	VFMADD231PS  Y6, Y15, Y12
	VFMADD231PS  Y7, Y15, Y13
	VMOVUPS      Y12, (DX)
	VMOVUPS      Y13, 32(DX)
	ADDQ         R8, DX
	ADDQ         R13, R12
	VMOVUPS      (R12), Y12
	VMOVUPS      32(R12), Y13
	VFMADD231PS  Y8, Y15, Y12
	VFMADD231PS  Y9, Y15, Y13
	VMOVUPS      Y12, (DX)
	VMOVUPS      Y13, 32(DX)
	ADDQ         R8, DX
	ADDQ         R13, R12
	VMOVUPS      (R12), Y12
	VMOVUPS      32(R12), Y13
	VFMADD231PS  Y10, Y15, Y12
	VFMADD231PS  Y11, Y15, Y13
	VMOVUPS      Y12, (DX)
	VMOVUPS      Y13, 32(DX)
	VZEROUPPER
	RET

// func dotRows(q, k *float32, n, hd int, out *float32)
//
// out[j] = sum_i q[i]*k[j*hd+i] for j < n; hd is a multiple of 8.
TEXT ·dotRows(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ hd+24(FP), R9
	MOVQ out+32(FP), DX
	TESTQ CX, CX
	JZ    dotdone

dotrow:
	VXORPS Y0, Y0, Y0
	MOVQ   R9, R10
	MOVQ   SI, R11

dotchunk:
	VMOVUPS     (R11), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ        $32, R11
	ADDQ        $32, DI
	SUBQ        $8, R10
	JNZ         dotchunk
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (DX)
	ADDQ         $4, DX
	DECQ         CX
	JNZ          dotrow

dotdone:
	VZEROUPPER
	RET

// func axpyRows(p, v *float32, n, hd int, out *float32)
//
// out[i] = sum_j p[j]*v[j*hd+i] for i < hd; hd is a multiple of 8, at
// most 64.
TEXT ·axpyRows(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ hd+24(FP), R9
	MOVQ out+32(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ   R9, R8
	SHLQ   $2, R8
	TESTQ  CX, CX
	JZ     axstore
	CMPQ   R9, $32
	JG     axwide

axnarrow:
	// hd <= 32: four accumulators, unused lanes stay zero.
	VBROADCASTSS (SI), Y8
	VFMADD231PS  (DI), Y8, Y0
	CMPQ         R9, $8
	JE           axnext
	VFMADD231PS  32(DI), Y8, Y1
	CMPQ         R9, $16
	JE           axnext
	VFMADD231PS  64(DI), Y8, Y2
	CMPQ         R9, $24
	JE           axnext
	VFMADD231PS  96(DI), Y8, Y3

axnext:
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ  axnarrow
	JMP  axstore

axwide:
	VBROADCASTSS (SI), Y8
	VFMADD231PS  (DI), Y8, Y0
	VFMADD231PS  32(DI), Y8, Y1
	VFMADD231PS  64(DI), Y8, Y2
	VFMADD231PS  96(DI), Y8, Y3
	VFMADD231PS  128(DI), Y8, Y4
	CMPQ         R9, $40
	JE           axwnext
	VFMADD231PS  160(DI), Y8, Y5
	CMPQ         R9, $48
	JE           axwnext
	VFMADD231PS  192(DI), Y8, Y6
	CMPQ         R9, $56
	JE           axwnext
	VFMADD231PS  224(DI), Y8, Y7

axwnext:
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ  axwide

axstore:
	// Store hd floats: whole 8-float chunks in order.
	VMOVUPS Y0, (DX)
	CMPQ    R9, $8
	JE      axdone
	VMOVUPS Y1, 32(DX)
	CMPQ    R9, $16
	JE      axdone
	VMOVUPS Y2, 64(DX)
	CMPQ    R9, $24
	JE      axdone
	VMOVUPS Y3, 96(DX)
	CMPQ    R9, $32
	JE      axdone
	VMOVUPS Y4, 128(DX)
	CMPQ    R9, $40
	JE      axdone
	VMOVUPS Y5, 160(DX)
	CMPQ    R9, $48
	JE      axdone
	VMOVUPS Y6, 192(DX)
	CMPQ    R9, $56
	JE      axdone
	VMOVUPS Y7, 224(DX)

axdone:
	VZEROUPPER
	RET
