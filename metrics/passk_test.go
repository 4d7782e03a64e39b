package metrics

import (
	"math"
	"math/bits"
	"testing"
)

// bruteForce enumerates every k-subset of n samples, the first c of which
// are correct, and returns the fraction that contain a correct one.
func bruteForce(n, c, k int) float64 {
	hit, all := 0, 0
	correct := uint(1)<<c - 1
	for m := uint(0); m < 1<<n; m++ {
		if bits.OnesCount(m) != k {
			continue
		}
		all++
		if m&correct != 0 {
			hit++
		}
	}
	return float64(hit) / float64(all)
}

func TestPassAtKTable(t *testing.T) {
	cases := []struct {
		n, c, k int
		want    float64
	}{
		{1, 0, 1, 0},
		{1, 1, 1, 1},
		{8, 0, 8, 0},
		{8, 1, 8, 1}, // n == k: any correct
		{8, 3, 1, 3.0 / 8},
		{4, 1, 2, 0.5},        // 1 - C(3,2)/C(4,2) = 1 - 3/6
		{5, 2, 2, 0.7},        // 1 - C(3,2)/C(5,2) = 1 - 3/10
		{10, 3, 4, 1 - 1.0/6}, // 1 - C(7,4)/C(10,4) = 1 - 35/210
		{6, 5, 2, 1},          // n-c < k
	}
	for _, tc := range cases {
		got, err := PassAtK(tc.n, tc.c, tc.k)
		if err != nil {
			t.Fatalf("PassAtK(%d,%d,%d): %v", tc.n, tc.c, tc.k, err)
		}
		if math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("PassAtK(n=%d,c=%d,k=%d) = %v, want %v", tc.n, tc.c, tc.k, got, tc.want)
		}
	}
}

func TestPassAtKBruteForce(t *testing.T) {
	for n := 1; n <= 12; n++ {
		for k := 1; k <= n; k++ {
			for c := 0; c <= n; c++ {
				got, err := PassAtK(n, c, k)
				if err != nil {
					t.Fatal(err)
				}
				if want := bruteForce(n, c, k); math.Abs(got-want) > 1e-12 {
					t.Errorf("PassAtK(n=%d,c=%d,k=%d) = %v, brute force %v", n, c, k, got, want)
				}
			}
		}
	}
}

func TestPassAtKInvalid(t *testing.T) {
	for _, tc := range []struct{ n, c, k int }{
		{8, 1, 0}, {4, 1, 8}, {4, -1, 2}, {4, 5, 2}, {0, 0, 0},
	} {
		if got, err := PassAtK(tc.n, tc.c, tc.k); err == nil {
			t.Errorf("PassAtK(%d,%d,%d) = %v, want an error", tc.n, tc.c, tc.k, got)
		}
	}
}

// Large n: the product form must neither overflow nor lose the value that
// the closed form gives for c = 1, k/n.
func TestPassAtKLarge(t *testing.T) {
	got, err := PassAtK(100000, 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	if want := 7.0 / 100000; math.Abs(got-want) > 1e-15 {
		t.Fatalf("PassAtK(1e5,1,7) = %v, want %v", got, want)
	}
}

func FuzzPassAtK(f *testing.F) {
	f.Add(8, 3, 8)
	f.Add(100, 1, 10)
	f.Add(1, 0, 1)
	f.Add(1000, 999, 500)
	f.Fuzz(func(t *testing.T, n, c, k int) {
		if k < 1 || n < k || c < 0 || c > n {
			if _, err := PassAtK(n, c, k); err == nil {
				t.Fatalf("PassAtK(%d,%d,%d) accepted invalid arguments", n, c, k)
			}
			return
		}
		if n > 1<<20 {
			return // valid, but the product would take too long for a fuzz input
		}
		p, err := PassAtK(n, c, k)
		if err != nil {
			t.Fatal(err)
		}
		if !(p >= 0 && p <= 1) {
			t.Fatalf("PassAtK(%d,%d,%d) = %v, outside [0,1]", n, c, k, p)
		}
		if c < n {
			q, err := PassAtK(n, c+1, k)
			if err != nil {
				t.Fatal(err)
			}
			if q < p {
				t.Fatalf("PassAtK(%d,%d,%d) = %v > PassAtK(c+1) = %v: not monotone in c", n, c, k, p, q)
			}
		}
		if c == 0 && p != 0 || n-c < k && p != 1 {
			t.Fatalf("PassAtK(%d,%d,%d) = %v at an end of the range", n, c, k, p)
		}
	})
}
