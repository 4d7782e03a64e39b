package local

// Decode-time attention of one query over a head's cached keys and values,
// stored [position][hd] contiguously.

// attnScores sets s[j] = scale·(q · k[j]) for j < len(s).
func attnScores(q, k, s []float32, hd int, scale float32) {
	n := len(s)
	if n == 0 {
		return
	}
	_ = k[n*hd-1]
	if hasKernel && hd%8 == 0 {
		dotRows(&q[0], &k[0], n, hd, &s[0])
		for j := range s {
			s[j] *= scale
		}
		return
	}
	for j := range s {
		row := k[j*hd : (j+1)*hd]
		var acc float32
		for i, v := range q[:hd] {
			acc += v * row[i]
		}
		s[j] = acc * scale
	}
}

// attnMix sets out = Σ_j p[j]·v[j] over j < len(p).
func attnMix(p, v, out []float32, hd int) {
	n := len(p)
	out = out[:hd]
	if n == 0 {
		clear(out)
		return
	}
	_ = v[n*hd-1]
	if hasKernel && hd%8 == 0 && hd <= 64 {
		axpyRows(&p[0], &v[0], n, hd, &out[0])
		return
	}
	clear(out)
	for j, w := range p {
		row := v[j*hd : (j+1)*hd]
		for i, x := range row {
			out[i] += w * x
		}
	}
}
