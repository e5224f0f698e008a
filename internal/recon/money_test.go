package recon

import (
	"errors"
	"math"
	"testing"
)

func TestParsePaise(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
	}{
		{"2,71,500.00", 27150000},
		{"12,34,567.50", 123456750},
		{"3,150.00", 315000},
		{"650.00", 65000},
		{"12.50", 1250},
		{"3.25", 325},
		{"12.5", 1250},
		{"650", 65000},
		{"0.05", 5},
		{"0", 0},
		{"-0.00", 0},
		{"-1,234.50", -123450},
		{"1,00,00,000.00", 1000000000},
		{"100000.00", 10000000},
		{"92,23,37,20,36,85,47,758.07", math.MaxInt64},
		{"-92,23,37,20,36,85,47,758.08", math.MinInt64},
	}
	for _, tt := range tests {
		got, err := ParsePaise(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParsePaise(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParsePaiseRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "-", ".", ".50", "12.", "12.345", "1.5e3", "abc", "12,50", "271,500.00", "2,71,50.00",
		",500.00", "1,,000.00", "0,500.00", "1,000,000.00", "+12.00", " 12.00", "12.00 ", "12.0a",
		"--1.00", "1-2.00", "१२.००", "92,23,37,20,36,85,47,758.08", "-92,23,37,20,36,85,47,758.09",
		"99999999999999999999.00", "NaN", "Inf",
	} {
		if got, err := ParsePaise(in); !errors.Is(err, ErrInvalidAmount) {
			t.Errorf("ParsePaise(%q) = %d, %v; want ErrInvalidAmount", in, got, err)
		}
	}
}

func TestFormatPaise(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   int64
		want string
	}{
		{27150000, "2,71,500.00"},
		{123456750, "12,34,567.50"},
		{315000, "3,150.00"},
		{65000, "650.00"},
		{1250, "12.50"},
		{5, "0.05"},
		{0, "0.00"},
		{-5, "-0.05"},
		{-123450, "-1,234.50"},
		{100000, "1,000.00"},
		{10000000, "1,00,000.00"},
		{1000000000, "1,00,00,000.00"},
		{math.MaxInt64, "92,23,37,20,36,85,47,758.07"},
		{math.MinInt64, "-92,23,37,20,36,85,47,758.08"},
	}
	for _, tt := range tests {
		if got := FormatPaise(tt.in); got != tt.want {
			t.Errorf("FormatPaise(%d) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzParsePaise: junk is an error, never a panic; what parses formats back to the
// same value.
func FuzzParsePaise(f *testing.F) {
	for _, s := range []string{"2,71,500.00", "12.5", "-0.05", "1,000,000.00", "", "12.345", "9,99,99,99,99,99,99,999.99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePaise(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAmount) {
				t.Fatalf("ParsePaise(%q): error %v does not wrap ErrInvalidAmount", s, err)
			}
			return
		}
		back, err := ParsePaise(FormatPaise(p))
		if err != nil || back != p {
			t.Fatalf("ParsePaise(%q) = %d, formatted %q, read back %d, %v", s, p, FormatPaise(p), back, err)
		}
	})
}

// FuzzFormatPaise: every int64 formats to a string ParsePaise reads back exactly.
func FuzzFormatPaise(f *testing.F) {
	for _, p := range []int64{0, 5, -5, 27150000, math.MaxInt64, math.MinInt64} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p int64) {
		s := FormatPaise(p)
		back, err := ParsePaise(s)
		if err != nil || back != p {
			t.Fatalf("FormatPaise(%d) = %q, read back %d, %v", p, s, back, err)
		}
	})
}
