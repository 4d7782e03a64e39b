package metrics

import "fmt"

// PassAtK is the unbiased estimator of pass@k from n samples of which c are
// correct (Chen et al., 2021): the probability that k samples drawn without
// replacement from the n contain at least one correct one,
// 1 - C(n-c,k)/C(n,k). It needs 1 ≤ k ≤ n and 0 ≤ c ≤ n.
//
// The ratio of binomials is computed as the product of (1 - k/i) for i from
// n down to n-c+1, which never forms a large binomial and stays in [0,1].
// Multiplying the factors in that order makes the result non-decreasing in
// c in floating point too: one more correct sample appends one more factor
// ≤ 1 to the same product.
func PassAtK(n, c, k int) (float64, error) {
	switch {
	case k < 1:
		return 0, fmt.Errorf("pass@k: k = %d, want k ≥ 1", k)
	case n < k:
		return 0, fmt.Errorf("pass@k: %d samples, fewer than k = %d", n, k)
	case c < 0 || c > n:
		return 0, fmt.Errorf("pass@k: %d correct of %d samples", c, n)
	}
	if n-c < k {
		// Every draw of k includes a correct sample.
		return 1, nil
	}
	miss := 1.0
	kf := float64(k)
	for i := n; i > n-c; i-- {
		miss *= 1 - kf/float64(i)
	}
	return 1 - miss, nil
}
