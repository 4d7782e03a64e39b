package report

import (
	"testing"
	"time"
)

func TestFormatting(t *testing.T) {
	x := 0.1234
	var none *float64
	n := int64(-1234567)
	cases := []struct{ got, want string }{
		{count(int64(0)), "0"},
		{count(999), "999"},
		{count(int64(1000)), "1,000"},
		{count(int64(3000000)), "3,000,000"},
		{count(&n), "-1,234,567"},
		{count("x"), "–"},
		{f3(&x), "0.123"},
		{f3(none), "–"},
		{f3(1.0), "1.000"},
		{pct(&x), "12.3%"},
		{pct(none), "–"},
		{seconds(0), "–"},
		{seconds(0.25), "250ms"},
		{seconds(42.04), "42s"},
		{seconds(185), "3m05s"},
		{seconds(8040), "2h14m"},
		{compact(950), "950"},
		{compact(12000), "12k"},
		{compact(1500000), "1.5M"},
		{when((*time.Time)(nil)), "–"},
		{when(time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))), "2026-03-01 11:00:00 UTC"},
		{shortID("sha256:0123456789abcdef0123"), "sha256:0123456789ab"},
		{shortID("h0"), "h0"},
		{firstLine("  trainer exited 1\nstack…"), "trainer exited 1"},
	}
	for i, c := range cases {
		if c.got != c.want {
			t.Errorf("case %d: %q, want %q", i, c.got, c.want)
		}
	}
}
