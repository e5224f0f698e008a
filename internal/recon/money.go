package recon

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParsePaise reads a rupee amount written the Indian way ("2,71,500.00", "12.5", "650")
// into paise. Commas, when present, must follow the Indian grouping (last group of three,
// the others of two); at most two decimals; an optional leading minus. Anything else,
// including an amount beyond int64 paise, is an error wrapping ErrInvalidAmount.
func ParsePaise(s string) (int64, error) {
	v, reason := parsePaise(s)
	if reason != "" {
		return 0, fmt.Errorf("parsing amount %q: %w: %s", s, ErrInvalidAmount, reason)
	}
	return v, nil
}

func parsePaise(s string) (int64, string) {
	neg := false
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		neg, s = true, rest
	}
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" {
		return 0, "no rupees"
	}
	if hasDot && (len(frac) == 0 || len(frac) > 2) {
		return 0, "one or two decimals expected"
	}
	if !allDigits(frac) {
		return 0, "decimals must be digits"
	}
	if strings.Contains(intPart, ",") {
		if reason := checkIndianGrouping(intPart); reason != "" {
			return 0, reason
		}
		intPart = strings.ReplaceAll(intPart, ",", "")
	}
	if !allDigits(intPart) {
		return 0, "rupees must be digits"
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++ // the magnitude of math.MinInt64
	}
	var u uint64
	for i := 0; i < len(intPart); i++ {
		d := uint64(intPart[i] - '0')
		if u > (limit-d)/10 {
			return 0, "too large"
		}
		u = u*10 + d
	}
	var p uint64
	switch len(frac) {
	case 1:
		p = uint64(frac[0]-'0') * 10
	case 2:
		p = uint64(frac[0]-'0')*10 + uint64(frac[1]-'0')
	}
	if u > (limit-p)/100 {
		return 0, "too large"
	}
	u = u*100 + p
	if neg {
		return int64(-u), "" // two's complement: -MaxInt64-1 wraps to MinInt64 exactly
	}
	return int64(u), ""
}

func checkIndianGrouping(s string) string {
	groups := strings.Split(s, ",")
	for i, g := range groups {
		want := 2
		switch {
		case i == len(groups)-1:
			want = 3
		case i == 0:
			if len(g) == 0 || len(g) > 2 || g[0] == '0' {
				return "misplaced comma"
			}
			continue
		}
		if len(g) != want {
			return "misplaced comma"
		}
	}
	return ""
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatPaise writes paise as rupees with two decimals and the Indian grouping:
// 27150000 is "2,71,500.00", -5 is "-0.05". ParsePaise reads it back exactly.
func FormatPaise(p int64) string {
	u := uint64(p)
	sign := ""
	if p < 0 {
		u, sign = -u, "-"
	}
	rupees := strconv.FormatUint(u/100, 10)
	var b strings.Builder
	b.WriteString(sign)
	if n := len(rupees); n > 3 {
		head := rupees[:n-3]
		first := len(head) % 2
		if first == 0 {
			first = 2
		}
		b.WriteString(head[:first])
		for i := first; i < len(head); i += 2 {
			b.WriteByte(',')
			b.WriteString(head[i : i+2])
		}
		b.WriteByte(',')
		b.WriteString(rupees[n-3:])
	} else {
		b.WriteString(rupees)
	}
	fmt.Fprintf(&b, ".%02d", u%100)
	return b.String()
}
