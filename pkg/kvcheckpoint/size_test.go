package kvcheckpoint_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// parkedRecord is a record whose 8 steps each list MaxParkedListed parked items; verified steps
// carry every field a commit writes.
func parkedRecord(item, reason string, verified bool) *kc.Record {
	r := newRecord("run-2026-10-13-ldh")
	r.Epoch = testEpoch
	for _, name := range pipeline {
		s := r.Step(name)
		if verified {
			s.Status = kc.Verified
			s.StartedAt = kc.Ptr("2026-10-13T22:00:04Z")
			s.FinishedAt = kc.Ptr("2026-10-13T22:00:09Z")
			s.Output = &kc.Output{Object: "run-2026-10-13-ldh/" + name + "/" + strings.Repeat("a", 64), Digest: "SHA-256=" + strings.Repeat("b", 43), Size: 41230}
			s.InputFingerprint = kc.Ptr("sha256:" + strings.Repeat("c", 64))
			s.Versions = kc.Versions{Code: kc.Ptr("v0.1.0")}
			s.Token = kc.Ptr(uint64(18760))
			s.Effects = &kc.Effects{Keys: 40}
		}
		for i := range kc.MaxParkedListed {
			s.Parked = append(s.Parked, kc.Parked{Item: fmt.Sprintf("%s%02d", item, i), Reason: reason})
		}
		s.ParkedCount = 500
		s.ParkedArtifact = &kc.Output{Object: "run-2026-10-13-ldh/" + name + "/parked", Digest: "SHA-256=p", Size: 30000}
	}
	return r
}

func TestEncodeSize(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rec      *kc.Record
		tooLarge bool
	}{
		{"short items, pending steps", parkedRecord("i", "r", false), false},
		{"invoice numbers and reasons, verified steps", parkedRecord("INV-20261013-01", "no line items found", true), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := kc.Encode(tc.rec)
			if tc.tooLarge {
				if !errors.Is(err, kc.ErrTooLarge) {
					t.Fatalf("Encode = %d bytes, %v; want ErrTooLarge", len(b), err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if len(b) > kc.MaxSize {
				t.Fatalf("Encode returned %d bytes, over MaxSize %d", len(b), kc.MaxSize)
			}
			if _, err := kc.Decode(b); err != nil {
				t.Fatalf("Decode: %v", err)
			}
		})
	}
}

// TestEncodeSizeBoundary: MaxSize bytes are written, one more is refused.
func TestEncodeSizeBoundary(t *testing.T) {
	r := newRecord("run-1")
	base, err := kc.Encode(r)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	r.NextAction = strings.Repeat("x", kc.MaxSize-len(base))
	b, err := kc.Encode(r)
	if err != nil || len(b) != kc.MaxSize {
		t.Fatalf("Encode of a %d-byte record = %d bytes, %v; want it written", kc.MaxSize, len(b), err)
	}
	r.NextAction += "x"
	if _, err := kc.Encode(r); !errors.Is(err, kc.ErrTooLarge) {
		t.Fatalf("Encode of a %d-byte record = %v, want ErrTooLarge", kc.MaxSize+1, err)
	}
}

// TestTooLargeWritesNothing: a write that would exceed MaxSize is refused before it is sent.
func TestTooLargeWritesNothing(t *testing.T) {
	f := setup(t)
	ctx := testContext(t)
	f.created(t, "run-1")
	h := f.take(t, "run-1", "fetch", ownerA)
	_, rev := f.load(t, "run-1")
	big := func(r *kc.Record) error { r.NextAction = strings.Repeat("x", kc.MaxSize); return nil }
	if err := h.Write(ctx, big); !errors.Is(err, kc.ErrTooLarge) {
		t.Errorf("Write = %v, want ErrTooLarge", err)
	}
	if _, _, err := f.store.Mutate(ctx, "run-1", big); !errors.Is(err, kc.ErrTooLarge) {
		t.Errorf("Mutate = %v, want ErrTooLarge", err)
	}
	if _, now := f.load(t, "run-1"); now != rev {
		t.Errorf("revision %d, was %d: a too-large record was written", now, rev)
	}
	if _, err := f.store.Create(ctx, func() *kc.Record { r := newRecord("run-2"); big(r); return r }()); !errors.Is(err, kc.ErrTooLarge) {
		t.Errorf("Create = %v, want ErrTooLarge", err)
	}
}
